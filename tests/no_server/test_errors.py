"""The error tree's first split, "was anything written?": every error's
docstring opens with the answer, and the classes agree with it; and an error's message
says what happened in words, never a script's code or a repr. No server."""

from __future__ import annotations

import inspect
import re
from collections.abc import Callable
from datetime import datetime, timedelta

import pytest

import redis_msglog
from redis_msglog import errors

ANSWERS = ("Nothing was written.", "It may have been written.", "It was written.")
ERRORS = [
    kind
    for kind in vars(errors).values()
    if inspect.isclass(kind)
    and issubclass(kind, errors.MessageLogError)
    and kind is not errors.MessageLogError
]


def answer(kind: type) -> str:
    return next(line for line in ANSWERS if (kind.__doc__ or "").startswith(line))


@pytest.mark.parametrize("kind", ERRORS, ids=lambda kind: kind.__name__)
def test_each_error_says_first_whether_anything_was_written(kind: type) -> None:
    assert (kind.__doc__ or "").startswith(ANSWERS), kind.__doc__
    assert kind.__name__ in redis_msglog.__all__


@pytest.mark.parametrize("kind", ERRORS, ids=lambda kind: kind.__name__)
def test_the_first_split_of_the_tree_is_the_answer(kind: type) -> None:
    """A StorageError means nothing was written; the two other answers are one class
    each, directly under MessageLogError, so that no ``except`` for server failures
    catches them."""
    if issubclass(kind, errors.StorageError):
        assert answer(kind) == "Nothing was written."
    elif answer(kind) == "It may have been written.":
        assert kind in (errors.AppendInDoubtError, errors.ScopeErasureIncompleteError)
        assert kind.__bases__ == (errors.MessageLogError,)
    elif answer(kind) == "It was written.":
        assert kind is errors.NotDurableError
        assert kind.__bases__ == (errors.MessageLogError,)


def test_an_append_in_doubt_is_not_a_server_failure() -> None:
    in_doubt = errors.AppendInDoubtError("lost the reply", idempotency_key="k")
    assert not isinstance(in_doubt, (errors.StorageError, errors.ServerUnavailableError))
    assert isinstance(in_doubt, errors.MessageLogError)
    assert issubclass(errors.PagedReadRetryError, errors.StorageError)  # its own class


def test_the_http_api_still_answers_an_append_in_doubt_with_503() -> None:
    pytest.importorskip("starlette")
    from redis_msglog.web._errors import error_response

    assert error_response(errors.AppendInDoubtError("lost")).status_code == 503
    assert error_response(errors.ServerUnavailableError("away")).status_code == 503


# -- an error says what happened in words ------------------------------------

# Each error code of the scripts, with a reply as lua/*.lua writes it.
SCRIPT_REPLIES = {
    "MSGLOG_BADSEQ": 'MSGLOG_BADSEQ seq counter k:seq holds "x", not a seq',
    "MSGLOG_BEHIND": "MSGLOG_BEHIND seq counter k:seq (3) is behind the last entry of stream s",
    "MSGLOG_AHEAD": "MSGLOG_AHEAD seq counter k:seq (9) is ahead of the last entry of stream s",
    "MSGLOG_FOREIGN": "MSGLOG_FOREIGN stream s ends with entry 5-1, not one of the form <seq>-<at>",
    "MSGLOG_BADRECORD": "MSGLOG_BADRECORD idempotency record k:idem:x holds junk",
    "MSGLOG_KEYREUSED": "MSGLOG_KEYREUSED idempotency key k:idem:x was used for a different batch",
    "MSGLOG_CONFLICT": "MSGLOG_CONFLICT 5 is the last seq of s, not 3",
    "MSGLOG_BADEDIT": "MSGLOG_BADEDIT retract: seq 9 is not a row of the view",
    "MSGLOG_TOOBIG": "MSGLOG_TOOBIG redact: seq 9 would rewrite more than 8388608 bytes of "
    "the stream (max_rewrite_bytes; at least 8388700)",
    "MSGLOG_BADVIEW": "MSGLOG_BADVIEW view k:view holds a segment 'x' (set by hand?)",
    "MSGLOG_STALE": "MSGLOG_STALE producer p of k:producers no longer holds the result of call 3",
    "MSGLOG_BADBLOB": "MSGLOG_BADBLOB 0 1 " + "ab" * 32,
    "MSGLOG_ERASED": "MSGLOG_ERASED k:seq: the conversation was erased",
    "MSGLOG_SCOPE": "MSGLOG_SCOPE acme/u",
    "MSGLOG_UNOWNED": "MSGLOG_UNOWNED k:owner is missing",
    "MSGLOG_UNSCOPED": "MSGLOG_UNSCOPED k:stream has entries and no owner record",
    "MSGLOG_SCOPE_ERASED": "MSGLOG_SCOPE_ERASED k:scope-erased",
    "MSGLOG_BADOWNER": "MSGLOG_BADOWNER k:owner has no created time",
    "MSGLOG_CURRENCY": "MSGLOG_CURRENCY USD",
    "MSGLOG_USAGEBIG": "MSGLOG_USAGEBIG k:usage",
    "MSGLOG_BADUSAGE": "MSGLOG_BADUSAGE usage totals k:usage hold x as input",
    "MSGLOG_DRAFTGONE": "MSGLOG_DRAFTGONE draft 0f is not open",
    "MSGLOG_DRAFTENDED": "MSGLOG_DRAFTENDED interrupted",
    "MSGLOG_DRAFTBIG": "MSGLOG_DRAFTBIG 8388000",
    "MSGLOG_DRAFTS": "MSGLOG_DRAFTS 100 drafts held",
    "MSGLOG_DRAFTID": "MSGLOG_DRAFTID draft 0f exists",
    "MSGLOG_DRAFTOWNER": "MSGLOG_DRAFTOWNER draft 0f has another writer",
    "MSGLOG_BADDRAFT": 'MSGLOG_BADDRAFT draft 0f of k:drafts holds "x"',
    "MSGLOG_DRAFTSTATE": "MSGLOG_DRAFTSTATE draft 0f is open",
    "MSGLOG_DRAFTPOS": "MSGLOG_DRAFTPOS 7",
}


def test_every_script_error_code_is_covered() -> None:
    """A code a script gains is added to SCRIPT_REPLIES (and so checked below)."""
    from pathlib import Path

    lua = Path(redis_msglog.__file__).parent / "lua"
    codes = set()
    for script in lua.glob("*.lua"):
        for line in script.read_text().splitlines():
            if not line.lstrip().startswith("--"):
                codes.update(re.findall(r"'(MSGLOG_[A-Z_]+) ", line))
    assert codes == set(SCRIPT_REPLIES)


@pytest.mark.parametrize("code", sorted(SCRIPT_REPLIES))
@pytest.mark.parametrize("wrapped", [False, True], ids=["plain", "wrapped"])
def test_a_script_refusal_is_told_in_words(code: str, wrapped: bool) -> None:
    """The error's text never shows the script's code (``MSGLOG_KEYREUSED``...): it was a
    name for the client, and read to a person like a crash. The error type stays the
    code's (tests/no_server/test_plans.py maps each one), wrapped by a server or not."""
    from redis_msglog._core.lifecycle.scope import error_for
    from redis_msglog._core.steps import Refused

    reply = SCRIPT_REPLIES[code]
    if wrapped:  # how some servers (fakeredis) hand a script's error over
        reply = f"ERR Error running script: @user_script:1: {reply}"
    error = error_for(Refused(reply), "conv-1")
    assert "MSGLOG_" not in str(error), str(error)
    said = SCRIPT_REPLIES[code].split(" ", 1)[1]
    if code in ("MSGLOG_BADSEQ", "MSGLOG_AHEAD", "MSGLOG_KEYREUSED", "MSGLOG_STALE"):
        assert str(error).startswith(said), str(error)  # the script's own words, first


@pytest.mark.parametrize(
    "make, expected",
    [
        (lambda: redis_msglog.RetryPolicy(generated_key_ttl=timedelta(0)), "got 0 seconds"),
        (
            lambda: redis_msglog.RetryPolicy(generated_key_ttl=timedelta(milliseconds=500)),
            "got 0.5 seconds",
        ),
        (
            lambda: redis_msglog.Durability(replicas=1, timeout=timedelta(days=400)),
            "got 34560000 seconds (400 days, 0:00:00)",
        ),
        (
            lambda: redis_msglog.Durability(replicas=1, timeout=datetime(2026, 1, 1)),  # type: ignore[arg-type]
            "got 2026-01-01 00:00:00 (no time zone)",
        ),
        (
            lambda: redis_msglog.RetryPolicy(deadline=object()),  # type: ignore[arg-type]
            "got an object of type object",
        ),
    ],
)
def test_a_duration_or_an_object_in_an_error_is_in_words(
    make: Callable[[], object], expected: str
) -> None:
    """Was ``got datetime.timedelta(0)`` (``msglog erase --erased-for 0s`` said so too)."""
    with pytest.raises(errors.InvalidArgumentError) as caught:
        make()
    assert str(caught.value).endswith(expected), str(caught.value)
    assert "datetime." not in str(caught.value) and " at 0x" not in str(caught.value)
