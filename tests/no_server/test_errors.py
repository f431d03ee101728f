"""The error tree's first split, "was anything written?" (issue 24, item 5): every error's
docstring opens with the answer, and the classes agree with it. No server."""

from __future__ import annotations

import inspect

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
        assert kind is errors.AppendInDoubtError
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
    from redis_msglog.web._app import error_response

    assert error_response(errors.AppendInDoubtError("lost")).status_code == 503
    assert error_response(errors.ServerUnavailableError("away")).status_code == 503
