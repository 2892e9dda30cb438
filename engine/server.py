"""The HTTP face of `engine serve`: a FastAPI app over a `Cluster`, served by uvicorn.

OpenAI's `/v1/completions` and `/v1/chat/completions` (whole or SSE streams), `/v1/models`,
`/health`, and vLLM's `/tokenize`, `/detokenize` and `/reset_prefix_cache`. RadixLens adds
`/kv_events` (where each replica publishes) and `/debug/block_cache?rank=N` (a replica's own
block cache, to check a watcher against). A request that sets SGLang's
`return_cached_tokens_details` gets SGLang 0.5.23's `sglext.cached_tokens_details`: the radix
tree's hit split into device and host (loaded back) tokens; host 0 without --host-ratio. A
request's work is bounded first (engine/admission.py: the body's bytes, the prompt's characters
against the context, tokenizing on copies of the tokenizer outside the replicas' lock); it is
tokenized once, routed (with its conversation id, engine/openai_api.py's `session_of`) past any
replica that is down, and answered by engine/answers.py (each answer names its replica in the
`x-radixlens-replica` header). Every error is OpenAI's shape with its status (a fault: 500).
Leaves out: aborting a request whose client went away (it runs to its max_tokens), auth, CORS.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, Response
from pydantic import ValidationError
from starlette.concurrency import run_in_threadpool
from starlette.exceptions import HTTPException

from engine.admission import BODY_IDLE_S, DEFAULT_MAX_BODY_BYTES, BodyLimit, Tokenizers
from engine.answers import answer
from engine.cluster import Cluster
from engine.openai_api import ApiError, ChatRequest, CompletionRequest, error_body, session_of
from engine.sampling import SamplingParams

log = logging.getLogger("engine.server")
KINDS = {400: "BadRequestError", 404: "NotFoundError", 405: "MethodNotAllowedError",
         408: "RequestTimeoutError", 413: "RequestTooLargeError", 503: "ServiceUnavailableError"}


class Server:
    """What the endpoints share: the cluster, the model's name and the default max_tokens.
    `max_context` lowers the replicas' context length (vLLM's --max-model-len; None: theirs)."""

    def __init__(self, cluster: Cluster, model_name: str, default_max_tokens: int = 256,
                 max_context: int | None = None) -> None:
        self.cluster, self.model_name = cluster, model_name
        self.default_max_tokens = default_max_tokens
        self.tokenizer = cluster.loaded.tokenizer
        own = cluster.replicas[0].max_context
        self.max_context = own if max_context is None else min(max_context, own or max_context)
        self.tokenizers = Tokenizers(self.tokenizer, self.max_context)

    def check_model(self, model: str | None) -> None:
        if model is not None and model != self.model_name:
            raise ApiError(f"The model `{model}` does not exist.", 404, "NotFoundError")

    def tokenize(self, prompt: Any = None, messages: list[dict] | None = None,
                 new_tokens: int = 0) -> list[int]:
        """Token ids, the prompt first bounded by its characters (engine/admission.py)."""
        return self.tokenizers.encode(prompt, messages, new_tokens)

    def decode(self, token_ids: list[int]) -> str:
        return self.tokenizers.decode(token_ids)

    def max_tokens(self, wanted: int | None, prompt_len: int) -> int:
        if wanted is not None:
            if self.max_context is not None and prompt_len + wanted > self.max_context:
                raise ApiError(
                    f"this model's maximum context length is {self.max_context:,} tokens; the "
                    f"request needs {prompt_len + wanted:,} ({prompt_len:,} in the prompt, "
                    f"{wanted:,} new)")
            return wanted
        room = (self.max_context - prompt_len) if self.max_context else self.default_max_tokens
        return max(1, min(self.default_max_tokens, room))

    async def run(self, token_ids: list[int], max_tokens: int, sampling: SamplingParams,
                  session: str | None = None) -> tuple[int, Any, asyncio.Queue]:
        """Routes (by `session` too, for the session router) and submits; returns (rank,
        handle, queue of token chunks then None). A replica that died since it was chosen is
        out of the next choice: tried once per replica."""
        for _ in range(self.cluster.config.dp):
            try:
                rank = self.cluster.route(token_ids, max_tokens, session).rank
            except RuntimeError as exc:  # no replica is live
                raise ApiError(str(exc), 503, "ServiceUnavailableError") from None
            try:
                return self._submit(rank, token_ids, max_tokens, sampling)
            except RuntimeError as exc:
                why = exc
        raise ApiError(str(why), 503, "ServiceUnavailableError")

    def _submit(self, rank: int, token_ids: list[int], max_tokens: int,
                sampling: SamplingParams) -> tuple[int, Any, asyncio.Queue]:
        cluster = self.cluster
        loop, chunks = asyncio.get_running_loop(), asyncio.Queue()
        load = len(token_ids) + max_tokens  # the tokens this request adds to its replica

        def listener(chunk: list[int] | None) -> None:
            if chunk is None:
                cluster.ended(rank, load)
            loop.call_soon_threadsafe(chunks.put_nowait, chunk)

        cluster.started(rank, load)
        try:
            handle = cluster.replicas[rank].submit(token_ids, max_tokens, sampling=sampling,
                                                   listener=listener)
        except ValueError as exc:
            cluster.ended(rank, load)
            raise ApiError(str(exc)) from None
        except RuntimeError:
            cluster.ended(rank, load)
            raise
        return rank, handle, chunks


def _validation_message(errors: list[dict[str, Any]], skip: int = 1) -> str:
    """The first pydantic error as "field: what is wrong" (`skip`: FastAPI's "body" prefix)."""
    first = errors[0] if errors else {}
    where = ".".join(str(p) for p in first.get("loc", ())[skip:])
    what = str(first.get("msg", "invalid request")).removeprefix("Value error, ")
    if first.get("type") == "json_invalid":
        what = f"the body is not valid JSON ({first.get('ctx', {}).get('error', what)})"
        where = ""
    return f"{where}: {what}" if where else what


def _http_message(exc: HTTPException) -> str:
    cause = exc.__cause__
    if isinstance(cause, UnicodeDecodeError):
        return f"the body is not valid UTF-8: {cause.reason} at byte {cause.start:,}"
    if isinstance(cause, RecursionError):
        return "the body's JSON nests too deeply"
    return str(exc.detail)


def _error(message: str, status: int, kind: str | None = None) -> JSONResponse:
    kind = kind or KINDS.get(status, "BadRequestError" if status < 500 else "InternalServerError")
    return JSONResponse(error_body(message, kind, status), status_code=status)


def build_app(server: Server, max_body_bytes: int = DEFAULT_MAX_BODY_BYTES,
              body_idle_s: float = BODY_IDLE_S) -> FastAPI:
    """The FastAPI app, bodies capped at `max_body_bytes` and read without a pause of
    `body_idle_s` (engine/admission.py BodyLimit)."""
    app = FastAPI(title="RadixLens engine serve")
    app.add_middleware(BodyLimit, max_bytes=max_body_bytes, idle_s=body_idle_s)

    @app.exception_handler(ApiError)
    async def _api_error(_: Request, exc: ApiError) -> JSONResponse:
        return _error(str(exc), exc.code, exc.kind)

    @app.exception_handler(RequestValidationError)
    async def _invalid(_: Request, exc: RequestValidationError) -> JSONResponse:
        return _error(_validation_message(list(exc.errors())), 400)

    @app.exception_handler(HTTPException)
    async def _http(_: Request, exc: HTTPException) -> JSONResponse:
        return _error(_http_message(exc), exc.status_code)

    @app.exception_handler(Exception)
    async def _fault(request: Request, exc: Exception) -> JSONResponse:
        log.error("%s %s failed: %s: %s", request.method, request.url.path,
                  type(exc).__name__, exc, exc_info=exc)
        return _error(f"the server failed on this request: {type(exc).__name__}", 500)

    @app.get("/health")
    async def health() -> Response:
        dead = [r for r, up in enumerate(server.cluster.live()) if not up]
        if dead:
            return JSONResponse(error_body(f"replicas {dead} stopped", "EngineDeadError", 503),
                                status_code=503)
        return Response(status_code=200)

    @app.get("/v1/models")
    async def models() -> dict[str, Any]:
        return {"object": "list", "data": [{
            "id": server.model_name, "object": "model", "created": 0, "owned_by": "radixlens",
            "root": server.model_name, "max_model_len": server.max_context}]}

    @app.post("/tokenize")
    async def tokenize(body: dict[str, Any]) -> dict[str, Any]:
        server.check_model(body.get("model"))
        if "messages" in body:
            try:
                req = ChatRequest(messages=body["messages"])
            except ValidationError as exc:
                raise ApiError(_validation_message(exc.errors(), skip=0)) from None
            tokens = await run_in_threadpool(server.tokenize, None, req.template_messages())
        elif isinstance(body.get("prompt"), str):
            tokens = await run_in_threadpool(server.tokenize, body["prompt"])
        else:
            raise ApiError("tokenize needs a string `prompt` or `messages`")
        return {"tokens": tokens, "count": len(tokens), "max_model_len": server.max_context}

    @app.post("/detokenize")
    async def detokenize(body: dict[str, Any]) -> dict[str, Any]:
        server.check_model(body.get("model"))
        tokens, vocab = body.get("tokens"), len(server.tokenizer)
        if not isinstance(tokens, list) or not all(
                isinstance(t, int) and not isinstance(t, bool) and 0 <= t < vocab
                for t in tokens):
            raise ApiError("detokenize needs `tokens`: a list of token ids of this model")
        return {"prompt": await run_in_threadpool(server.decode, tokens)}

    @app.post("/reset_prefix_cache")
    async def reset_prefix_cache() -> Response:
        try:
            done = await run_in_threadpool(server.cluster.reset_prefix_cache)
        except RuntimeError as exc:  # a replica is down
            raise ApiError(str(exc), 503, "ServiceUnavailableError") from None
        if not all(done):
            raise ApiError("requests are running; reset_prefix_cache did nothing on replicas "
                           f"{[r for r, ok in enumerate(done) if not ok]}", 409, "ConflictError")
        return Response(status_code=200)

    @app.get("/kv_events")
    async def kv_events() -> dict[str, Any]:
        """Where each replica publishes, as configured and bound (a wildcard stays a wildcard:
        the client puts in the host it reached this server by; never the Host header, which
        anyone can set), `pub_binds` False: the PUB socket connects out, subscribe where it
        connects to; and how the events' block hashes are made."""
        c = server.cluster
        return {"dp": c.config.dp, "block_size": c.config.block_size, "topic": c.config.topic,
                "router": c.config.router, "hash_algo": c.config.hash_algo,
                "hash_seed": None if c.config.hash_algo == "radixlens" else c.config.hash_seed,
                "publishers": c.publisher_info()}

    @app.get("/debug/block_cache")
    async def block_cache(rank: int = 0) -> dict[str, Any]:
        if not 0 <= rank < server.cluster.config.dp:
            raise ApiError(f"rank must be in [0, {server.cluster.config.dp})")
        try:
            blocks = await run_in_threadpool(server.cluster.block_cache, rank)
        except RuntimeError as exc:  # its loop died
            raise ApiError(str(exc), 503, "ServiceUnavailableError") from None
        return {"rank": rank, "blocks": blocks}

    @app.post("/v1/completions")
    async def completions(req: CompletionRequest, request: Request) -> Response:
        server.check_model(req.model)
        ids = await run_in_threadpool(server.tokenize, req.prompt, None, req.max_tokens or 1)
        return await answer(server, req, ids, req.max_tokens, chat=False,
                             session=session_of(req, request.headers))

    @app.post("/v1/chat/completions")
    async def chat(req: ChatRequest, request: Request) -> Response:
        server.check_model(req.model)
        try:
            ids = await run_in_threadpool(server.tokenize, None, req.template_messages(),
                                          req.wanted_tokens() or 1)
        except ApiError:
            raise
        except Exception as exc:  # noqa: BLE001 - a template that rejects the messages
            raise ApiError(f"messages: {exc}") from None
        return await answer(server, req, ids, req.wanted_tokens(), chat=True,
                             session=session_of(req, request.headers))

    return app
