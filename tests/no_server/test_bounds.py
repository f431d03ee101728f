"""One append call's byte cap, checked before anything is sent (docs/lifecycle.md,
"Bounds"): no server needed, the batch is refused while it is built."""

from __future__ import annotations

import pytest

from redis_msglog import BatchTooLargeError, MessageTooLargeError
from redis_msglog._core.write.bounds import DEFAULT_MAX_BATCH_BYTES
from redis_msglog._core.write.encode import BatchRules


def test_the_default_cap_refuses_a_17_mib_batch_of_1_kb_messages() -> None:
    rules = BatchRules(8 * 1024 * 1024, None)
    batch = [{"role": "user", "content": "x" * 1024} for _ in range(17 * 1024)]
    with pytest.raises(BatchTooLargeError, match="max_batch_bytes") as caught:
        rules.batch(batch)
    assert caught.value.cap == DEFAULT_MAX_BATCH_BYTES
    assert isinstance(caught.value, MessageTooLargeError)
    assert str(DEFAULT_MAX_BATCH_BYTES) in str(caught.value)
    assert len(rules.batch(batch[: 15 * 1024]).encoded) == 15 * 1024


def test_binaries_count_and_a_filter_result_is_held_to_it_too() -> None:
    image = {"type": "image", "data": b"\x89PNG" + b"\x00" * 6000, "media_type": "image/png"}
    rules = BatchRules(1 << 20, 1000, max_batch_bytes=10_000)
    with pytest.raises(BatchTooLargeError):  # 2 blobs of 6 KB: the rows alone are small
        rules.batch([{"role": "user", "content": [image]}, {"role": "user", "content": [
            {**image, "data": b"\x89PNG" + b"\x01" * 6000}]}])  # fmt: skip
    grow = BatchRules(1 << 20, None, lambda ms: [m.model_copy(update={"content": "y" * 6000})
                                                  for m in ms], max_batch_bytes=10_000)  # fmt: skip
    with pytest.raises(BatchTooLargeError, match="before_append"):
        grow.batch([{"role": "user", "content": "a"}, {"role": "user", "content": "b"}])


def test_values_kept_in_place_are_held_to_the_cap_before_anything_is_sent() -> None:
    """One call of values kept in place (ADK's shared state) sends every name and value:
    over the cap (UTF-8 bytes, names included) it is refused before its first step."""
    import time

    from redis_msglog._core.lifecycle.scope import Scoped
    from redis_msglog._core.lifecycle.values import Values
    from redis_msglog._core.retry import DEFAULT_RETRY

    values = Values(Scoped("msglog", DEFAULT_RETRY, time.monotonic), max_bytes=100)
    at_cap = {"k": "é" * 49 + "x"}  # 1 + 98 + 1 bytes
    assert next(values.set_plan("c", ("a",), at_cap)) is not None  # its first step
    with pytest.raises(BatchTooLargeError, match="max_batch_bytes") as refused:
        next(values.set_plan("c", ("a",), {"k": "é" * 50}))  # 101 bytes
    assert refused.value.cap == 100


def test_attribute_changes_count_toward_the_cap() -> None:
    """Attributes (``set_attrs``, ``attrs=`` of an append: where Google ADK keeps a
    session's state) are sent with the call: a change of many bytes is held to the same
    cap, alone or beside messages, before anything is sent."""
    rules = BatchRules(1 << 20, None, max_batch_bytes=10_000)
    big = {"state": "x" * 10_000}
    with pytest.raises(BatchTooLargeError, match="attribute changes included"):
        rules.batch((), attrs=big)  # set_attrs
    with pytest.raises(BatchTooLargeError):
        rules.batch([{"role": "user", "content": "a"}], attrs=big)  # the plain lane
    with pytest.raises(BatchTooLargeError):
        rules.batch([{"role": "user", "content": [{"type": "text", "text": "a"}]}], attrs=big)
    half = {"state": "é" * 2_400}  # 4,800 bytes of UTF-8 beside a 4 KB message: within
    assert rules.batch([{"role": "user", "content": "y" * 4_000}], attrs=half).attrs
