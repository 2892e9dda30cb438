"""One browser session's live engine: its EngineService, a live copy of its tree, its requests.

The model (weights) is shared by every session of the process; each `LiveSession` owns its
engine service (radix tree, KV pool, block shadow, loop: the app's in a process of its own,
engine/procservice.py) and a private copy of the tokenizer for the page (a Hugging Face fast
tokenizer is not safe to share between threads). `LiveTree` is the service's listener: it is
handed every stamped event in the engine's order; tree events
rebuild a `TreeModel` (the replay law makes it equal to the engine's tree) and the steps worth
telling (splits, new leaves, evictions, lock walks, admissions) are kept with what the words need
(the tree before a split, the step's key length), for viz/words.py to say. Prefill is chunked
(CHUNK tokens a round, as SGLang's chunked prefill), so a long prompt shows its progress.
runtime/sessions.py's `SessionRegistry` closes the engines of browser sessions that are gone.
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
from typing import Any, NamedTuple

from radix import events as ev
from radix.sched.scheduler import SchedulerConfig
from radix.tree.replay import TreeModel
from radix.tree.snapshot import TreeSnapshot

CAPACITY_TOKENS = 4_096  # KV slots per session: 4,096 x 46,080 B = 180 MiB for SmolLM2 in fp32
CHUNK = 256  # prefill tokens per request per round
CLOSE_TIMEOUT_S = 10.0  # Reset waits this long for the engine thread to stop
Messages = list[dict[str, str]]
TOLD = (ev.NodeSplit, ev.NodeInserted, ev.NodeEvicted, ev.LockChanged)  # tree events kept


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
    max_new_tokens: int = 0
    token_ids: tuple[int, ...] = ()  # the prompt after the chat template (why: two compared)

    @property
    def done(self) -> bool:
        return self.metrics is not None or self.error is not None


class PathBefore(NamedTuple):
    """The records of a node and its ancestors just before an event (what a split's words
    need: the edge's length and its depth in tokens). Duck-types TreeModel's `nodes`."""

    nodes: dict[int, Any]


class Told(NamedTuple):
    """One event worth telling, with its step's context."""

    wall_time: float
    rid: str | None  # the step's request (None: the scheduler's own match)
    op: str  # the public call of its step ("match_prefix", "inc_lock_ref", "scheduler", ...)
    event: Any  # a radix event; for a lock walk, the tuple of its LockChanged hops
    before: PathBefore | None  # the tree before a split
    key_len: int | None  # the step's match key length (its PrefixMatched), if any


class LiveTree:
    """Thread-safe: `__call__` runs on the engine's thread (a ProcessService's: the thread that
    reads its child), the readers on the page's."""

    def __init__(self, max_told: int = 200) -> None:
        self._lock = threading.Lock()
        self._model = TreeModel()
        self._owners: dict[int, str] = {}
        self._told: deque[Told] = deque(maxlen=max_told)
        self._step: list[tuple[Any, PathBefore | None]] = []  # this step's told events so far
        self._op, self._key_len = "", None
        self._admitted: dict[str, tuple[int, int]] = {}  # rid -> (matched, to prefill), first
        self._chunks: dict[str, list[int]] = {}  # rid -> tokens of each admitted chunk
        self.num_events = 0  # tree events applied so far

    def __call__(self, stamped: Any) -> None:
        """Takes one `StampedEvent(rid, wall_time, source, event)`."""
        e = stamped.event
        with self._lock:
            if stamped.source == "tree":
                self._on_tree(e, stamped.rid, stamped.wall_time)
            elif stamped.source == "scheduler" and isinstance(e, ev.RequestAdmitted):
                self._admitted.setdefault(e.rid, (e.prefix_len, e.extend_len))
                self._chunks.setdefault(e.rid, []).append(e.extend_len)
                self._told.append(Told(stamped.wall_time, e.rid, "scheduler", e, None, None))
            elif stamped.source == "scheduler" and isinstance(e, ev.RequestRetracted):
                self._chunks.pop(e.rid, None)
                self._told.append(Told(stamped.wall_time, e.rid, "scheduler", e, None, None))

    def _on_tree(self, e: ev.Event, rid: str | None, wall: float) -> None:
        self.num_events += 1
        if isinstance(e, ev.StepStarted):
            self._op, self._key_len, self._step = e.op, None, []
        elif isinstance(e, ev.PrefixMatched):
            self._key_len = e.key_len
        elif isinstance(e, ev.NodeSplit):
            self._step.append((e, self._path(e.node_id)))
        elif isinstance(e, TOLD):
            self._step.append((e, None))
        elif isinstance(e, ev.StepEnded):
            self._flush(rid, wall)
        if isinstance(e, ev.NodeInserted) and rid:
            self._owners[e.node_id] = rid
        elif isinstance(e, ev.NodeSplit) and e.node_id in self._owners:
            self._owners[e.new_node_id] = self._owners[e.node_id]
        self._model.apply(e)

    def _path(self, node_id: int) -> PathBefore:
        nodes, out = self._model.nodes, {}
        while node_id in nodes and node_id not in out:
            node = out[node_id] = copy.copy(nodes[node_id])  # its key and parent as they are now
            node_id = None if node.parent is None else node.parent.id
        return PathBefore(out)

    def _flush(self, rid: str | None, wall: float) -> None:
        """A step ended: its told events become Told records; a lock walk's hops, one."""
        hops: list[ev.LockChanged] = []
        for e, before in self._step + [(None, None)]:
            if isinstance(e, ev.LockChanged) and (not hops or hops[-1].delta == e.delta):
                hops.append(e)
                continue
            if hops:
                self._told.append(Told(wall, rid, self._op, tuple(hops), None, self._key_len))
                hops = [e] if isinstance(e, ev.LockChanged) else []
                if hops:
                    continue
            if e is not None:
                self._told.append(Told(wall, rid, self._op, e, before, self._key_len))
        self._step = []

    def snapshot(self) -> TreeSnapshot:
        with self._lock:
            return self._model.snapshot()

    def told(self, n: int = 10) -> list[Told]:
        """The last n things worth telling, oldest first."""
        with self._lock:
            return list(self._told)[-n:] if n > 0 else []

    def admitted(self) -> dict[str, tuple[int, int]]:
        """rid -> (tokens matched, tokens to prefill) at its first admission."""
        with self._lock:
            return dict(self._admitted)

    def chunks(self) -> dict[str, list[int]]:
        """rid -> the prefill chunks admitted so far (tokens each), oldest first."""
        with self._lock:
            return {rid: list(c) for rid, c in self._chunks.items()}

    def owners(self) -> dict[int, str]:
        with self._lock:
            return dict(self._owners)


class Progress(NamedTuple):
    """Where one unfinished request stands, for the page's progress bar."""

    rid: str
    stage: str  # "waiting", "prefill" or "decode"
    done: int  # tokens prefilled (prefill) or generated (decode) so far
    total: int  # tokens to prefill, or max_new_tokens
    ahead: int  # requests admitted before it that still prefill, plus those queued before it
    ahead_tokens: int  # prompt tokens those still have to prefill


def own_process_service(*args: Any, **kw: Any) -> Any:
    """The engine service (loop, caches, model) in a process of its own, behind a proxy with
    EngineService's calls (engine/procservice.py): the app's engines, so the page's Python
    slows neither their forward nor their scheduler (#24 item 5)."""
    from engine.procservice import ProcessService  # here: torch only once an engine starts

    return ProcessService(*args, **kw)


def sim_service(step_s: float = 0.0, **service_kw: Any) -> Callable[..., Any]:
    """A service factory without a model: EngineService over the simulated backend (the real
    scheduler and caches, priced; engine/backends.py), on a thread here, with `service_kw`
    added to what LiveSession passes. The Live page's engine under RADIXLENS_LIVE_ENGINE=sim
    (the browser tests' shared server; scenarios/classroom.py's SimLoaded is its `loaded`) and
    the Classroom's simulated rooms (scenarios/classroom.py sim_sessions)."""
    def make(*args: Any, **kw: Any) -> Any:
        from engine.backends import simulated  # here: torch comes with the engine, not at import
        from engine.service import EngineService

        return EngineService(*args, **kw, **service_kw, backend=simulated(step_s))
    return make


class LiveSession:
    """`submit` prompts, call `poll()` on every page run, read `requests` and `tree`."""

    def __init__(self, loaded: Any, capacity_tokens: int = CAPACITY_TOKENS, *,
                 no_cache: bool = False, history: list[LiveRequest] | None = None,
                 service_factory: Callable[..., Any] | None = None,
                 tree: LiveTree | None = None) -> None:
        if service_factory is None:  # imported here: torch only once a real engine starts
            from engine.service import EngineService as service_factory
        self.loaded, self.no_cache, self.capacity = loaded, no_cache, capacity_tokens
        self.tokenizer = copy.deepcopy(loaded.tokenizer)
        engine_side = dataclasses.replace(loaded, tokenizer=copy.deepcopy(loaded.tokenizer))
        self.tree = tree if tree is not None else LiveTree()  # the classroom's counts changes
        self.factory = service_factory
        self.service: Any = service_factory(engine_side, capacity_tokens, no_cache=no_cache,
                                            listener=self.tree,
                                            config=SchedulerConfig(chunked_prefill_size=CHUNK))
        self.requests: list[LiveRequest] = history if history is not None else []
        self._later: deque[tuple[str, Messages, int]] = deque()  # one-at-a-time scenario rest
        # numbered on from the history: a restarted engine (cache toggled) keeps rids unique,
        # so the table and the why panel tell its requests from the earlier ones (issue 41)
        self._ids = itertools.count(len(self.requests) + 1)
        self._blocks: Any = None  # the block shadow's latest snapshot (taken on the engine)
        self._blocks_asked = False
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
        if self.closed:
            raise RuntimeError("this session's engine was stopped: reset to start a new one")
        rid = f"{label}.{next(self._ids)}"
        handle = self.service.submit(ids, max_new_tokens, rid=rid)
        req = LiveRequest(label, rid, not self.no_cache, len(ids), handle,
                          max_new_tokens=max_new_tokens, token_ids=tuple(ids))
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
        if self._later and all(r.done for r in self.requests) and not self.closed:
            self.submit(*self._later.popleft())

    def progress(self) -> list[Progress]:
        """Every unfinished request: waiting (with the queue ahead), prefilling (chunks done of
        its tokens to prefill) or decoding (tokens out of max_new_tokens)."""
        admitted, chunks = self.tree.admitted(), self.tree.chunks()
        out: list[Progress] = []
        left: list[int] = []  # tokens still to prefill of the requests before this one
        for req in self.requests:
            if req.done:
                continue
            if req.output_ids:
                out.append(Progress(req.rid, "decode", len(req.output_ids), req.max_new_tokens,
                                    0, 0))
                continue
            if req.rid in admitted:
                matched, _ = admitted[req.rid]
                total = req.prompt_len - matched
                # the last chunk admitted is in its forward now: the ones before it are done
                done = sum(chunks.get(req.rid, [])[:-1])
                out.append(Progress(req.rid, "prefill", done, total, len(left), sum(left)))
                left.append(total - done)
            else:
                out.append(Progress(req.rid, "waiting", 0, req.prompt_len, len(left), sum(left)))
                left.append(req.prompt_len)
        return out

    def prefill_rate(self) -> float | None:
        """Prompt tokens per second over this engine's last 20 prefill rounds (measured)."""
        steps = [s for s in list(getattr(self.service, "steps", None) or [])[-50:]
                 if s.kind == "prefill"]
        steps = steps[-20:]
        seconds = sum(s.seconds for s in steps)
        return sum(sum(s.extend_lens) for s in steps) / seconds if seconds > 0 else None

    def block_snapshot(self) -> Any:
        """vLLM's block pool (the shadow) as of the last snapshot the engine thread took; asks
        for a fresh one without waiting for a forward to end (None until the first arrives)."""
        if not self._blocks_asked and not self.closed and self.service is not None:
            self._blocks_asked = True

            def take(future: Any) -> None:
                if future.exception() is None and future.result() is not None:
                    self._blocks = future.result()
                self._blocks_asked = False

            try:
                asked = self.service.snapshot_blocks()
                asked.add_done_callback(take)
                asked.result(timeout=0.3)
            except Exception:  # noqa: BLE001 - a busy or stopped engine: keep the last one
                pass
        return self._blocks

    def text(self, req: LiveRequest) -> str:
        return self.tokenizer.decode(req.output_ids, skip_special_tokens=False)

    def decode(self, token_ids: list[int]) -> str:
        return self.tokenizer.decode(token_ids)

    def restart(self, no_cache: bool) -> LiveSession:
        """A fresh engine (empty tree) with the cache on or off; the request history carries."""
        self.close()
        return LiveSession(self.loaded, self.capacity, no_cache=no_cache, history=self.requests,
                           service_factory=self.factory)

    def close(self) -> None:
        """Stops the engine thread now: queued and running requests are cancelled (each gets
        RequestCancelled), the thread is joined (up to CLOSE_TIMEOUT_S), and the service is
        dropped, so its KV pool is freed even while the browser session lingers. subtle:
        without cancel the engine would finish every queued request first, and a Reset
        mid-run would leave the old thread running beside the new one."""
        self._later.clear()
        self.closed = True
        if self.service is None:
            return
        try:
            self.service.close(timeout=CLOSE_TIMEOUT_S, cancel=True)
        except Exception:  # noqa: BLE001 - the engine's error was already given to its handles
            pass
        self.service = None
        self._blocks = None


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
