"""`python -m engine serve --dp 2` on CPU as a subprocess, for the tests that talk to a live server.

Ports are the operating system's choice (0): the server prints its URL and its publishers'
endpoints before "ready", and the tests read them from those lines. Used by
tests/engine/test_engine_serve.py and tests/browser/test_watch_browser.py.
"""

from __future__ import annotations

import queue
import subprocess
import sys
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest
from machine import seconds

ROOT = Path(__file__).resolve().parent.parent
SERVE = [sys.executable, "-m", "engine", "serve", "--port", "0", "--dp", "2", "--device", "cpu",
         "--capacity", "4096", "--kv-events-endpoint", "tcp://*:0",
         "--kv-replay-endpoint", "tcp://*:0"]


@contextmanager
def engine_serve(timeout: float | None = None, argv: list[str] | None = None,
                 env: dict[str, str] | None = None,
                 extra: tuple[str, ...] = ()) -> Iterator[list[str]]:
    """The server's lines up to "ready" (the first names its URL); the server stops on exit.
    Each line may take `timeout` s (180 s on an idle machine, scaled: loading the model).
    `argv`: the command (default SERVE); `env`: its environment (default this process's);
    `extra`: more arguments (a later --dp or --router wins over SERVE's)."""
    timeout = timeout or seconds(180)
    proc = subprocess.Popen([*(argv or SERVE), *extra], cwd=ROOT, stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True, env=env)
    lines: queue.Queue = queue.Queue()
    threading.Thread(target=lambda: [lines.put(x) for x in proc.stdout], daemon=True).start()
    seen: list[str] = []
    try:
        while not seen or seen[-1].strip() != "ready":
            try:
                seen.append(lines.get(timeout=timeout))
            except queue.Empty:
                pytest.fail("engine serve did not start:\n" + "".join(seen))
            assert proc.poll() is None, "".join(seen)
        yield seen
    finally:
        proc.terminate()
        proc.wait(timeout=seconds(30))


@contextmanager
def sim_serve(dp: int = 2, router: str = "round-robin", **kw) -> Iterator[tuple[str, object]]:
    """engine/server.py's app over a Cluster of simulated replicas (no model: the real
    scheduler, trees and block caches; every reply is REPLY's characters), served in a thread
    by the guarded uvicorn server (engine/connections.py) on a free port of 127.0.0.1; yields
    (base URL without /v1, the uvicorn Server, whose `config.app` is the app). Keywords go to
    ClusterConfig (`kv_endpoint` defaults to none), Server (`max_context`, `tokenizer`),
    build_app (`max_body_bytes`, `body_idle_s`) and uvicorn (`max_connections`,
    `header_timeout_s`, `backlog`)."""
    import socket
    import time
    from functools import partial

    from engine.backends import simulated
    from engine.cluster import Cluster, ClusterConfig
    from engine.connections import GuardedServer, guarded_config
    from engine.server import Server, build_app
    from engine.service import EngineService
    from scenarios.classroom import SimLoaded

    pick = lambda *names: {n: kw.pop(n) for n in names if n in kw}  # noqa: E731
    server_kw, app_kw = pick("max_context"), pick("max_body_bytes", "body_idle_s")
    conn_kw, tokenizer = pick("max_connections", "header_timeout_s"), kw.pop("tokenizer", None)
    conn_kw.update(pick("backlog"))
    kw = {"kv_endpoint": None, "kv_replay_endpoint": None, "capacity_tokens": 4096, **kw}
    loaded = SimLoaded(tokenizer) if tokenizer is not None else SimLoaded()
    cluster = Cluster(loaded, ClusterConfig(dp=dp, router=router, **kw),
                      partial(EngineService, backend=simulated()))
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    sock.listen(1024)
    app = build_app(Server(cluster, "sim", **server_kw), **app_kw)
    uv = GuardedServer(guarded_config(app, **conn_kw))
    thread = threading.Thread(target=uv.run, kwargs={"sockets": [sock]}, daemon=True)
    thread.start()
    try:
        deadline = time.monotonic() + seconds(30)
        while not uv.started and thread.is_alive() and time.monotonic() < deadline:
            time.sleep(0.01)
        assert uv.started, "uvicorn did not start"
        uv.cluster = cluster
        yield f"http://127.0.0.1:{sock.getsockname()[1]}", uv
    finally:
        uv.should_exit = True
        thread.join(timeout=seconds(10))
        cluster.close()
        sock.close()
