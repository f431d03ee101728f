"""Writes that would poison a conversation for every reader are refused, writing nothing:

- a blob reference the conversation does not hold (checked by the append script, on
  every write path: append, append_many, compact, replace, fork, ``msglog import``);
- a JSON value nested deeper than ``MAX_JSON_DEPTH`` (tool-call ``args`` and the
  ``arguments`` string, ``metadata``, ``extras``);
- a fork at a seq inside a compaction (a view that never existed).

"Nothing written" is checked by comparing ``DUMP`` of every key of the conversation."""

from __future__ import annotations

import hashlib
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

import orjson
import pytest
import redis
from click.testing import CliRunner
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from redis_msglog import (
    MAX_JSON_DEPTH,
    AsyncMessageLog,
    InvalidEditError,
    InvalidMessageError,
    MessageLog,
    StoredMessage,
)
from redis_msglog._cli import main
from redis_msglog._core.write.depth import text_too_deep
from redis_msglog.testing import EphemeralServer

from ..conftest import Env, SyncView, new_id

THRESHOLD = 1024
BIG = os.urandom(3000)
DIGEST = hashlib.sha256(BIG).hexdigest()
MADE_UP = hashlib.sha256(b"never stored").hexdigest()


def keys_of(log: Any) -> list[str]:
    k = log.keys
    return [k.seq, k.stream, k.blobs, k.view, k.hidden, k.producers]


def snapshot(raw: Any, *logs: Any) -> dict[str, Any]:
    """``DUMP`` of every key of the conversations (``None``: the key does not exist)."""
    return {key: raw.dump(key) for log in logs for key in keys_of(log)}


def image(data: bytes | None = None, blob: str | None = None, text: str = "look") -> dict[str, Any]:
    part: dict[str, Any] = {"type": "image", "media_type": "image/png"}
    part.update({"data": data} if data is not None else {"blob": blob})
    return {"role": "user", "content": [{"type": "text", "text": text}, part]}


def the_image(row: StoredMessage) -> Any:
    assert not isinstance(row.content, str)
    return row.content[1]


# -- blob references ----------------------------------------------------------------------


def test_a_reference_from_another_conversation_is_refused_with_the_way_to_copy(
    env: Env,
) -> None:
    src = env.log(blob_threshold=THRESHOLD)
    dst = env.log(blob_threshold=THRESHOLD)
    src.append(image(BIG))
    dst.add("user", "hello")
    before = snapshot(env.raw, src, dst)
    copied = src.all(blobs="refs")[0].as_message()  # what a UI reads, appended elsewhere
    with pytest.raises(InvalidMessageError, match=r"message 0: content\.1 refers to blob") as exc:
        dst.append(copied)
    assert exc.value.index == 0 and DIGEST in str(exc.value)
    assert 'blobs="hydrate"' in str(exc.value) and "as_message()" in str(exc.value)
    assert snapshot(env.raw, src, dst) == before  # nothing written anywhere
    assert [m.content for m in dst.all()] == ["hello"]  # every reader still works
    # The documented way: a hydrated row carries the bytes, stored again in dst.
    assert dst.append(src.all()[0].as_message()) == 2
    assert the_image(dst.all()[1]).data == BIG
    assert env.raw.hget(dst.keys.blobs, DIGEST) == BIG


def test_every_write_path_refuses_a_reference_the_log_does_not_hold(env: Env) -> None:
    log = env.log(blob_threshold=THRESHOLD)
    log.append_many([{"role": "user", "content": f"m{i}"} for i in range(3)])
    before = snapshot(env.raw, log)
    bad = image(blob=MADE_UP)
    calls: dict[str, Callable[[], Any]] = {
        "append": lambda: log.append(bad),
        "append_many": lambda: log.append_many([image(BIG), {"role": "user", "content": "x"}, bad]),
        "compact": lambda: log.compact([bad], through_seq=2),
        "replace": lambda: log.replace([{"role": "system", "content": "s"}, bad]),
    }
    expected_index = {"append": 0, "append_many": 2, "compact": 0, "replace": 1}
    for name, call in calls.items():
        with pytest.raises(InvalidMessageError, match=MADE_UP) as exc:
            call()
        assert exc.value.index == expected_index[name], name
        assert snapshot(env.raw, log) == before, name
    assert log.count() == 3 and len(log.all()) == 3


def test_a_reference_the_log_holds_or_the_call_brings_is_accepted(env: Env) -> None:
    seen: list[list[StoredMessage]] = []
    log = env.log(blob_threshold=THRESHOLD, on_append=seen.append)
    other = os.urandom(2000)
    # The bytes in message 0, the reference in message 1 of the same call; and a held
    # reference next to new bytes (the hook gets every row it can put bytes back in).
    assert log.append_many([image(BIG), image(blob=DIGEST)]) == 2
    assert log.append_many([image(other), image(blob=DIGEST)]) == 4
    # A summary that refers to an image the conversation holds.
    assert log.compact([image(blob=DIGEST, text="summary")], through_seq=2) == 6
    rows = log.all()
    assert [the_image(r).data for r in rows] == [BIG, other, BIG]
    assert the_image(seen[0][1]).data == BIG and the_image(seen[1][0]).data == other
    assert the_image(seen[1][1]).blob == DIGEST  # the hook: bytes stored earlier stay refs


def test_a_fork_carries_the_bytes_of_its_blobs(env: Env) -> None:
    log = env.log(blob_threshold=THRESHOLD)
    log.append(image(BIG))
    fork = log.fork(new_id())
    fork = SyncView(fork, env.loop) if isinstance(fork, AsyncMessageLog) else fork
    assert the_image(fork.all()[0]).data == BIG
    assert env.raw.hget(fork.keys.blobs, DIGEST) == BIG


def test_import_reports_a_reference_it_cannot_hold_and_writes_nothing(
    shared_server: Any, tmp_path: Path
) -> None:
    server: EphemeralServer = shared_server("redis")
    raw = redis.Redis.from_url(server.url)
    prefix = f"poison-{new_id()}"
    conversation = new_id()
    line = {"seq": 1, "at": "2026-01-01T00:00:00+00:00", **image(blob=MADE_UP)}
    line["content"][1] = {"type": "image", "media_type": "image/png", "blob": MADE_UP}
    path = tmp_path / "refs.jsonl"
    path.write_bytes(orjson.dumps(line) + b"\n")
    log = MessageLog(raw, conversation, prefix=prefix)
    before = snapshot(raw, log)
    result = CliRunner().invoke(
        main, ["--url", server.url, "--prefix", prefix, "import", str(path), conversation]
    )
    assert result.exit_code != 0, result.output
    assert "were not imported" in result.output and MADE_UP in result.output
    assert not result.output.startswith("imported")
    assert snapshot(raw, log) == before


@given(
    st.lists(
        st.sampled_from(["bytes", "held", "brought", "made-up", "text"]), min_size=1, max_size=5
    )
)
@settings(
    max_examples=40,
    deadline=None,
    derandomize=True,
    suppress_health_check=[HealthCheck.function_scoped_fixture],
)
def test_generated_batches_of_references(shared_server: Any, kinds: list[str]) -> None:
    """Accepted exactly when every reference is held or brought by the same call; else
    refused naming the first bad message, nothing written."""
    raw = redis.Redis.from_url(shared_server("redis").url)
    log = MessageLog(raw, new_id(), blob_threshold=THRESHOLD)
    held = os.urandom(2000)
    log.append(image(held))
    brought = os.urandom(2000)
    digest = {
        "held": hashlib.sha256(held).hexdigest(),
        "brought": hashlib.sha256(brought).hexdigest(),
        "made-up": hashlib.sha256(os.urandom(8)).hexdigest(),
    }
    batch = [image(brought)]  # the brought bytes come with message 0
    for kind in kinds:
        if kind == "bytes":
            batch.append(image(os.urandom(1500)))
        elif kind == "text":
            batch.append({"role": "user", "content": digest["made-up"]})
        else:
            batch.append(image(blob=digest[kind]))
    before = snapshot(raw, log)
    if "made-up" in kinds:
        with pytest.raises(InvalidMessageError) as exc:
            log.append_many(batch)
        assert exc.value.index == 1 + kinds.index("made-up")
        assert snapshot(raw, log) == before
    else:
        assert log.append_many(batch) == 1 + len(batch)
        assert len(log.all()) == 1 + len(batch)


# -- depth ---------------------------------------------------------------------------------


def nested(depth: int) -> Any:
    value: Any = 1
    for level in range(depth):
        value = [value] if level % 2 else {"k": value}
    return value


def call_with(**fields: Any) -> dict[str, Any]:
    return {
        "role": "assistant",
        "content": "",
        "toolCalls": [{"id": "c1", "name": "f", **fields}],
    }


def deep_messages(depth: int) -> dict[str, dict[str, Any]]:
    """A message carrying a value of ``depth`` levels in each place a message can."""
    value = nested(depth)
    text = orjson.dumps(value).decode() if depth <= 250 else "[" * depth + "]" * depth
    return {
        "tool_calls.0.args": call_with(args=value),
        "tool_calls.0.arguments": call_with(arguments=text),
        "tool_calls.0.extras": call_with(args={}, extras={"openai": nested(depth - 1)}),
        "metadata": {"role": "user", "content": "x", "metadata": {"m": nested(depth - 1)}},
        "extras": {"role": "user", "content": "x", "extras": {"openai": nested(depth - 1)}},
        "content.0.extras": {
            "role": "user",
            "content": [{"type": "text", "text": "x", "extras": {"openai": nested(depth - 1)}}],
        },
    }


@pytest.mark.parametrize("depth", [MAX_JSON_DEPTH + 1, 300, 1010])
def test_a_value_deeper_than_the_limit_is_refused_wherever_it_is(env: Env, depth: int) -> None:
    log = env.log()
    log.add("user", "hi")
    before = snapshot(env.raw, log)
    for where, msg in deep_messages(depth).items():
        for batch in ([msg], [{"role": "user", "content": "ok"}, msg]):
            with pytest.raises(InvalidMessageError, match=rf"message {len(batch) - 1}: {where} "):
                log.append_many(batch)
            assert snapshot(env.raw, log) == before, where
        with pytest.raises(InvalidMessageError, match=rf"message 0: {where} nests deeper"):
            log.replace([msg])
        assert snapshot(env.raw, log) == before, where


def test_a_value_at_the_limit_is_written_and_every_reader_takes_it(env: Env) -> None:
    log = env.log()
    messages = list(deep_messages(MAX_JSON_DEPTH).values())
    assert log.append_many(messages) == len(messages)
    for _ in range(2):  # the second read compares with the read cache's rows
        assert len(log.all()) == len(messages)
    assert len(log.last(3)) == 3
    for export in (log.to_openai, log.to_anthropic, log.to_responses, log.to_langchain):
        orjson.dumps(export())


def test_shallow_broken_arguments_are_kept(env: Env) -> None:
    log = env.log()
    broken = ['{"a": [1, 2', "not json", '{"a": "' + "[" * 500, "]" * 200 + "{}"]
    log.append_many([call_with(arguments=text) for text in broken])
    calls = [row.tool_calls[0] for row in log.all() if row.tool_calls]
    assert [c.arguments for c in calls] == broken


def reference_depth(text: str) -> int:
    """The nesting of brackets outside string literals, one character at a time: a
    backslash escapes a following backslash or quote (in valid JSON, only inside a
    string), and a stray closer never takes it below 0."""
    depth = deepest = 0
    in_string = False
    chars = iter(text)
    for char in chars:
        if char == "\\":
            following = next(chars, "")
            if following in ("\\", '"', ""):
                continue
            char = following
        if char == '"':
            in_string = not in_string
        elif in_string:
            continue
        elif char in ("[", "{"):
            depth += 1
            deepest = max(deepest, depth)
        elif char in ("]", "}"):
            depth = max(depth - 1, 0)
    return deepest


@given(st.text(alphabet='[]{}"\\a,:', max_size=400), st.integers(0, 70))
@settings(max_examples=500, derandomize=True)
def test_the_depth_of_an_arguments_text_is_its_bracket_nesting(text: str, limit: int) -> None:
    assert text_too_deep(text, limit) == (reference_depth(text) > limit)


json_values = st.recursive(
    st.none() | st.integers(-1000, 1000) | st.text(alphabet='[]{}"\\ab', max_size=5),
    lambda inner: (
        st.lists(inner, max_size=2) | st.dictionaries(st.text(max_size=2), inner, max_size=2)
    ),
    max_leaves=200,
)


@given(json_values, st.integers(min_value=0, max_value=40), st.booleans())
@settings(
    max_examples=60,
    deadline=None,
    derandomize=True,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
def test_generated_arguments_are_refused_exactly_when_too_deep(
    shared_server: Any, value: Any, wrap: int, truncate: bool
) -> None:
    """Model output: a JSON value wrapped in ``wrap`` arrays (to reach the limit), maybe
    cut short; refused (nothing written) exactly when it nests deeper than the limit."""
    raw = redis.Redis.from_url(shared_server("redis").url)
    log = MessageLog(raw, new_id())
    text = "[" * (MAX_JSON_DEPTH - 20 + wrap) + orjson.dumps(value).decode()
    text += "]" * (MAX_JSON_DEPTH - 20 + wrap)
    if truncate:
        text = text[: len(text) * 2 // 3]
    before = snapshot(raw, log)
    if reference_depth(text) > MAX_JSON_DEPTH:
        with pytest.raises(InvalidMessageError, match="nests deeper"):
            log.append(call_with(arguments=text))
        assert snapshot(raw, log) == before
    else:
        assert log.append(call_with(arguments=text)) == 1
        assert log.all()[0].tool_calls[0].arguments == text  # type: ignore[index]


# -- fork inside a compaction ----------------------------------------------------------


def test_a_fork_inside_a_compaction_is_refused(env: Env) -> None:
    log = env.log()
    log.append_many([{"role": "user", "content": c} for c in "abcd"])  # 1..4
    summary = [{"role": "system", "content": "s1"}, {"role": "system", "content": "s2"}]
    assert log.compact(summary, through_seq=2) == 7  # entry 5, summary 6 and 7; c, d kept
    log.add("user", "e")  # 8
    source = snapshot(env.raw, log)
    for at_seq in (5, 6):  # [c, d] and [s1, c, d]: views no reader ever saw
        target = env.log()
        with pytest.raises(InvalidEditError, match=r"Fork at seq 4 \(before it\) or 7"):
            log.fork(target.conversation, at_seq=at_seq)
        assert set(snapshot(env.raw, target).values()) == {None}  # not even created
    assert snapshot(env.raw, log) == source
    assert views_of_forks(env, log, 4, 7, 8) == {
        4: list("abcd"),
        7: ["s1", "s2", "c", "d"],
        8: ["s1", "s2", "c", "d", "e"],
    }


def views_of_forks(env: Env, log: Any, *seqs: int) -> dict[int, list[str]]:
    views = {}
    for at_seq in seqs:
        fork = log.fork(new_id(), at_seq=at_seq)
        fork = SyncView(fork, env.loop) if isinstance(fork, AsyncMessageLog) else fork
        views[at_seq] = [m.text for m in fork.all()]
    return views


def test_a_fork_inside_a_replace_copies_a_prefix_of_its_messages(env: Env) -> None:
    """Nothing is kept after a replace's (or a fork's) messages: the rows up to a seq
    among them are the first rows of the view that followed, as after any append (the
    Pydantic AI store forks at a row written by a replace)."""
    log = env.log()
    log.append_many([{"role": "user", "content": c} for c in "ab"])  # 1, 2
    assert log.replace([{"role": "user", "content": c} for c in "xyz"]) == 6  # entry 3
    assert views_of_forks(env, log, 3, 4, 5, 6) == {3: [], 4: ["x"], 5: ["x", "y"], 6: list("xyz")}
    cleared = log.clear()  # a compaction of nothing: the view at its entry is empty
    assert views_of_forks(env, log, cleared) == {cleared: []}
    fork = log.fork(new_id(), at_seq=6)  # a fork's own copy: entry 1, messages 2..4
    fork = SyncView(fork, env.loop) if isinstance(fork, AsyncMessageLog) else fork
    assert views_of_forks(env, fork, 3) == {3: ["x", "y"]}


operations = st.lists(
    st.tuples(st.sampled_from(["append", "compact", "replace", "retract"]), st.integers(0, 3)),
    min_size=1,
    max_size=6,
)


@given(operations)
@settings(
    max_examples=25,
    deadline=None,
    derandomize=True,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
def test_a_fork_at_any_seq_copies_a_view_that_existed_or_is_refused(
    shared_server: Any, ops: list[tuple[str, int]]
) -> None:
    """After each call the view is recorded; a fork at a seq a call ended at copies that
    view, one inside a call a prefix of the view it made, or it is refused (only inside
    a compaction that keeps rows), writing nothing."""
    raw = redis.Redis.from_url(shared_server("redis").url)
    log = MessageLog(raw, new_id())
    views: dict[int, list[str]] = {0: []}  # the view after the call ending at each seq
    ends, counter = [0], iter(range(1000))

    def fresh(n: int) -> list[dict[str, Any]]:
        return [{"role": "user", "content": f"m{next(counter)}"} for _ in range(n)]

    for op, n in ops:
        rows = log.all()
        if op == "append":
            log.append_many(fresh(n + 1))
        elif op == "compact" and rows:
            log.compact(fresh(n), through_seq=rows[min(n, len(rows) - 1)].seq)
        elif op == "replace":
            log.replace(fresh(n))
        elif op == "retract" and rows:
            log.retract([rows[min(n, len(rows) - 1)].seq])
        else:
            continue
        ends.append(log.count())
        views[ends[-1]] = [m.text for m in log.all()]
    for at_seq in range(log.count() + 1):
        call_end = next(end for end in ends if end >= at_seq)
        target = MessageLog(raw, new_id())
        try:
            fork = log.fork(target.conversation, at_seq=at_seq)
        except InvalidEditError:
            assert at_seq != call_end  # a view that existed always forks
            assert set(snapshot(raw, target).values()) == {None}
            continue
        copied = [m.text for m in fork.all()]
        if at_seq == call_end:
            assert copied == views[at_seq]
        else:
            assert copied == views[call_end][: len(copied)]  # a prefix of what followed
