"""What the LlamaIndex store does with a block its ``ChatMessage`` refuses."""

from __future__ import annotations

from typing import Any

from llama_index.core.base.llms.types import ChatMessage
from pydantic import ValidationError


def _blocks_llama_index_takes(rendered: dict[str, Any]) -> dict[str, Any]:
    """``rendered`` with each block LlamaIndex refuses (an image URL with a NUL, say: the
    log takes any string, another worker may have written it) replaced by a text block
    saying so, so that one message never makes a whole history unreadable."""
    blocks = []
    for block in rendered["blocks"]:
        try:
            ChatMessage.model_validate({**rendered, "blocks": [block]})
        except ValidationError:
            kind = block.get("block_type", "block")
            block = {"block_type": "text", "text": f"[{kind} left out: LlamaIndex refuses it]"}
        blocks.append(block)
    return {**rendered, "blocks": blocks}
