"""`python -m engine why A B`: radix/why/ with the model's tokenizer, so A and B may be text
files, chat messages (rendered with the model's chat template) or text traces.

The engine is the only layer that loads a tokenizer (transformers); it wraps one as a
`radix.why.prompt.Codec` and runs the same command as `python -m radix why` (token ids only).
`--tokenizer FOLDER`: any local Hugging Face tokenizer folder; default: the default model's
(converted in ~/.cache/radixlens). Leaves out: remote tokenizers (nothing touches the network).
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from radix.why.command import add_arguments
from radix.why.command import run as run_why


class HFCodec:
    """A Hugging Face tokenizer as radix/why sees it.

    Text is encoded as the engine encodes a trace's text (`tokenizer(text)["input_ids"]`); chat
    messages are rendered with `apply_chat_template(..., tokenize=False)` and then encoded
    without special tokens, which gives the ids `apply_chat_template(tokenize=True)` gives.
    """

    def __init__(self, tokenizer: Any, name: str) -> None:
        self.tokenizer, self.name = tokenizer, name

    def encode(self, text: str) -> list[int]:
        return list(self.tokenizer(text)["input_ids"])

    def encode_rendered(self, text: str) -> list[int]:
        return list(self.tokenizer(text, add_special_tokens=False)["input_ids"])

    def decode(self, token_ids: list[int]) -> str:
        return self.tokenizer.decode(token_ids)

    def render(self, messages: list[dict], tools: list | None, add_generation_prompt: bool,
               template: str | None) -> str:
        if template is None and not getattr(self.tokenizer, "chat_template", None):
            raise ValueError(f"{self.name}: the tokenizer has no chat template; give one in "
                             "the prompt's \"chat_template\" field")
        return self.tokenizer.apply_chat_template(
            messages, tools=tools, add_generation_prompt=add_generation_prompt, tokenize=False,
            chat_template=template)


def load_codec(folder: str | None = None) -> HFCodec:
    """The tokenizer of a local folder, or the default model's."""
    from transformers import AutoTokenizer

    if folder is None:
        from engine.model import DEFAULT_NAME, _default_tokenizer  # torch: after parsing
        return HFCodec(_default_tokenizer(), DEFAULT_NAME)
    path = Path(folder)
    if not path.is_dir() or not any((path / f).is_file() for f in (
            "tokenizer.json", "tokenizer_config.json", "tokenizer.model")):
        raise ValueError(f"--tokenizer {folder}: not a folder with tokenizer files "
                         "(tokenizer.json / tokenizer_config.json)")
    return HFCodec(AutoTokenizer.from_pretrained(path, local_files_only=True), path.name)


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("why", help="why prompt B misses after prompt A (tokenized)")
    add_arguments(p)
    p.add_argument("--tokenizer", metavar="FOLDER", help="a local HF tokenizer folder "
                   "(default: the default model's)")


def cmd_why(args: argparse.Namespace) -> int:
    return run_why(args, load_codec(args.tokenizer))
