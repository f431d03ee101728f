"""Content parts: what a message holds besides plain text.

``AgentMessage.content`` is either a ``str`` (the original form, still the common one) or
a list of parts, a union discriminated on ``type``. Only the kinds below are accepted: an
unknown ``type`` or an unknown field is an error, never a silent drop.

Every part may carry ``extras``: for each format it came from (``"openai"``,
``"responses"``, ``"anthropic"``, ``"langchain"``), the fields of that format that have no
neutral place (``cache_control``, ``annotations``, ``citations``...), as a JSON merge patch
(RFC 7386) over the part as that format's exporter would write it. The exporter of that
format applies it, so a round trip within one format gives back exactly what came in; the
other formats never see it (a provider rejects fields it does not know).

Binary data is ``bytes`` in Python (a ``str`` is rejected, never guessed at) and base64 in
the stored JSON.
"""

from __future__ import annotations

import base64
import binascii
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, StrictBytes, StrictStr, model_validator

_CONFIG = ConfigDict(frozen=True, extra="forbid")

Extras = dict[str, Any]
"""Per format, a JSON merge patch over that format's rendering of the part."""


class _Part(BaseModel):
    model_config = _CONFIG

    extras: Extras | None = None
    """Fields only one format knows, keyed by format; see the module docstring."""


class TextPart(_Part):
    """Text."""

    type: Literal["text"] = "text"
    text: StrictStr


class _Media(_Part):
    """Binary content given inline (``data``), by URL, or by a provider file id."""

    data: StrictBytes | None = None
    """The bytes themselves (base64 in the stored JSON)."""
    url: StrictStr | None = None
    """A URL the provider fetches (``https://...``); a ``data:`` URL is imported as ``data``."""
    file_id: StrictStr | None = None
    """A file uploaded to the provider (its Files API id)."""
    media_type: StrictStr | None = None
    """MIME type, e.g. ``image/png``, ``audio/wav``, ``application/pdf``."""
    blob: Annotated[str, Field(pattern=r"^[0-9a-f]{64}$")] | None = None
    """Instead of ``data``: the SHA-256 (hex) of bytes stored off the row, once per
    conversation (a binary over the log's ``blob_threshold``). Reads put the bytes back
    in ``data`` unless asked for references (``blobs="refs"``)."""

    @model_validator(mode="after")
    def _one_source(self) -> _Media:
        sources = [s for s in (self.data, self.url, self.file_id, self.blob) if s is not None]
        if len(sources) != 1:
            raise ValueError("exactly one of data, url and file_id is required")
        return self


class ImagePart(_Media):
    """An image."""

    type: Literal["image"] = "image"
    detail: StrictStr | None = None
    """OpenAI's resolution hint (``low``, ``high``, ``auto``...)."""


class AudioPart(_Media):
    """Audio input (``media_type`` ``audio/wav`` or ``audio/mpeg`` for OpenAI)."""

    type: Literal["audio"] = "audio"


class FilePart(_Media):
    """A document or other file (PDF, plain text...)."""

    type: Literal["file"] = "file"
    filename: StrictStr | None = None


class RefusalPart(_Part):
    """An assistant's refusal (OpenAI)."""

    type: Literal["refusal"] = "refusal"
    refusal: StrictStr


class ThinkingPart(_Part):
    """Extended thinking (Anthropic): must go back unmodified, signature included, and
    only to the provider that produced it."""

    type: Literal["thinking"] = "thinking"
    thinking: StrictStr
    signature: StrictStr | None = None
    provider: StrictStr | None = None
    """Who produced it (``"anthropic"``); thinking is sent only back to that provider."""


class RedactedThinkingPart(_Part):
    """Thinking the provider encrypted (Anthropic ``redacted_thinking``)."""

    type: Literal["redacted_thinking"] = "redacted_thinking"
    data: StrictStr
    """Opaque, exactly as the provider returned it."""
    provider: StrictStr | None = None


class ReasoningPart(_Part):
    """An OpenAI reasoning item (Responses API): replayed with the ``function_call`` or
    message it preceded, only to OpenAI."""

    type: Literal["reasoning"] = "reasoning"
    id: StrictStr | None = None
    summary: list[StrictStr] = Field(default_factory=list)
    """The ``summary_text`` entries' texts."""
    content: list[StrictStr] | None = None
    """The ``reasoning_text`` entries' texts, when the provider returned them."""
    encrypted_content: StrictStr | None = None
    """Required to replay reasoning with ``store=false``."""
    provider: StrictStr | None = None
    """Who produced it (``"openai"``); reasoning is sent only back to that provider."""


ContentPart = Annotated[
    TextPart
    | ImagePart
    | AudioPart
    | FilePart
    | RefusalPart
    | ThinkingPart
    | RedactedThinkingPart
    | ReasoningPart,
    Field(discriminator="type"),
]
"""One part of a message's content, discriminated on ``type``."""

BINARY_PARTS = frozenset({"image", "audio", "file"})
"""Part kinds whose ``data`` is bytes (base64 in the stored JSON)."""


def decode_base64(text: str) -> bytes:
    """The bytes of a canonical base64 string (RFC 4648 alphabet, padded, no whitespace);
    ``ValueError`` otherwise, so the bytes always encode back to the same string."""
    try:
        data = base64.b64decode(text, validate=True)
    except (ValueError, binascii.Error) as exc:
        raise ValueError(f"not valid base64: {exc}") from None
    # The alphabet and where padding may stand were checked above; the string is then the
    # canonical encoding iff its length is, and its last quantum encodes back the same
    # (a full group of 4 characters maps to 3 bytes one to one). Re-encoding only that
    # quantum, not the whole payload, saves most of the check's cost on a large image.
    tail = data[-(len(data) % 3 or 3) :]
    if len(text) != 4 * ((len(data) + 2) // 3) or (
        data and base64.b64encode(tail).decode("ascii") != text[-4:]
    ):
        raise ValueError("not canonical base64 (padding or trailing bits)")
    return data


def encode_base64(data: bytes) -> str:
    """Standard base64 with padding."""
    return base64.b64encode(data).decode("ascii")
