"""How `engine serve` answers a request once it is tokenized: whole, or as an SSE stream.

`answer` routes and submits through the server (engine/server.py's `Server.run`), then
collects the tokens into one completion or chat completion, or streams text deltas (held back
while they may begin a stop string, decoded on the event loop's own tokenizer copy), SGLang's
`sglext` chunk and the usage chunk. A request that fails is a 500 (whole) or an error event
(stream). Each answer names its replica in the REPLICA_HEADER header.
Leaves out: n > 1, logprobs.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from typing import Any

from fastapi.responses import JSONResponse, Response, StreamingResponse

from engine.openai_api import (
    ApiError,
    cached_tokens_details,
    chat_body,
    chat_chunk,
    completion_body,
    completion_chunk,
    error_body,
    new_id,
    sglext,
    usage,
)
from engine.sampling import first_stop, held_back

REPLICA_HEADER = "x-radixlens-replica"


async def _collect(chunks: asyncio.Queue) -> None:
    while await chunks.get() is not None:
        pass


async def _deltas(server: Any, handle: Any, chunks: asyncio.Queue,
                  stops: tuple[str, ...]) -> AsyncIterator[tuple[str, Any]]:
    """Text deltas as tokens arrive (held back while they may begin a stop string), then
    ("end", result)."""
    ids: list[int] = []
    sent = ""
    while (chunk := await chunks.get()) is not None:
        ids += chunk
        text = server.tokenizers.decode_on_loop(ids)
        cut = first_stop(text, stops)
        safe = text[:cut] if cut is not None else text[:len(text) - held_back(text, stops)]
        if len(safe) > len(sent) and safe.startswith(sent):
            yield "text", safe[len(sent):]
            sent = safe
    result = handle.result(timeout=0)
    if len(result.text) > len(sent) and result.text.startswith(sent):
        yield "text", result.text[len(sent):]
    yield "end", result


def _usage_of(result: Any, prompt_len: int) -> dict[str, Any]:
    cached = int(result.metrics.get("block_matched_tokens", 0))
    return usage(prompt_len, len(result.output_ids), cached)


def _ext_of(req: Any, result: Any) -> dict[str, Any] | None:
    """SGLang's `sglext` for a request that asked for `return_cached_tokens_details`, else None.
    SGLang's split (schedule_batch.py `split_cached_prefix_by_tier`): device = the cached prefix
    less the host tokens that were loaded back. Without the host tier every hit is the
    device's, as SGLang reports it without HiCache."""
    if not req.return_cached_tokens_details:
        return None
    m = result.metrics
    if "host_hit_tokens" in m:
        return sglext(cached_tokens_details(m["device_hit_tokens"], m["host_hit_tokens"]))
    return sglext(cached_tokens_details(m.get("matched_tokens", 0), 0))


def _sse(body: dict[str, Any]) -> str:
    return f"data: {json.dumps(body)}\n\n"


async def answer(server: Any, req: Any, ids: list[int], wanted: int | None,
                  chat: bool, session: str | None = None) -> Response:
    try:
        sampling = req.sampling()
    except ValueError as exc:
        raise ApiError(str(exc)) from None
    rank, handle, chunks = await server.run(ids, server.max_tokens(wanted, len(ids)), sampling,
                                            session)
    rid, model = new_id("chatcmpl" if chat else "cmpl"), server.model_name
    headers = {REPLICA_HEADER: str(rank)}
    if req.stream:
        gen = _stream(server, req, handle, chunks, rid, len(ids), chat)
        return StreamingResponse(gen, media_type="text/event-stream", headers=headers)
    await _collect(chunks)
    try:
        result = handle.result(timeout=0)
    except Exception as exc:  # noqa: BLE001 - the request's own failure, as a 500
        raise ApiError(f"request failed: {exc}", 500, "InternalServerError") from None
    use = _usage_of(result, len(ids))
    body = (chat_body if chat else completion_body)(rid, model, result.text,
                                                    result.finish_reason, use,
                                                    _ext_of(req, result))
    return JSONResponse(body, headers=headers)


async def _stream(server: Any, req: Any, handle: Any, chunks: asyncio.Queue, rid: str,
                  prompt_len: int, chat: bool) -> AsyncIterator[str]:
    model = server.model_name
    if chat:
        yield _sse(chat_chunk(rid, model, {"role": "assistant", "content": ""}))
    try:
        async for kind, value in _deltas(server, handle, chunks, req.sampling().stop):
            if kind == "text":
                yield _sse(chat_chunk(rid, model, {"content": value}) if chat
                           else completion_chunk(rid, model, value))
                continue
            yield _sse(chat_chunk(rid, model, {}, value.finish_reason) if chat
                       else completion_chunk(rid, model, "", value.finish_reason))
            if (ext := _ext_of(req, value)) is not None:  # SGLang: before the usage chunk
                yield _sse(chat_chunk(rid, model, None, ext=ext) if chat
                           else completion_chunk(rid, model, None, ext=ext))
            if req.include_usage:
                use = _usage_of(value, prompt_len)
                yield _sse(chat_chunk(rid, model, None, use=use) if chat
                           else completion_chunk(rid, model, None, use=use))
    except Exception as exc:  # noqa: BLE001 - the stream ends with an error event
        yield _sse(error_body(f"request failed: {exc}", "InternalServerError", 500))
    yield "data: [DONE]\n\n"
