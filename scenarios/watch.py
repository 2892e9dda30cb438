"""A watched server, per browser session: a `Watcher` in its own thread, prompts sent, landings.

`WatchSession` subscribes to the publishers (radix/watch) and polls them in a daemon thread;
`views()` copies what each worker holds for drawing (viz/cluster.py). With the server's OpenAI
base URL and model it also sends chat prompts (`send`, in a thread), tokenizes a typed prompt
for the overlap view (`/tokenize`, as vLLM and engine serve offer it) and decodes previews
(`/detokenize`); a sent prompt *lands* when every full block of it is in some worker's view.
`discover` reads engine serve's `/kv_events`; runtime/sessions.py closes gone sessions.
"""

from __future__ import annotations

import io
import json
import threading
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, NamedTuple

from radix.watch.rates import RateBin, rate_series
from radix.watch.recording import Recorder
from radix.watch.stream import Status
from radix.watch.subscriber import Watcher, parse_endpoint
from radix.watch.view import CachedBlock, Run

MAX_RECORDING_BYTES = 32 * 2**20  # a session stops recording past this (and says so)
RATE_WINDOW_S, RATE_BUCKET_S = 120.0, 2.0


def api_base(url: str) -> str:
    """The OpenAI base URL, ending in /v1.

    >>> api_base("localhost:8000"), api_base("http://h:1/v1/")
    ('http://localhost:8000/v1', 'http://h:1/v1')
    """
    url = url.strip().rstrip("/")
    if not url.startswith(("http://", "https://")):
        url = "http://" + url
    return url if url.endswith("/v1") else url + "/v1"


def http_json(url: str, body: dict | None = None, timeout: float = 30.0) -> tuple[dict, dict]:
    """(JSON answer, headers); any failure is one ValueError line naming the URL."""
    data = None if body is None else json.dumps(body).encode()
    req = urllib.request.Request(url, data=data, headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(req, timeout=timeout) as r:
            return json.loads(r.read() or b"{}"), dict(r.headers)
    except urllib.error.HTTPError as exc:
        detail = exc.read()[:300].decode("utf-8", "replace")
        raise ValueError(f"{url}: HTTP {exc.code}: {detail}") from None
    except (urllib.error.URLError, OSError, json.JSONDecodeError) as exc:
        raise ValueError(f"{url}: {getattr(exc, 'reason', exc)}") from None


def discover(base_url: str) -> list[str]:
    """engine serve's publishers, as `PUB,REPLAY` endpoint specs (vLLM and SGLang have no
    such route: type their endpoints instead)."""
    info, _ = http_json(api_base(base_url).removesuffix("/v1") + "/kv_events", timeout=5)
    pubs = info.get("publishers") if isinstance(info, dict) else None
    if not pubs:
        raise ValueError(f"{base_url}: /kv_events lists no publishers")
    outward = [p["endpoint"] for p in pubs if p.get("pub_binds") is False]
    if outward:  # --kv-events-connect: the PUB sockets connect to a proxy, nothing listens there
        raise ValueError(f"{base_url}: its PUB sockets connect out to {', '.join(outward)} "
                         "(--kv-events-connect): type the endpoint your proxy publishes on")
    host = urllib.parse.urlsplit(api_base(base_url)).hostname or "127.0.0.1"
    return [reached(p["endpoint"], host) + (f",{reached(p['replay_endpoint'], host)}"
                                            if p.get("replay_endpoint") else "")
            for p in pubs if p.get("endpoint")]


def reached(endpoint: str, host: str) -> str:
    """A wildcard endpoint as reached at `host`, the host this client reached the server
    by (the server advertises what it bound; it never reflects a Host header).

    >>> reached("tcp://*:5557", "10.0.0.4"), reached("tcp://127.0.0.1:5557", "h")
    ('tcp://10.0.0.4:5557', 'tcp://127.0.0.1:5557')
    """
    host = f"[{host}]" if ":" in host else host
    for wildcard in ("tcp://*:", "tcp://0.0.0.0:", "tcp://[::]:"):
        if endpoint.startswith(wildcard):
            return f"tcp://{host}:" + endpoint[len(wildcard):]
    return endpoint


class WorkerView(NamedTuple):
    name: str
    status: Status
    block_size: int | None
    blocks: tuple[CachedBlock, ...]  # in storage order
    unreachable: frozenset[int]  # hashes no lookup reaches (an ancestor was removed)
    runs: tuple[Run, ...]  # the prefix tree (viz draws it)
    rates: tuple[RateBin, ...]  # stored / removed per second, oldest first


@dataclass
class SentPrompt:
    text: str
    sent_at: float
    token_ids: list[int] | None = None  # as the server tokenized it (for the landing check)
    state: str = "sending"  # "sending", "done", "error"
    answer: str = ""
    replica: str = "-"  # engine serve's x-radixlens-replica header
    prompt_tokens: int = 0
    cached_tokens: int | None = None
    landed_after: float | None = None  # seconds from send until its blocks were in a view
    error: str = ""
    system: str = ""  # the system message sent before it ("" for none)


def messages(text: str, system: str = "") -> list[dict[str, str]]:
    """The chat messages of one prompt: [system,] user.

    >>> [m["role"] for m in messages("hi", "Be brief.")]
    ['system', 'user']
    """
    head = [{"role": "system", "content": system}] if system.strip() else []
    return head + [{"role": "user", "content": text}]


class WatchSession:
    """One browser session's subscription; `close()` stops its thread and sockets."""

    def __init__(self, endpoints: list[str], base_url: str | None = None,
                 model: str | None = None, replay_timeout: float = 2.0,
                 watcher_factory: Callable[..., Watcher] = Watcher) -> None:
        specs = [parse_endpoint(e) for e in endpoints if e.strip()]
        self.base_url = api_base(base_url) if base_url else None
        self.model = model or None
        self._record = io.BytesIO()
        self.recording_full = False
        self._recorder = Recorder(self._record)
        self.watcher = watcher_factory(specs, replay_timeout=replay_timeout, sink=self._sink)
        self.sent: list[SentPrompt] = []
        self._decoded: dict[tuple[int, ...], str] = {}
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self.error = ""  # the poll thread's failure, if it stopped
        self._thread = threading.Thread(target=self._run, name="radixlens-watch", daemon=True)
        self._thread.start()

    @property
    def closed(self) -> bool:
        return self._stop.is_set()

    def _sink(self, source: str, msg: Any, received: float) -> None:
        if self._record.tell() > MAX_RECORDING_BYTES:
            self.recording_full = True
            return
        self._recorder(source, msg, received)

    def _run(self) -> None:
        try:
            while not self._stop.is_set():
                with self._lock:
                    self.watcher.poll(0.05)
                    self._check_landings()
                time.sleep(0.005)  # let readers take the lock between polls
        except Exception as exc:  # noqa: BLE001 - shown on the page
            self.error = f"{type(exc).__name__}: {exc}"

    def _check_landings(self) -> None:
        for p in self.sent:
            if p.landed_after is not None or not p.token_ids:
                continue
            size = next((s.cache.block_size for s in self.watcher.streams if s.cache.block_size),
                        None)
            if size and len(p.token_ids) >= size and any(
                    s.cache.overlap(p.token_ids) >= len(p.token_ids) // size
                    for s in self.watcher.streams):
                p.landed_after = time.time() - p.sent_at

    def views(self) -> list[WorkerView]:
        now = time.time()
        with self._lock:
            return [WorkerView(
                s.name, s.status(), s.cache.block_size, tuple(s.cache.blocks.values()),
                frozenset(s.cache.unreachable()), tuple(s.cache.runs()),
                tuple(rate_series(s.history, now, RATE_WINDOW_S, RATE_BUCKET_S)))
                for s in self.watcher.streams]

    def overlaps(self, token_ids: list[int]) -> list[int]:
        with self._lock:
            return [s.cache.overlap(token_ids) for s in self.watcher.streams]

    def recording(self) -> bytes:
        with self._lock:
            return self._record.getvalue()

    def recording_size(self) -> int:
        """Bytes of `recording()`, without copying it."""
        with self._lock:
            return self._record.tell()

    # --- the server's HTTP API --------------------------------------------------------------
    def _need_api(self) -> str:
        if not self.base_url:
            raise ValueError("give the server's base URL (and model) to send or tokenize")
        return self.base_url

    def tokenize(self, text: str, system: str = "") -> list[int]:
        """The chat-templated tokens of `text` as one user message, after `system` as the
        system message when given (vLLM's /tokenize): real clients share a system prompt, and
        that shared prefix is what a worker's cache holds."""
        base = self._need_api().removesuffix("/v1")
        body = {"messages": messages(text, system)}
        if self.model:
            body["model"] = self.model
        answer, _ = http_json(base + "/tokenize", body)
        tokens = answer.get("tokens")
        if not isinstance(tokens, list):
            raise ValueError(f"{base}/tokenize answered no token list")
        return tokens

    def decode(self, token_ids: list[int]) -> str | None:
        """Text of `token_ids` from the server's /detokenize (cached); None when unavailable."""
        key = tuple(token_ids)
        if key not in self._decoded and self.base_url:
            try:
                answer, _ = http_json(self.base_url.removesuffix("/v1") + "/detokenize",
                                      {"tokens": list(key), "model": self.model}, timeout=5)
                self._decoded[key] = str(answer.get("prompt", ""))
            except ValueError:
                return None
        return self._decoded.get(key)

    def send(self, text: str, max_tokens: int = 16, system: str = "") -> SentPrompt:
        """Sends `text` as one user message (after `system`, when given) in a thread; the
        prompt's record fills in."""
        base = self._need_api()
        prompt = SentPrompt(text, time.time(), system=system)
        with self._lock:
            self.sent.append(prompt)
        threading.Thread(target=self._send, args=(base, prompt, max_tokens), daemon=True).start()
        return prompt

    def _send(self, base: str, prompt: SentPrompt, max_tokens: int) -> None:
        try:
            prompt.token_ids = self.tokenize(prompt.text, prompt.system)
            body = {"model": self.model, "max_tokens": max_tokens,
                    "messages": messages(prompt.text, prompt.system)}
            answer, headers = http_json(base + "/chat/completions", body, timeout=300)
            use = answer.get("usage") or {}
            prompt.answer = answer["choices"][0]["message"]["content"] or ""
            prompt.prompt_tokens = int(use.get("prompt_tokens", 0))
            prompt.cached_tokens = (use.get("prompt_tokens_details") or {}).get("cached_tokens")
            prompt.replica = headers.get("x-radixlens-replica", "-")
            prompt.state = "done"
        except (ValueError, KeyError, IndexError, TypeError) as exc:
            prompt.state, prompt.error = "error", str(exc)

    def close(self) -> None:
        self._stop.set()
        self._thread.join(timeout=5)
        with self._lock:
            self.watcher.close()


