"""A deterministic pure-Python fallback tokenizer, for "text" / "messages" traces without a model.

`encode` cuts text into pieces, GPT-2 style (a word with its leading space, one punctuation mark,
a whitespace run), and maps each piece to a stable id: BLAKE2b of its UTF-8 bytes, reduced into
[FIRST_PIECE_ID, 2**30). The same text gives the same ids on every machine and in every process,
and a text that extends another text word by word extends its ids, so prefixes are shared the way
a real tokenizer would share them. `apply_chat_template` is ChatML (the SmolLM2 / Qwen format).
The codec remembers at most MAX_SEEN pieces for `decode` (the default codec lives as long as the
process, which may load many traces); later pieces still encode, and decode as `<?id>`.
Leaves out: BPE merges (one id per word, so counts run ~25% below a real tokenizer's), and any
real model's vocabulary: pass the engine's HF tokenizer to the trace loaders for real ids.
"""

from __future__ import annotations

import hashlib
import re

IM_START = 1  # <|im_start|>
IM_END = 2  # <|im_end|>
FIRST_PIECE_ID = 16  # ids below are reserved for special tokens
VOCAB_SPACE = 1 << 30  # piece ids lie in [FIRST_PIECE_ID, VOCAB_SPACE)
SPECIAL = {IM_START: "<|im_start|>", IM_END: "<|im_end|>"}
MAX_SEEN = 1 << 18  # pieces a codec remembers for decode (~30 MB at most)

# Every character is \w, \s or neither, so the pieces always concatenate back to the text.
_PIECE = re.compile(r"\s?\w+|\s?[^\w\s]|\s+(?!\S)|\s+")


def pieces(text: str) -> list[str]:
    """The pieces `encode` hashes, in order.

    >>> pieces("Hello, world!  Bye")
    ['Hello', ',', ' world', '!', ' ', ' Bye']
    """
    return _PIECE.findall(text)


def piece_id(piece: str) -> int:
    """The stable id of one piece.

    >>> piece_id(" world") == piece_id(" world") != piece_id("world")
    True
    """
    digest = hashlib.blake2b(piece.encode("utf-8"), digest_size=8).digest()
    return FIRST_PIECE_ID + int.from_bytes(digest, "little") % (VOCAB_SPACE - FIRST_PIECE_ID)


class TextCodec:
    """Encoder plus a memory of the pieces it has seen, so that `decode` can show text.

    >>> codec = TextCodec()
    >>> ids = codec.encode("the cat sat")
    >>> len(ids), codec.decode(ids)
    (3, 'the cat sat')
    """

    def __init__(self, max_seen: int = MAX_SEEN) -> None:
        self._seen: dict[int, str] = dict(SPECIAL)
        self.max_seen = max_seen  # pieces remembered for decode, at most

    def encode(self, text: str, max_ids: int | None = None) -> list[int]:
        """Ids of the pieces of `text` (valid Unicode: a lone surrogate raises ValueError); at
        most `max_ids` of them, so a caller with a cap stops early on a huge text."""
        ids, seen = [], self._seen
        for match in _PIECE.finditer(text):
            piece = match.group()
            pid = piece_id(piece)
            if len(seen) < self.max_seen:
                seen.setdefault(pid, piece)
            ids.append(pid)
            if max_ids is not None and len(ids) >= max_ids:
                break
        return ids

    def decode(self, token_ids: list[int] | tuple[int, ...]) -> str:
        """Text of ids this codec produced; any other id shows as `<?id>`."""
        return "".join(self._seen.get(t, f"<?{t}>") for t in token_ids)

    def apply_chat_template(self, messages: list[dict], add_generation_prompt: bool = True,
                            max_ids: int | None = None) -> list[int]:
        """ChatML token ids: per message `<|im_start|>role\\ncontent<|im_end|>\\n`, then
        `<|im_start|>assistant\\n` when `add_generation_prompt`.

        Each part is encoded on its own, so the ids of turn n are a prefix of turn n + 1's.
        With `max_ids`, stops once past it (the caller refuses the prompt).

        >>> codec = TextCodec()
        >>> ids = codec.apply_chat_template([{"role": "user", "content": "hi"}])
        >>> codec.decode(ids)
        '<|im_start|>user\\nhi<|im_end|>\\n<|im_start|>assistant\\n'
        """
        ids: list[int] = []
        for message in messages:
            ids += [IM_START, *self.encode(message["role"] + "\n")]
            ids += [*self.encode(message["content"], max_ids), IM_END, *self.encode("\n")]
            if max_ids is not None and len(ids) > max_ids:
                return ids
        if add_generation_prompt:
            ids += [IM_START, *self.encode("assistant\n")]
        return ids


default_codec = TextCodec()  # shared by the trace loaders; holds the pieces seen for decode


def encode(text: str, max_ids: int | None = None) -> list[int]:
    """`default_codec.encode`.

    >>> encode("a b") == encode("a") + encode(" b"), len(encode("a b c d", max_ids=2))
    (True, 2)
    """
    return default_codec.encode(text, max_ids)


def apply_chat_template(messages: list[dict], max_ids: int | None = None) -> list[int]:
    """`default_codec.apply_chat_template` with the generation prompt."""
    return default_codec.apply_chat_template(messages, max_ids=max_ids)


def decode(token_ids: list[int] | tuple[int, ...]) -> str:
    """`default_codec.decode`."""
    return default_codec.decode(token_ids)
