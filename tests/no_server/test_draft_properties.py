"""Drafts without a server (docs/drafts.md): the resume id parses exactly what it
formats and refuses anything else with a typed error; coalesced deltas spell what was
written; stored deltas that are not what a writer writes are a corrupt log, never a crash."""

from __future__ import annotations

import contextlib
from typing import Any

import orjson
import pytest
from hypothesis import given
from hypothesis import strategies as st

from redis_msglog import ConversationKeys, CorruptLogError, InvalidArgumentError
from redis_msglog._core.drafts.cursor import Resume, parse_resume
from redis_msglog._core.drafts.deltas import coalesce, decode, delta_document, spelled
from redis_msglog._core.drafts.plans import DraftPlans

DRAFT_IDS = st.text("0123456789abcdef", min_size=32, max_size=32)
RESUMES = st.builds(
    Resume,
    st.integers(0, 10**15 - 1),
    st.dictionaries(DRAFT_IDS, st.integers(0, 10**15 - 1), max_size=5),
)


@given(RESUMES)
def test_a_resume_id_parses_to_what_it_was_made_from(resume: Resume) -> None:
    assert parse_resume(str(resume)) == resume


@given(st.one_of(st.text(st.characters(codec=None)), st.binary(), st.integers(), st.none()))
def test_anything_else_is_a_resume_id_or_an_invalid_argument(value: Any) -> None:
    try:
        parsed = parse_resume(value)
    except InvalidArgumentError:
        return
    assert str(parsed) == (str(value) if isinstance(value, int) else value)


@pytest.mark.parametrize(
    "value",
    [
        "",
        "-1",
        "1.",
        "1.x",
        "\u0661",
        "1\n",
        f"1.{'a' * 32}:1\n",
        f"1.{'A' * 32}:1",
        "\u00b9",
        True,
    ],
)
def test_near_misses_are_refused(value: Any) -> None:
    with pytest.raises(InvalidArgumentError):
        parse_resume(value)


PIECES = st.lists(
    st.tuples(st.sampled_from("trc"), st.text(max_size=5), st.sampled_from(["c1", "c2"])),
    max_size=20,
)


@given(PIECES)
def test_coalesced_deltas_spell_what_was_written(pieces: list[tuple[str, str, str]]) -> None:
    pending: list[dict[str, Any]] = []
    named: set[str] = set()
    for kind, text, call in pieces:
        call_id = call if kind == "c" else None
        name = f"tool_{call}" if call_id and call_id not in named else None
        if name:
            named.add(call)
        coalesce(pending, delta_document(kind, text, call_id, name))
    stored = [(f"0-{i}", [b"d", orjson.dumps(d)]) for i, d in enumerate(pending, 1)]
    deltas = decode("d" * 32, stored, 0)
    spelt = spelled(deltas)
    assert "".join(spelt.text) == "".join(t for k, t, _ in pieces if k == "t")
    assert "".join(spelt.reasoning) == "".join(t for k, t, _ in pieces if k == "r")
    for call in named:
        [made] = [c for c in spelt.tool_calls() if c.id == call]
        assert made.arguments == "".join(t for k, t, c in pieces if k == "c" and c == call)


JSON_FIELDS = st.dictionaries(
    st.sampled_from(["k", "v", "id", "n"]),
    st.none() | st.integers(-5, 5) | st.text(max_size=3) | st.lists(st.none(), max_size=2),
).map(orjson.dumps)


FIELDS = st.lists(st.binary(max_size=8), max_size=4) | JSON_FIELDS.map(lambda d: [b"d", d])


@given(st.lists(st.tuples(st.text(max_size=6), FIELDS)), st.lists(FIELDS, max_size=4))
def test_stored_deltas_not_as_written_are_a_corrupt_log(
    entries: list[Any], in_order: list[Any]
) -> None:
    with contextlib.suppress(CorruptLogError):  # any other exception fails the test
        decode("d" * 32, entries, 0)
    ordered = [(f"0-{i}", fields) for i, fields in enumerate(in_order, 1)]  # IDs as written
    with contextlib.suppress(CorruptLogError):
        decode("d" * 32, ordered, 0)


@pytest.mark.parametrize(
    "doc",
    [{"k": []}, {"k": {}}, {"k": None}, {"k": "t", "v": 1}, {"k": "c", "v": ""},
     {"k": "t", "v": "", "n": 5}, {"k": "x", "v": ""}, [], "t", 7],
)  # fmt: skip
def test_each_shape_a_writer_never_stores_is_a_corrupt_log(doc: Any) -> None:
    with pytest.raises(CorruptLogError):
        decode("d" * 32, [("0-1", [b"d", orjson.dumps(doc)])], 0)


@pytest.mark.parametrize("role", [[], {}, None, 1, "robot"])
def test_a_state_with_a_role_a_writer_never_stores_is_a_corrupt_log(role: Any) -> None:
    plans = DraftPlans.__new__(DraftPlans)
    plans.keys = ConversationKeys.build("msglog", "c")
    state = orjson.dumps({"role": role, "status": "open"})
    with pytest.raises(CorruptLogError):
        plans._state("f" * 32, state)
