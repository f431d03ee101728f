"""The directory's members and cursors, without a server: any conversation id and scope
round-trip, and members sort newest-created first as Redis's BYLEX (byte order) does."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from redis_msglog import InvalidArgumentError
from redis_msglog._core.lifecycle.scope import (
    check_scope,
    decode_cursor,
    encode_cursor,
    member,
    micros_of,
    parse_member,
    time_of,
)

PART = st.text(
    st.characters(blacklist_categories=("Cs", "Cc", "Zs", "Zl", "Zp")), min_size=1, max_size=8
).filter(lambda p: not set(p) & set("/:|{}*?[]\\") and p.isprintable())
SCOPE = st.lists(PART, min_size=1, max_size=8).map(tuple)
IDS = st.text(st.characters(codec="utf-8"), min_size=1, max_size=30)
MICROS = st.integers(min_value=0, max_value=253_402_300_799_999_999)  # to year 9999


@given(created=MICROS, scope=SCOPE, conversation=IDS)
def test_a_member_and_its_cursor_round_trip(
    created: int, scope: tuple[str, ...], conversation: str
) -> None:
    assert check_scope(scope) == scope
    entry = member(created, scope, conversation)
    assert parse_member(entry) == (created, scope, conversation)
    assert decode_cursor(encode_cursor(entry)) == entry
    assert micros_of(time_of(created)) == created


@given(a=st.tuples(MICROS, SCOPE, IDS), b=st.tuples(MICROS, SCOPE, IDS))
def test_members_sort_newest_first_in_byte_order(
    a: tuple[int, tuple[str, ...], str], b: tuple[int, tuple[str, ...], str]
) -> None:
    first, second = member(*a).encode(), member(*b).encode()
    if a[0] != b[0]:
        assert (first < second) == (a[0] > b[0])


@given(st.text(max_size=40))
def test_anything_but_a_cursor_is_refused(text: str) -> None:
    try:
        decoded = decode_cursor(text)
    except InvalidArgumentError:
        return
    assert encode_cursor(decoded) == text  # only a real cursor's text gets through


@pytest.mark.parametrize("cursor", ["", "=", "AAAA", "x" * 5000, "OTk5|"])
def test_a_malformed_cursor_is_refused(cursor: str) -> None:
    with pytest.raises(InvalidArgumentError, match="cursor"):
        decode_cursor(cursor)
