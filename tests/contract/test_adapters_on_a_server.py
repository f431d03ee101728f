"""The clients' format methods read the history from a server and convert it exactly as
the pure adapters do, output the SDK types accept (the adapters themselves are
``tests/no_server/test_adapters.py``)."""

from __future__ import annotations

from redis_msglog import to_anthropic, to_langchain, to_openai

from ..conftest import Env
from ..no_server.test_adapters import SYSTEM, VECTORS, _models, check_anthropic, check_openai


def test_clients_read_the_history_and_convert_it(env: Env) -> None:
    log = env.log()
    history = VECTORS["parallel calls then a user turn"] + VECTORS["non-object args"]
    log.append_many([SYSTEM, *history])
    models = _models([SYSTEM, *history])
    assert log.to_openai() == to_openai(models)
    assert log.to_anthropic() == to_anthropic(models)
    assert log.to_langchain() == to_langchain(models)
    check_openai(log.to_openai())
    check_anthropic(log.to_anthropic())
    # The pure functions also work on a slice the caller already holds.
    check_openai(to_openai(log.last(4)))
