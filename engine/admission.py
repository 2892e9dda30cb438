"""Bounded work before `engine serve` admits a request: the body, the prompt's length, tokenizing.

`BodyLimit` (ASGI middleware) refuses a body past `max_bytes` by its Content-Length before
reading a byte of it, or a chunked one as soon as it passes (413), and one whose sender stalls
`idle_s` between chunks (408); the app gets the body whole, never more than `max_bytes`.
`Tokenizers` bounds a prompt by its characters before tokenizing it: no token spans more
characters than the tokenizer's longest vocabulary entry (`max_token_chars`), so C characters
are at least C / max_token_chars tokens, and a prompt that cannot fit the context is refused
unread. It tokenizes on one of a few copies of the tokenizer (HF fast tokenizers must not be
shared between threads), none behind the replicas' process-wide TOKENIZER_LOCK, so one long
prompt delays nobody else (the event loop decodes streams on a copy of its own).
Leaves out: per-client rate limits (a proxy's job).
"""

from __future__ import annotations

import asyncio
import copy
import json
import queue
import re
from collections.abc import Awaitable, Callable, Iterator
from contextlib import contextmanager
from typing import Any

from engine.openai_api import ApiError, error_body

DEFAULT_MAX_BODY_BYTES = 16 * 2**20  # a request body (--max-body-mb); vLLM sets none
BODY_IDLE_S = 30.0  # the longest pause between two chunks of one body
TOKENIZER_COPIES = 2  # copies (~8 MB each for SmolLM2), one per request being tokenized
_SURROGATE = re.compile("[\ud800-\udfff]")

Scope = dict[str, Any]
Receive = Callable[[], Awaitable[dict[str, Any]]]
Send = Callable[[dict[str, Any]], Awaitable[None]]


def error_json(message: str, kind: str, status: int) -> bytes:
    """OpenAI's error shape (engine/openai_api.py's error_body), as bytes."""
    return json.dumps(error_body(message, kind, status)).encode()


class BodyLimit:
    """ASGI middleware: request bodies of at most `max_bytes`, read without stalls of more
    than `idle_s` s; anything else is answered here (413 / 408, OpenAI-shaped) and closed."""

    def __init__(self, app: Any, max_bytes: int = DEFAULT_MAX_BODY_BYTES,
                 idle_s: float = BODY_IDLE_S) -> None:
        self.app, self.max_bytes, self.idle_s = app, max_bytes, idle_s

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        declared = dict(scope["headers"]).get(b"content-length")
        try:
            if declared is not None and int(declared) > self.max_bytes:
                raise ApiError(self._too_big(int(declared)), 413, "RequestTooLargeError")
            body = await self._read(receive)
        except ApiError as exc:
            await _refuse(send, exc)
            return
        except ValueError:  # h11 refuses a malformed Content-Length before we see it
            await _refuse(send, ApiError("Content-Length is not a number"))
            return
        await self.app(scope, _replay(body, receive), send)

    async def _read(self, receive: Receive) -> bytes:
        parts, size = [], 0
        while True:
            try:
                message = await asyncio.wait_for(receive(), self.idle_s)
            except TimeoutError:
                raise ApiError(f"the request body stalled for {self.idle_s:g} s", 408,
                              "RequestTimeoutError") from None
            if message["type"] == "http.disconnect":
                raise ApiError("the client went away", 400)
            chunk = message.get("body", b"")
            size += len(chunk)
            if size > self.max_bytes:
                raise ApiError(self._too_big(size, so_far=True), 413, "RequestTooLargeError")
            parts.append(chunk)
            if not message.get("more_body", False):
                return b"".join(parts)

    def _too_big(self, size: int, so_far: bool = False) -> str:
        return (f"the request body is {'over ' if so_far else ''}{size:,} bytes; this server "
                f"takes at most {self.max_bytes:,} (--max-body-mb)")


async def _refuse(send: Send, exc: ApiError) -> None:
    body = error_json(str(exc), exc.kind, exc.code)
    await send({"type": "http.response.start", "status": exc.code,
                "headers": [(b"content-type", b"application/json"),
                            (b"content-length", str(len(body)).encode()),
                            (b"connection", b"close")]})
    await send({"type": "http.response.body", "body": body})


def _replay(body: bytes, receive: Receive) -> Receive:
    """The body read already, then the connection's own messages (a disconnect)."""
    sent = False

    async def replay() -> dict[str, Any]:
        nonlocal sent
        if not sent:
            sent = True
            return {"type": "http.request", "body": body, "more_body": False}
        return await receive()
    return replay


def max_token_chars(tokenizer: Any) -> int | None:
    """The most characters one token can stand for: the longest vocabulary entry (byte-level
    BPE spells a byte as one character, so this bounds characters too), or the tokenizer's
    own `max_token_chars`; None when unknown (no bound by characters then).

    >>> class T: get_vocab = lambda self: {"a": 0, "hello": 1, "<|end|>": 2}
    >>> max_token_chars(T())
    7
    """
    own = getattr(tokenizer, "max_token_chars", None)
    if own is not None:
        return int(own)
    vocab = getattr(tokenizer, "get_vocab", None)
    return max(map(len, vocab()), default=None) if callable(vocab) else None


def check_text(field: str, text: str) -> None:
    """Refused (400) when `text` holds a lone surrogate (JSON's "\\ud800" alone): no tokenizer
    can encode it, and no answer could carry it back.

    >>> check_text("prompt", "ok")
    >>> check_text("prompt", "a\\ud800b")
    Traceback (most recent call last):
    ...
    engine.openai_api.ApiError: prompt: a lone surrogate \\ud800 at character 1 is not valid Unicode
    """
    if (m := _SURROGATE.search(text)) is not None:
        raise ApiError(f"{field}: a lone surrogate \\u{ord(m.group()):04x} at character "
                      f"{m.start():,} is not valid Unicode")


class Tokenizers:
    """Copies of one tokenizer, taken one per call, bounding prompts by characters first.

    `max_context` (None: no bound) and the tokenizer's `max_token_chars` give the most
    characters a prompt that fits may have: `max_prompt_chars`."""

    def __init__(self, tokenizer: Any, max_context: int | None,
                 copies: int = TOKENIZER_COPIES) -> None:
        self.max_context = max_context
        self.token_chars = max_token_chars(tokenizer)
        self.max_prompt_chars = None if max_context is None or self.token_chars is None else \
            max_context * self.token_chars
        # subtle: the original is the replicas' (decoded under their TOKENIZER_LOCK): only
        # copies are used here, one of them kept for the event loop's thread alone. They are
        # made now: a copy takes ~0.6 s of CPU (SmolLM2's), which would stall requests later
        self._free: queue.SimpleQueue = queue.SimpleQueue()
        for _ in range(copies):
            self._free.put(copy.deepcopy(tokenizer))
        self.loop_copy = copy.deepcopy(tokenizer)

    def check_chars(self, chars: int, new_tokens: int = 0) -> None:
        """Refused when `chars` characters (at least chars / token_chars tokens) and
        `new_tokens` to generate cannot fit the context."""
        if self.max_prompt_chars is None:
            return
        least = -(-chars // self.token_chars)
        if least + new_tokens > self.max_context:
            raise ApiError(
                f"this model's maximum context length is {self.max_context:,} tokens; the "
                f"prompt has {chars:,} characters, so at least {least:,} tokens (no token spans "
                f"more than {self.token_chars} characters), and {new_tokens:,} new: refused "
                "before tokenizing")

    @contextmanager
    def one(self) -> Iterator[Any]:
        """A copy of the tokenizer that no other thread uses meanwhile (waits for one)."""
        tok = self._free.get()
        try:
            yield tok
        finally:
            self._free.put(tok)

    def encode(self, prompt: str | list[int] | None = None,
               messages: list[dict[str, Any]] | None = None, new_tokens: int = 0) -> list[int]:
        """Token ids of a prompt (text or ids) or of chat `messages` (the template applied),
        each text checked (`check_text`) and bounded by characters before it is tokenized."""
        if messages is not None:
            for i, m in enumerate(messages):
                check_text(f"messages.{i}.content", m["content"])
            self.check_chars(sum(len(m["content"]) for m in messages), new_tokens)
            with self.one() as tok:
                return list(tok.apply_chat_template(messages, add_generation_prompt=True,
                                                    tokenize=True, return_dict=True)["input_ids"])
        if isinstance(prompt, list):
            return list(prompt)
        check_text("prompt", prompt)
        self.check_chars(len(prompt), new_tokens)
        with self.one() as tok:
            return list(tok(prompt)["input_ids"])

    def decode(self, token_ids: list[int]) -> str:
        with self.one() as tok:
            return tok.decode(token_ids, skip_special_tokens=True)

    def decode_on_loop(self, token_ids: list[int]) -> str:
        """`decode` for the server's event-loop thread (a stream's deltas): its own copy, so
        it never waits."""
        return self.loop_copy.decode(token_ids, skip_special_tokens=True)
