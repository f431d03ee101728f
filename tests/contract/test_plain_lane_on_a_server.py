"""The plain lane on a real server: the rows it stores are the model route's bytes (the
lane against the model route without a server is ``tests/no_server/test_plain_lane.py``)."""

from __future__ import annotations

import uuid
from typing import Any

import redis
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from redis_msglog import MessageLog, MessageLogError
from redis_msglog._core.write.blobs import DEFAULT_BLOB_THRESHOLD
from redis_msglog._core.write.encode import BatchRules

from ..no_server.test_plain_lane import _outcome, plain_dicts, plain_shaped


@given(st.lists(plain_dicts | plain_shaped, min_size=1, max_size=3))
@settings(
    max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
def test_stored_bytes_are_the_model_routes(shared_server: Any, batch: list[Any]) -> None:
    """What reaches the server: the rows in the stream are the model route's bytes, or
    nothing is written and the model route's error is raised."""
    client = redis.Redis.from_url(shared_server("redis").url)
    log = MessageLog(client, uuid.uuid4().hex, max_message_bytes=60)
    expected = _outcome(BatchRules(60, DEFAULT_BLOB_THRESHOLD), batch, models=True)
    try:
        log.append_many(batch)
    except MessageLogError as exc:
        assert (type(exc), str(exc), getattr(exc, "index", None)) == expected
        assert client.exists(log.keys.seq, log.keys.stream) == 0
        return
    entries: Any = client.xrange(log.keys.stream)
    stored = tuple(fields[b"msg"] for _id, fields in entries)
    assert stored == expected[0]
