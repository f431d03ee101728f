"""Strands Agents' session storage on the message log (``pip install
'redis-msglog[strands]'``).

:class:`MessageLogSessionRepository` is a Strands ``SessionRepository``;
:class:`MessageLogSessionManager` is the same repository as a session manager (Strands'
own ``FileSessionManager``/``S3SessionManager`` pattern: ``Agent(session_manager=...)``).
How a session is laid out (``redis_msglog.integrations._strands_rows.Names``):

- the session, its agents and multi-agents are records in the attributes of the
  conversation ``<ns>.<token>:session`` (each change one compare-and-set entry);
- each agent's messages are the log ``<ns>.<token>:agent:<agent_id>``, message
  ``m`` the ``m + 1``-th message (seq ``m + 1`` until a redaction), each row a neutral
  message for every other reader with the ``SessionMessage`` carried exactly in
  ``extras["strands"]``;
- every conversation of a session is in the scope ``(<ns>.<token>,)``: deleting the
  session erases them all (``Directory.erase``).

``<token>`` is the session id when it is short and plain, else a digest of it; ``ns`` is
``strands`` unless given. Strands' repositories are synchronous: this one takes a sync
client (``redis.Redis`` or ``RedisCluster``). This module imports Strands;
``redis_msglog`` itself never does.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Callable, Mapping
from datetime import timedelta
from typing import TYPE_CHECKING, Any

import redis
import redis.cluster

from .._core.args import check_type, missing_extra

try:
    from strands.session.repository_session_manager import RepositorySessionManager
    from strands.session.session_repository import SessionRepository
    from strands.types.exceptions import SessionException
    from strands.types.session import Session, SessionAgent, SessionMessage
except ModuleNotFoundError as exc:  # the extra is not installed
    raise missing_extra("strands", exc) from exc

from .._core.lifecycle.erase import DEFAULT_ERASED_FOR, check_erased_for
from .._core.lifecycle.scope import check_scope
from .._core.retry import DEFAULT_RETRY
from .._sync import Directory, MessageLog
from ..errors import InvalidArgumentError, MessageLogError, SeqConflictError
from ._clients import from_url
from ._log_options import integration_options
from ._strands_messages import TRIES, AgentLogs, check_index
from ._strands_rows import Names, attr_name, carried, dumps, foreign, loads

if TYPE_CHECKING:
    from strands.multiagent.base import MultiAgentBase

__all__ = [
    "MessageIdConflictError",
    "MessageLogSessionManager",
    "MessageLogSessionRepository",
    "StrandsSessionError",
]

SyncClient = redis.Redis | redis.cluster.RedisCluster
_LOGS = 256  # log objects kept per repository (each registers its scope once)
_AGENTS = 4096  # agents a repository remembers it saw recorded


class StrandsSessionError(MessageLogError, SessionException):
    """Nothing was written. A Strands repository call named a session, agent, message
    or multi-agent that does not exist (or a session that already does); a Strands
    ``SessionException`` too, as Strands' own repositories raise."""


class MessageIdConflictError(StrandsSessionError, SeqConflictError):
    """Nothing was written. ``create_message`` named an index that is not the agent's
    next one: another writer (a worker holding the same session) appended first, or the
    index skips or repeats one. ``current_seq`` is the number of messages the agent's
    log held (``-1``: other writers kept winning)."""

    def __init__(self, message: str, *, current_seq: int) -> None:
        StrandsSessionError.__init__(self, message)
        self.current_seq = current_seq


class MessageLogSessionRepository(SessionRepository):
    """A Strands ``SessionRepository`` on the message log.

    Args:
        redis: a ``redis.Redis`` or ``redis.cluster.RedisCluster`` client (yours to
            close).
        namespace: the first part of every session's scope and conversation ids
            (letters, digits, ``_.-``; default ``strands``).
        erased_for: how long a deleted session's tombstone refuses writes into it
            (``delete_session``; at least 1 s, default 24 h): a worker still holding the
            session cannot bring it back, and the id can be used again after it.
        **log_options: options of :class:`~redis_msglog.MessageLog` (``prefix``,
            ``ttl``, ``durability``, ``retry``, ``before_append``...; not ``scope``,
            which the repository sets, nor ``max_age``, which would move indexes).
    """

    def __init__(
        self,
        redis: SyncClient,
        *,
        namespace: str = "strands",
        erased_for: timedelta = DEFAULT_ERASED_FOR,
        **log_options: Any,
    ) -> None:
        if not isinstance(redis, SyncClient):
            raise InvalidArgumentError(
                "needs a sync redis client (redis.Redis or RedisCluster), "
                f"got {type(redis).__name__}"
            )
        for refused in ("scope", "max_age"):
            if refused in log_options:
                raise InvalidArgumentError(f"{refused} is not an option of the repository")
        log_options = integration_options(log_options)  # ttl: int seconds or a timedelta
        check_type("namespace", namespace, str, "a str")
        if not namespace or len(namespace) > 100 or not namespace.isascii():
            raise InvalidArgumentError(
                f"namespace must be 1 to 100 ASCII characters: {namespace!r}"
            )
        check_scope((f"{namespace}.x",))  # a plain scope part, or a typed error
        check_erased_for(erased_for)
        self.redis = redis
        self.namespace = namespace
        self.erased_for = erased_for
        self._options = log_options
        self._owned: SyncClient | None = None
        self._lock = threading.Lock()
        self._logs: OrderedDict[str, MessageLog] = OrderedDict()
        self._agents: OrderedDict[str, None] = OrderedDict()  # agent logs seen recorded
        self._messages = AgentLogs(self._agent_log, _conflict)

    @classmethod
    def from_url(
        cls,
        *,
        url: str,
        cluster: bool = False,
        redis_kwargs: dict[str, Any] | None = None,
        **options: Any,
    ) -> MessageLogSessionRepository:
        """A repository on a client of its own for ``url`` (``cluster=True`` for a Redis
        Cluster node; ``redis_kwargs`` go to the client's ``from_url``); ``close()``
        closes it."""
        client = _client(url, cluster, redis_kwargs)
        try:
            made = cls(client, **options)
        except BaseException:
            client.close()
            raise
        made._owned = client
        return made

    def close(self) -> None:
        """Close the client :meth:`from_url` made (a client you passed is yours)."""
        if self._owned is not None:
            self._owned.close()

    # -- sessions ----------------------------------------------------------------------

    def create_session(self, session: Session, **kwargs: Any) -> Session:
        """Record a new session; :class:`StrandsSessionError` if it exists."""
        names = self._names(session.session_id)

        def change(values: dict[str, str]) -> dict[str, str | None]:
            if "session" in values:
                raise StrandsSessionError(f"Session {session.session_id} already exists")
            record = session.to_dict()  # its type an enum: stored as its value
            record["session_type"] = getattr(session.session_type, "value", session.session_type)
            return {"session": dumps(record)}

        self._change(names, change)
        return session

    def read_session(self, session_id: str, **kwargs: Any) -> Session | None:
        text = self._values(self._names(session_id)).get("session")
        return None if text is None else Session.from_dict(loads(text))

    def delete_session(self, session_id: str, **kwargs: Any) -> None:
        """Erase the session: its records and every agent's log, with everything they
        hold (docs/lifecycle.md, "Erasing a scope"), leaving a tombstone for
        ``erased_for``. :class:`StrandsSessionError` if there is no such session."""
        names = self._names(session_id)
        if "session" not in self._values(names):
            raise StrandsSessionError(f"Session {session_id} does not exist")
        directory = Directory(
            self.redis,
            prefix=self._options.get("prefix", "msglog"),
            retry=self._options.get("retry", DEFAULT_RETRY),
        )
        directory.erase(names.scope, erased_for=self.erased_for)
        for conversation in self._cached(names.top):
            self._messages.forget(conversation)

    # -- agents ------------------------------------------------------------------------

    def create_agent(self, session_id: str, session_agent: SessionAgent, **kwargs: Any) -> None:
        """Record a new agent of an existing session (:class:`StrandsSessionError` if the
        session does not exist or the agent does)."""
        self._create(session_id, "agent", session_agent.agent_id, session_agent.to_dict())
        self._seen(self._names(session_id).agent(session_agent.agent_id))

    def read_agent(self, session_id: str, agent_id: str, **kwargs: Any) -> SessionAgent | None:
        record = self._record(session_id, "agent", agent_id)
        if record is None:
            return None
        self._seen(self._agent_id(session_id, agent_id))
        return SessionAgent.from_dict(record)

    def update_agent(self, session_id: str, session_agent: SessionAgent, **kwargs: Any) -> None:
        """Replace an agent's record, keeping its ``created_at`` (as Strands' file
        repository); :class:`StrandsSessionError` if it does not exist."""
        self._update(session_id, "agent", session_agent.agent_id, session_agent.to_dict())

    # -- messages ----------------------------------------------------------------------

    def create_message(
        self, session_id: str, agent_id: str, session_message: SessionMessage, **kwargs: Any
    ) -> None:
        """Append the message as its agent's next one, in one conditional append: a
        ``message_id`` that is not the next index (another worker appended first)
        raises :class:`MessageIdConflictError` and writes nothing. The agent must exist
        (:class:`StrandsSessionError`): checked once per agent and repository (a
        ``read_agent``, ``create_agent`` or earlier message of it is enough)."""
        check_index("message_id", session_message.message_id)
        record = session_message.to_dict()
        conversation = self._agent_id(session_id, agent_id)
        with self._lock:
            known = conversation in self._agents
        if not known:
            if self._record(session_id, "agent", agent_id) is None:
                raise StrandsSessionError(f"Agent {agent_id} does not exist in {session_id}")
            self._seen(conversation)
        self._messages.append(conversation, record)

    def read_message(
        self, session_id: str, agent_id: str, message_id: int, **kwargs: Any
    ) -> SessionMessage | None:
        check_index("message_id", message_id)
        conversation = self._agent_id(session_id, agent_id)
        row = self._messages.row(conversation, message_id)
        return None if row is None else _session_message(row, message_id)

    def update_message(
        self, session_id: str, agent_id: str, session_message: SessionMessage, **kwargs: Any
    ) -> None:
        """Redact the message in place: the original leaves Redis (see
        :func:`_redacted`)."""
        _redacted(self, session_id, agent_id, session_message)

    def list_messages(
        self,
        session_id: str,
        agent_id: str,
        limit: int | None = None,
        offset: int = 0,
        **kwargs: Any,
    ) -> list[SessionMessage]:
        """The messages from index ``offset``, at most ``limit``: a seq range read."""
        check_index("limit", limit, optional=True)
        check_index("offset", offset)
        conversation = self._agent_id(session_id, agent_id)
        rows = self._messages.rows(conversation, offset, limit)
        return [_session_message(row, index) for index, row in rows]

    # -- multi-agents ------------------------------------------------------------------

    def create_multi_agent(
        self, session_id: str, multi_agent: MultiAgentBase, **kwargs: Any
    ) -> None:
        self._create(session_id, "multi", multi_agent.id, multi_agent.serialize_state())

    def read_multi_agent(
        self, session_id: str, multi_agent_id: str, **kwargs: Any
    ) -> dict[str, Any] | None:
        return self._record(session_id, "multi", multi_agent_id)

    def update_multi_agent(
        self, session_id: str, multi_agent: MultiAgentBase, **kwargs: Any
    ) -> None:
        self._update(session_id, "multi", multi_agent.id, multi_agent.serialize_state())

    # -- records: attributes of the session's records conversation -------------------

    def _names(self, session_id: str) -> Names:
        check_type("session_id", session_id, str, "a str")
        return Names(self.namespace, session_id)

    def _agent_id(self, session_id: str, agent_id: str) -> str:
        """The conversation of an agent's messages."""
        check_type("agent_id", agent_id, str, "a str")
        return self._names(session_id).agent(agent_id)

    def _values(self, names: Names) -> dict[str, str]:
        return self._log(names.records, names.scope).attrs().values

    def _record(self, session_id: str, kind: str, object_id: str) -> dict[str, Any] | None:
        check_type(f"{kind} id", object_id, str, "a str")
        text = self._values(self._names(session_id)).get(attr_name(kind, object_id))
        return None if text is None else loads(text)

    def _create(
        self, session_id: str, kind: str, object_id: str, record: Mapping[str, Any]
    ) -> None:
        check_type(f"{kind} id", object_id, str, "a str")
        name, text = attr_name(kind, object_id), dumps(dict(record))

        def change(values: dict[str, str]) -> dict[str, str | None]:
            if "session" not in values:
                raise StrandsSessionError(f"Session {session_id} does not exist")
            if name in values:
                raise StrandsSessionError(f"{kind} {object_id} already exists in {session_id}")
            return {name: text}

        self._change(self._names(session_id), change)

    def _update(self, session_id: str, kind: str, object_id: str, record: dict[str, Any]) -> None:
        check_type(f"{kind} id", object_id, str, "a str")
        name = attr_name(kind, object_id)

        def change(values: dict[str, str]) -> dict[str, str | None]:
            if name not in values:
                raise StrandsSessionError(f"{kind} {object_id} in {session_id} does not exist")
            if kind == "agent":  # keep when it was created, as Strands' own repositories
                record["created_at"] = loads(values[name]).get("created_at")
            return {name: dumps(record)}

        self._change(self._names(session_id), change)

    def _change(
        self, names: Names, decide: Callable[[dict[str, str]], dict[str, str | None]]
    ) -> None:
        """Read the records, decide the change, write it only if nobody wrote since."""
        log = self._log(names.records, names.scope)
        for _ in range(TRIES):
            seen = log.attrs()
            changes = decide(seen.values)
            try:
                log.set_attrs(changes, expected_seq=seen.last_seq)
                return
            except SeqConflictError:
                continue
        raise StrandsSessionError(f"the records of {names.top} kept changing: try again")

    # -- log objects -----------------------------------------------------------------

    def _agent_log(self, conversation: str) -> MessageLog:
        return self._log(conversation, (conversation.split(":", 1)[0],))

    def _log(self, conversation: str, scope: tuple[str, ...]) -> MessageLog:
        """The log of ``conversation`` (kept: a log object registers its scope once)."""
        with self._lock:
            log = self._logs.get(conversation)
            if log is None:
                log = MessageLog(self.redis, conversation, scope=scope, **self._options)
                self._logs[conversation] = log
            self._logs.move_to_end(conversation)
            while len(self._logs) > _LOGS:
                self._logs.popitem(last=False)
            return log

    def _seen(self, conversation: str) -> None:
        with self._lock:
            self._agents[conversation] = None
            self._agents.move_to_end(conversation)
            while len(self._agents) > _AGENTS:
                self._agents.popitem(last=False)

    def _cached(self, top: str) -> list[str]:
        """Forget the log objects and agents of a session (erased)."""
        with self._lock:
            for agent in [c for c in self._agents if c.startswith(top + ":")]:
                del self._agents[agent]
            gone = [c for c in self._logs if c.startswith(top + ":")]
            for conversation in gone:
                del self._logs[conversation]  # a new object registers the scope again
            return gone


def _session_message(row: Any, index: int) -> SessionMessage:
    record = carried(row)
    return SessionMessage.from_dict(record if record is not None else foreign(row, index))


def _redacted(
    repository: MessageLogSessionRepository,
    session_id: str,
    agent_id: str,
    session_message: SessionMessage,
) -> None:
    """``update_message``: a real redaction. The row of the message is removed from
    Redis and replaced, in one atomic call, by the updated ``SessionMessage`` (its
    ``created_at`` kept, as Strands' own repositories do); when it has a
    ``redact_message``, that is also stored as its ``message``, so the original content
    is nowhere in Redis (the log's ``redact``, docs/lifecycle.md).
    :class:`StrandsSessionError` if the message does not exist; a message already
    redacted once raises :class:`~redis_msglog.InvalidEditError`. Nothing is written
    either way."""
    message_id = session_message.message_id
    check_index("message_id", message_id)
    conversation = repository._agent_id(session_id, agent_id)
    row = repository._messages.row(conversation, message_id)
    if row is None:
        raise StrandsSessionError(f"Message {message_id} does not exist")
    record = session_message.to_dict()
    previous = carried(row)
    if previous is not None and isinstance(previous.get("created_at"), str):
        record["created_at"] = previous["created_at"]
    if record.get("redact_message") is not None:
        record["message"] = record["redact_message"]
    repository._messages.redact(conversation, row.seq, record)


def _conflict(conversation: str, held: int) -> Exception:
    if held < 0:
        text = f"{conversation}: other writers kept appending; nothing was written"
    else:
        text = f"{conversation} holds {held} messages: message_id {held} is the next one"
    return MessageIdConflictError(text, current_seq=held)


def _client(url: str, cluster: bool, redis_kwargs: dict[str, Any] | None) -> SyncClient:
    check_type("cluster", cluster, bool, "a bool")
    if cluster:
        return from_url(redis.cluster.RedisCluster.from_url, url, redis_kwargs)
    return from_url(redis.Redis.from_url, url, redis_kwargs)


class MessageLogSessionManager(RepositorySessionManager, MessageLogSessionRepository):
    """A Strands session manager storing session ``session_id`` on the message log
    (``Agent(session_manager=MessageLogSessionManager("s1", client))``): Strands'
    ``RepositorySessionManager`` over a :class:`MessageLogSessionRepository` that is the
    manager itself, as Strands' ``FileSessionManager`` is. Options: the repository's."""

    def __init__(self, session_id: str, redis: SyncClient, **options: Any) -> None:
        MessageLogSessionRepository.__init__(self, redis, **options)
        RepositorySessionManager.__init__(self, session_id=session_id, session_repository=self)

    @classmethod
    def from_url(  # type: ignore[override]
        cls,
        session_id: str,
        *,
        url: str,
        cluster: bool = False,
        redis_kwargs: dict[str, Any] | None = None,
        **options: Any,
    ) -> MessageLogSessionManager:
        """A manager on a client of its own for ``url``; ``close()`` closes it."""
        client = _client(url, cluster, redis_kwargs)
        try:
            made = cls(session_id, client, **options)
        except BaseException:
            client.close()
            raise
        made._owned = client
        return made
