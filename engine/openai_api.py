"""The OpenAI-compatible request and response shapes of `engine serve`, after vLLM's protocol.

Requests are pydantic models (unknown fields ignored, as OpenAI clients send extras); each turns
into the engine's `SamplingParams` and max_tokens. Responses are plain dicts: completions and
chat completions, whole or as SSE chunks, with `usage.prompt_tokens_details.cached_tokens` the
prefix-cache hit of the request's first scheduling in vLLM's block cache (full blocks, capped at
prompt - 1 tokens), always present as with vLLM's --enable-prompt-tokens-details. SGLang's
`return_cached_tokens_details` is read too: the answer then carries SGLang 0.5.23's `sglext`
object with `cached_tokens_details` {"device", "host"} (`cached_tokens_details`). Differences:
an omitted temperature means greedy (OpenAI's default is 1); a boolean is never a number
(`max_tokens: true` and `prompt: [true, false]` are refused, where pydantic would read 1 and
[1, 0]); a lone surrogate anywhere in a body is refused with its field. A conversation's id
(`session_of`) is read where vLLM 0.33 and SGLang 0.5.23 read it, for the `session` router.
Leaves out: n > 1, logprobs, echo, best_of, tools, several prompts per request.
"""

from __future__ import annotations

import json
import re
import time
import uuid
from collections.abc import Mapping
from typing import Annotated, Any, Literal

from pydantic import BaseModel, BeforeValidator, ConfigDict, Field, field_validator, model_validator

from engine.sampling import (
    MAX_STOP,
    MAX_STOP_TOKEN_IDS,
    MAX_TEMPERATURE,
    SEED_RANGE,
    SamplingParams,
)

_SURROGATE = re.compile("[\ud800-\udfff]")
_TEXTUAL = (str, dict, list)  # what may hold text


def _not_bool(value: Any) -> Any:
    if isinstance(value, bool):
        raise ValueError(f"expected a number, got {str(value).lower()}")
    return value


Int = Annotated[int, BeforeValidator(_not_bool)]  # an int that is not a bool
Float = Annotated[float, BeforeValidator(_not_bool)]


def lone_surrogate(data: Any) -> str | None:
    """Where the first lone surrogate of a JSON body is (a dotted field path and the
    character), or None. Iterative: a body nests as deep as the JSON parser allowed.

    >>> lone_surrogate({"messages": [{"content": "a" + chr(0xD800)}]}), lone_surrogate(["ok"])
    ('messages.0.content, character 1', None)
    """
    stack: list[tuple[str, Any]] = [("", data)]
    while stack:
        path, value = stack.pop()
        if isinstance(value, str):
            if (m := _SURROGATE.search(value)) is not None:
                return f"{path or 'body'}, character {m.start():,}"
        elif isinstance(value, dict):
            stack += [(f"{path}.{k}".lstrip("."), v) for k, v in reversed(value.items())
                      if isinstance(v, _TEXTUAL)]
            stack += [(f"{path}.{k!r}".lstrip("."), k) for k in value if isinstance(k, str)]
        elif isinstance(value, list):  # subtle: token ids are most of a big body: skip them
            texts = [i for i, v in enumerate(value) if isinstance(v, _TEXTUAL)]
            stack += [(f"{path}.{i}".lstrip("."), value[i]) for i in reversed(texts)]
    return None


class StreamOptions(BaseModel):
    include_usage: bool = False


class _Common(BaseModel):
    model_config = ConfigDict(extra="ignore")
    model: str | None = None
    temperature: Float | None = Field(None, ge=0.0, le=MAX_TEMPERATURE, allow_inf_nan=False)
    top_p: Float | None = Field(None, gt=0.0, le=1.0, allow_inf_nan=False)
    top_k: Int | None = Field(None, ge=-1)
    seed: Int | None = Field(None, ge=SEED_RANGE[0], le=SEED_RANGE[1])
    stop: str | list[str] | None = Field(None, max_length=MAX_STOP)
    stop_token_ids: list[Int] | None = Field(None, max_length=MAX_STOP_TOKEN_IDS)
    ignore_eos: bool = False
    stream: bool = False
    stream_options: StreamOptions | None = None
    n: Int = Field(1, ge=1, le=1)
    logprobs: Any = None
    session_id: str | None = None  # vLLM 0.33's field: one id for a conversation's requests
    vllm_xargs: dict[str, Any] | None = None  # vLLM's extra arguments (its session_id is read)
    return_cached_tokens_details: bool = False  # SGLang 0.5.23's: answer with sglext's split

    @model_validator(mode="before")
    @classmethod
    def _valid_unicode(cls, data: Any) -> Any:
        if (where := lone_surrogate(data)) is not None:
            raise ValueError(f"a lone surrogate at {where} is not valid Unicode")
        return data

    @model_validator(mode="after")
    def _unsupported(self) -> _Common:
        if self.logprobs not in (None, False, 0):
            raise ValueError("logprobs are not supported by engine serve")
        return self

    def sampling(self) -> SamplingParams:
        stop = (self.stop,) if isinstance(self.stop, str) else tuple(self.stop or ())
        return SamplingParams(
            temperature=self.temperature or 0.0, top_p=self.top_p or 1.0,
            top_k=self.top_k or 0, seed=self.seed, stop=tuple(s for s in stop if s),
            stop_token_ids=tuple(self.stop_token_ids or ()), ignore_eos=self.ignore_eos)

    @property
    def include_usage(self) -> bool:
        return bool(self.stream_options and self.stream_options.include_usage)


class CompletionRequest(_Common):
    prompt: str | list[int]  # one prompt: text or token ids (`_one_prompt` reads the others)
    max_tokens: Int | None = Field(16, ge=1)  # OpenAI's default for completions
    echo: bool = False

    @field_validator("prompt", mode="before")
    @classmethod
    def _one_prompt(cls, value: Any) -> str | list[int]:
        """A string, token ids, or a list of one of either (OpenAI's batch form, one item)."""
        if isinstance(value, list) and value and all(isinstance(v, str | list) for v in value):
            if len(value) != 1:
                raise ValueError("engine serve takes one prompt per request")
            value = value[0]
        if isinstance(value, str):
            return value
        if not isinstance(value, list):
            raise ValueError("expected a string or a list of token ids")
        if all(type(t) is int for t in value) and (not value or min(value) >= 0):
            return value
        i, t = next((i, t) for i, t in enumerate(value)
                    if isinstance(t, bool) or not isinstance(t, int) or t < 0)
        raise ValueError(f"item {i}: expected a token id (an int >= 0), got "
                         f"{json.dumps(t)[:40]}")

    @model_validator(mode="after")
    def _no_echo(self) -> CompletionRequest:
        if self.echo:
            raise ValueError("echo is not supported by engine serve")
        return self


class ChatMessage(BaseModel):
    model_config = ConfigDict(extra="ignore")
    role: Literal["system", "user", "assistant", "developer", "tool"]
    content: str | list[dict[str, Any]] | None = None

    def text(self) -> str:
        if isinstance(self.content, list):  # content parts: only text parts are read
            return "".join(p.get("text", "") for p in self.content if p.get("type") == "text")
        return self.content or ""


class ChatRequest(_Common):
    messages: list[ChatMessage] = Field(min_length=1)
    max_tokens: Int | None = Field(None, ge=1)
    max_completion_tokens: Int | None = Field(None, ge=1)

    def template_messages(self) -> list[dict[str, str]]:
        return [{"role": "system" if m.role == "developer" else m.role, "content": m.text()}
                for m in self.messages]

    def wanted_tokens(self) -> int | None:
        return self.max_completion_tokens or self.max_tokens


SESSION_HEADER = "X-Session-ID"  # vLLM 0.33's SESSION_ID_HEADER (and vllm-router's first key)
ROUTING_KEY_HEADER = "X-SMG-Routing-Key"  # SGLang 0.5.23's and its model gateway's header


def session_of(req: _Common, headers: Mapping[str, str]) -> str | None:
    """The conversation's id for the session router, or None.

    vLLM 0.33's order (GenerateBaseServing._get_session_id): the body's `session_id`, then the
    `X-Session-ID` header, then `vllm_xargs["session_id"]` (a non-empty string); then SGLang's
    `X-SMG-Routing-Key` header (its gateway's consistent_hashing / manual key). Empty values
    count as absent, as in vLLM. `headers` is looked up case-insensitively by Starlette.

    >>> r = ChatRequest(messages=[{"role": "user", "content": "hi"}])
    >>> session_of(r, {}), session_of(r, {ROUTING_KEY_HEADER: "k"})
    (None, 'k')
    >>> r.session_id = "body"; session_of(r, {SESSION_HEADER: "head"})
    'body'
    """
    if req.session_id:
        return req.session_id
    if value := headers.get(SESSION_HEADER):
        return value
    xarg = (req.vllm_xargs or {}).get("session_id")
    if isinstance(xarg, str) and xarg:
        return xarg
    return headers.get(ROUTING_KEY_HEADER) or None


def new_id(kind: str) -> str:
    return f"{kind}-{uuid.uuid4().hex}"


def usage(prompt_tokens: int, completion_tokens: int, cached_tokens: int) -> dict[str, Any]:
    """vLLM's UsageInfo with prompt_tokens_details.

    >>> usage(40, 5, 32)["prompt_tokens_details"]
    {'cached_tokens': 32}
    """
    return {"prompt_tokens": prompt_tokens, "completion_tokens": completion_tokens,
            "total_tokens": prompt_tokens + completion_tokens,
            "prompt_tokens_details": {"cached_tokens": cached_tokens}}


def cached_tokens_details(device: int, host: int) -> dict[str, int] | None:
    """A request's cached prompt tokens by tier, as SGLang 0.5.23's scheduler reports them
    (output_streamer.py, `get_cached_tokens_details`; no storage tier here): None when nothing
    was cached. `device`: hit on the device; `host`: loaded back from the host pool.

    >>> cached_tokens_details(0, 49), cached_tokens_details(0, 0)
    ({'device': 0, 'host': 49}, None)
    """
    if device > 0 or host > 0:
        return {"device": device, "host": host}
    return None


def sglext(details: dict[str, int] | None) -> dict[str, Any] | None:
    """SGLang's response-level extension object (protocol.py `SglExt`: None fields dropped),
    or None when it would be empty, as SGLang then leaves `sglext` out."""
    return None if details is None else {"cached_tokens_details": details}


def _body(rid: str, model: str, kind: str, choices: list[dict[str, Any]],
          use: dict[str, Any] | None, ext: dict[str, Any] | None) -> dict[str, Any]:
    """A response of `kind` (whole, or one streamed chunk) with its choices, usage and sglext."""
    body = {"id": rid, "object": kind, "created": int(time.time()), "model": model,
            "choices": choices}
    if use is not None:
        body["usage"] = use
    if ext is not None:
        body["sglext"] = ext
    return body


def completion_body(rid: str, model: str, text: str, finish_reason: str | None,
                    use: dict[str, Any] | None, ext: dict[str, Any] | None = None
                    ) -> dict[str, Any]:
    choice = {"index": 0, "text": text, "logprobs": None, "finish_reason": finish_reason,
              "stop_reason": None}
    return _body(rid, model, "text_completion", [choice], use, ext)


def chat_body(rid: str, model: str, text: str, finish_reason: str | None,
              use: dict[str, Any] | None, ext: dict[str, Any] | None = None) -> dict[str, Any]:
    choice = {"index": 0, "message": {"role": "assistant", "content": text},
              "logprobs": None, "finish_reason": finish_reason, "stop_reason": None}
    return _body(rid, model, "chat.completion", [choice], use, ext)


def chat_chunk(rid: str, model: str, delta: dict[str, str] | None,
               finish_reason: str | None = None, use: dict[str, Any] | None = None,
               ext: dict[str, Any] | None = None) -> dict[str, Any]:
    """One `chat.completion.chunk`; delta None with `use` is the usage-only last chunk, with
    `ext` SGLang's sglext-only chunk (sent before the usage chunk, as SGLang sends it)."""
    choices = [] if delta is None else [
        {"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish_reason}]
    return _body(rid, model, "chat.completion.chunk", choices, use, ext)


def completion_chunk(rid: str, model: str, text: str | None, finish_reason: str | None = None,
                     use: dict[str, Any] | None = None, ext: dict[str, Any] | None = None
                     ) -> dict[str, Any]:
    choices = [] if text is None else [
        {"index": 0, "text": text, "logprobs": None, "finish_reason": finish_reason,
         "stop_reason": None}]
    return _body(rid, model, "text_completion", choices, use, ext)


class ApiError(Exception):
    """A request answered with an error: its HTTP status `code` and OpenAI error `kind`."""

    def __init__(self, message: str, code: int = 400, kind: str = "BadRequestError") -> None:
        super().__init__(message)
        self.code, self.kind = code, kind


def error_body(message: str, kind: str = "BadRequestError", code: int = 400) -> dict[str, Any]:
    """OpenAI's error shape, as vLLM sends it.

    >>> error_body("bad")["error"]["code"]
    400
    """
    return {"error": {"message": message, "type": kind, "param": None, "code": code}}
