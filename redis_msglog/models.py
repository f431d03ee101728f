"""The message models of the reference API, as pydantic v2 models.

Input accepts the reference API's camelCase keys (``toolCalls``, ``toolCallId``) as well
as snake_case; attributes are snake_case. Models are frozen: a stored row is a fact.
Unknown keys are rejected, so a typo (``tool_call``) fails loudly instead of being lost.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import AwareDatetime, BaseModel, ConfigDict, Field, StrictInt, StrictStr

Role = Literal["system", "user", "assistant", "tool"]
"""Who authored a message."""

_CONFIG = ConfigDict(
    frozen=True,
    extra="forbid",
    validate_by_name=True,
    validate_by_alias=True,
)


class ToolCall(BaseModel):
    """A tool-call request emitted by the model on an assistant turn."""

    model_config = _CONFIG

    id: StrictStr
    """Model-assigned call id; a later ``tool`` message echoes it as ``tool_call_id``."""
    name: StrictStr
    """Name of the tool the model wants invoked."""
    args: Any = None
    """Arguments for the tool, as the model produced them: any exact-JSON value."""


class AgentMessage(BaseModel):
    """A framework-neutral chat message; the adapters map it to provider formats."""

    model_config = _CONFIG

    role: Role
    """Who authored the message."""
    content: StrictStr
    """The message text (a ``str``: other types are rejected, never coerced)."""
    name: StrictStr | None = None
    """Optional author label (tool name for ``tool``, speaker for others)."""
    tool_calls: list[ToolCall] | None = Field(default=None, alias="toolCalls")
    """Present on assistant turns that request tools."""
    tool_call_id: StrictStr | None = Field(default=None, alias="toolCallId")
    """Present on ``tool`` turns, linking a result back to a :attr:`ToolCall.id`."""


class StoredMessage(AgentMessage):
    """An :class:`AgentMessage` as persisted: with its ``seq`` and commit time."""

    seq: StrictInt
    """Monotonic, gap-free sequence number assigned by the server: the log's order."""
    at: AwareDatetime
    """Commit time from the server's clock (UTC); informational, ordering is by ``seq``."""

    def as_message(self) -> AgentMessage:
        """This row without ``seq`` and ``at``, e.g. to append it to another log."""
        return AgentMessage.model_validate(
            self.model_dump(exclude={"seq", "at"}, exclude_none=True)
        )
