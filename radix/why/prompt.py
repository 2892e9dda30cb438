"""A prompt as `why` compares it: token ids, and what produced them when we know it.

`Codec` is what the comparison needs of a tokenizer: encode, decode, and a chat template.
radix/ never loads a tokenizer itself (no transformers here): engine/why.py passes the model's;
without one, prompts are token ids and the text-based detectors have nothing to read.
Leaves out: multimodal inputs (their hashes would be one more namespace field).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Protocol


class Codec(Protocol):
    """A tokenizer, as seen from radix/ (engine/why.py: HFCodec)."""

    name: str  # what the report calls it, e.g. "SmolLM2-135M-Instruct"

    def encode(self, text: str) -> list[int]: ...

    def encode_rendered(self, text: str) -> list[int]:
        """A rendered chat template's text: no special tokens added (the template has them)."""
        ...

    def decode(self, token_ids: list[int]) -> str: ...

    def render(self, messages: list[dict], tools: list | None, add_generation_prompt: bool,
               template: str | None) -> str:
        """The chat template's text (not yet tokenized); `template` overrides the model's."""
        ...


@dataclass(frozen=True)
class Prompt:
    """One side of the comparison."""

    label: str  # where it came from: a file name, "trace.jsonl#r7", "[...] (inline)"
    token_ids: tuple[int, ...]
    text: str | None = None  # the text that was tokenized (chat: the rendered template)
    messages: tuple[dict, ...] | None = None  # chat input: the messages before rendering
    tools: tuple[Any, ...] | None = None  # chat input: the tools list, as given
    template: str | None = None  # chat input: "model" or the override template's text
    add_generation_prompt: bool = True  # chat input
    extra_key: str | None = None  # namespace: LoRA adapter name / extra key
    cache_salt: str | None = None  # namespace: per-tenant salt
    notes: tuple[str, ...] = field(default=())  # how it was read, e.g. "rendered with ..."

    @property
    def namespace(self) -> tuple[str | None, str | None]:
        """(extra_key, cache_salt), "" read as none (as vLLM does)."""
        return (self.extra_key or None, self.cache_salt or None)

    @property
    def is_chat(self) -> bool:
        return self.messages is not None
