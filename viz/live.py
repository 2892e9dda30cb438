"""One browser session's live engine: its EngineService, its live tree, its requests and rows.

The model (weights) is shared by every session of the process; each `LiveSession` owns its
EngineService (radix tree, KV pool, block shadow, event log, engine thread) and two private copies
of the tokenizer (one for the engine thread, one for the page), since a Hugging Face fast
tokenizer is not safe to share between threads and the service's lock is per service.
Forwards of several sessions may run at once on the shared model: inference-mode forwards do not
mutate it. `SessionRegistry` closes the services of browser sessions that are gone.
Leaves out: stop strings and EOS (the engine runs every request to max_new_tokens).
"""

from __future__ import annotations

import copy
import dataclasses
import itertools
import queue
import threading
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from engine.service import EngineService
from viz.dot import tree_to_dot
from viz.live_tree import LiveTree

CAPACITY_TOKENS = 4_096  # KV slots per session: 4,096 x 46,080 B = 180 MiB for SmolLM2 in fp32
Messages = list[dict[str, str]]


def measured_label(loaded: Any) -> str:
    """'measured: SmolLM2-135M-Instruct, CPU fp32' for the default model on CPU."""
    short = {"float32": "fp32", "bfloat16": "bf16", "float16": "fp16"}
    dtype = str(loaded.dtype).removeprefix("torch.")
    return f"measured: {loaded.name}, {loaded.device.type.upper()} {short.get(dtype, dtype)}"


@dataclass
class LiveRequest:
    label: str  # what the user picked ("R2", "user3", "you")
    rid: str  # the engine's request id (unique in its service)
    cache_on: bool  # False: run with the cache disabled (the control)
    prompt_len: int  # prompt tokens after the chat template
    handle: Any  # engine.service.RequestHandle
    output_ids: list[int] = field(default_factory=list)  # streamed so far
    metrics: dict[str, float] | None = None  # the engine's, once finished
    error: str | None = None  # why it failed, if it did

    @property
    def done(self) -> bool:
        return self.metrics is not None or self.error is not None


class LiveSession:
    """`submit` prompts, call `poll()` on every page run, read `requests`, `tree`, `dot()`."""

    def __init__(self, loaded: Any, capacity_tokens: int = CAPACITY_TOKENS, *,
                 no_cache: bool = False, history: list[LiveRequest] | None = None,
                 service_factory: Callable[..., Any] = EngineService) -> None:
        self.loaded, self.no_cache, self.capacity = loaded, no_cache, capacity_tokens
        self.tokenizer = copy.deepcopy(loaded.tokenizer)
        engine_side = dataclasses.replace(loaded, tokenizer=copy.deepcopy(loaded.tokenizer))
        self.tree = LiveTree()
        self.service = service_factory(engine_side, capacity_tokens, no_cache=no_cache,
                                       listener=self.tree)
        self.requests: list[LiveRequest] = history if history is not None else []
        self._later: deque[tuple[str, Messages, int]] = deque()  # one-at-a-time scenario rest
        self._ids = itertools.count(1)
        self.closed = False  # True once close() ran: make a new session (restart) to go on

    def encode(self, messages: Messages) -> list[int]:
        """The chat template over `messages`, ending with the assistant's turn."""
        out = self.tokenizer.apply_chat_template(messages, add_generation_prompt=True,
                                                 tokenize=True, return_dict=True)
        return list(out["input_ids"])

    def submit(self, label: str, messages: Messages, max_new_tokens: int) -> LiveRequest:
        """Queues one prompt; ValueError if it cannot fit this session's KV pool."""
        ids = self.encode(messages)
        if len(ids) + max_new_tokens > self.capacity:
            raise ValueError(f"{label}: {len(ids):,} prompt tokens + {max_new_tokens} new do "
                             f"not fit the {self.capacity:,}-token KV pool")
        rid = f"{label}.{next(self._ids)}"
        handle = self.service.submit(ids, max_new_tokens, rid=rid)
        req = LiveRequest(label, rid, not self.no_cache, len(ids), handle)
        self.requests.append(req)
        return req

    def submit_all(self, prompts: list[tuple[str, Messages]], max_new_tokens: int,
                   one_at_a_time: bool = False) -> None:
        """All at once (admitted together, they prefill shared prefixes side by side), or each
        after the previous finished (each finds the earlier ones in the tree)."""
        if not one_at_a_time:
            for label, messages in prompts:
                self.submit(label, messages, max_new_tokens)
            return
        self._later.extend((label, m, max_new_tokens) for label, m in prompts)
        self.poll()

    @property
    def pending(self) -> bool:
        return bool(self._later) or any(not r.done for r in self.requests)

    def poll(self) -> None:
        """Pulls streamed tokens and finished results; submits the next queued prompt."""
        for req in self.requests:
            if not req.done:
                _poll_one(req)
        if self._later and all(r.done for r in self.requests):
            self.submit(*self._later.popleft())

    def text(self, req: LiveRequest) -> str:
        return self.tokenizer.decode(req.output_ids, skip_special_tokens=False)

    def decode(self, token_ids: list[int]) -> str:
        return self.tokenizer.decode(token_ids)

    def dot(self, selected: int | None = None) -> str:
        highlight = {selected: "selected"} if selected is not None else None
        return tree_to_dot(self.tree.snapshot(), decode=self.decode, highlight=highlight)

    def restart(self, no_cache: bool) -> LiveSession:
        """A fresh engine (empty tree) with the cache on or off; the request history carries."""
        self.close()
        return LiveSession(self.loaded, self.capacity, no_cache=no_cache, history=self.requests,
                           service_factory=type(self.service))

    def close(self) -> None:
        """Stops the engine thread once its queued requests finish; never blocks."""
        self._later.clear()
        self.closed = True
        try:
            self.service.close(timeout=0)
        except Exception:  # noqa: BLE001 - the engine's error was already given to its handles
            pass


def _poll_one(req: LiveRequest) -> None:
    try:
        result = req.handle.result(timeout=0)
    except TimeoutError:
        try:
            for token in req.handle.tokens(timeout=0):
                req.output_ids.append(token)
        except queue.Empty:
            pass
        except Exception as exc:  # noqa: BLE001 - shown in the table, never as a traceback
            req.error = f"{type(exc).__name__}: {exc}"
        return
    except Exception as exc:  # noqa: BLE001
        req.error = f"{type(exc).__name__}: {exc}"
        return
    req.output_ids, req.metrics = list(result.output_ids), dict(result.metrics)


class SessionRegistry:
    """Process-wide: browser session id -> its LiveSession; `sweep` closes the dead ones."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._sessions: dict[str, LiveSession] = {}

    def put(self, session_id: str, session: LiveSession) -> None:
        with self._lock:
            old = self._sessions.get(session_id)
            self._sessions[session_id] = session
        if old is not None and old is not session:
            old.close()

    def sweep(self, is_active: Callable[[str], bool]) -> list[str]:
        """Closes and forgets sessions whose browser session has ended; returns their ids."""
        with self._lock:
            dead = [sid for sid in self._sessions if not is_active(sid)]
            closing = [self._sessions.pop(sid) for sid in dead]
        for session in closing:
            session.close()
        return dead

    def __len__(self) -> int:
        with self._lock:
            return len(self._sessions)
