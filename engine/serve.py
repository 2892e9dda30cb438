"""`python -m engine serve`: the model behind an OpenAI-compatible API, publishing KV events.

Loads the model once, starts `--dp N` replicas (engine/cluster.py) and serves the FastAPI app
(engine/server.py) with uvicorn, its connections capped and timed (engine/connections.py). Prints
one line per address it serves, as bound (the HTTP base URL, each rank's PUB and replay
endpoints; port 0 anywhere takes a free port), then "ready". The KV endpoints listen where HTTP
does (--host) unless named: watch with `python -m radix watch
tcp://127.0.0.1:5557,tcp://127.0.0.1:5567 --dp N`. The PUB endpoint is bound as named
(`--kv-events-connect` restores vLLM's rule, which connects to a concrete host). Block hashes
are vLLM's sha256 over pickle by default (`--hash`), seeded as vLLM seeds NONE_HASH:
PYTHONHASHSEED when the environment sets it, else its fixed seed.
"""

from __future__ import annotations

import argparse
import logging
import os
import socket
from typing import Any

from radix.blocks.hashing import HASH_ALGOS, VLLM_NONE_HASH_SEED
from radix.cli.hosttier import positive_ratio
from radix.cluster import ROUTERS as SHARED_ROUTERS
from radix.hosttier.capacity import WRITE_POLICIES

# engine/cluster.py's routers (the shared ones and its old names), named here so that
# `serve --help` needs no torch (engine.cluster imports it); tests/engine/test_engine_cli.py checks
# that the two agree
ROUTERS = SHARED_ROUTERS + ("prefix", "round_robin")


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("serve", help="an OpenAI-compatible server that publishes KV events")
    src = p.add_mutually_exclusive_group()
    src.add_argument("--model", help="a local Hugging Face causal-LM folder (default SmolLM2)")
    src.add_argument("--random-init", metavar="CONFIG", help="random weights, shape from JSON")
    p.add_argument("--device", default="auto", help="auto (CUDA+bf16 if present), cpu, cuda")
    p.add_argument("--host", default="127.0.0.1", help="HTTP address (default 127.0.0.1)")
    p.add_argument("--port", type=int, default=8000, help="HTTP port; 0 takes a free one")
    p.add_argument("--dp", type=int, default=1, help="engine replicas (data parallel ranks)")
    p.add_argument("--router", default="kv-overlap", choices=ROUTERS,
                   help="radix.cluster's routers (prefix, round_robin: old names of "
                        "kv-overlap, round-robin)")
    p.add_argument("--capacity", default="16384", help="KV pool per replica: tokens or size")
    p.add_argument("--block-size", type=int, default=16, help="vLLM block size (events)")
    p.add_argument("--kv-events-endpoint", default=None,
                   help="PUB endpoint of rank 0 (rank r: port + r); default tcp://HOST:5557, "
                        "HOST the HTTP address; 'off' publishes nothing")
    p.add_argument("--kv-replay-endpoint", default=None,
                   help="replay ROUTER of rank 0 (rank r: port + r); default tcp://HOST:5567; "
                        "'off' for none")
    p.add_argument("--kv-events-connect", action="store_true",
                   help="vLLM's rule for the PUB endpoint: connect to a concrete host (a proxy "
                        "binds there), bind only *, :: and ipc://; default: bind as named")
    p.add_argument("--hash", default="vllm-sha256", choices=HASH_ALGOS,
                   help="block hashes the KV events carry: vllm-sha256 (default, vLLM's "
                        "default), vllm-sha256-cbor, or radixlens (our own, not vLLM's); vLLM "
                        "modes seed NONE_HASH with PYTHONHASHSEED if set, as vLLM does")
    p.add_argument("--buffer-steps", type=int, default=10_000, help="batches kept for replay")
    p.add_argument("--topic", default="", help="topic of the KV-event messages")
    p.add_argument("--served-model-name", default=None, help="the model's name in the API")
    p.add_argument("--max-tokens-default", type=int, default=256,
                   help="max_tokens of a chat request that sets none")
    p.add_argument("--max-model-len", type=_positive(int), default=None,
                   help="the context length served (default: the model's)")
    p.add_argument("--max-body-mb", type=_positive(float), default=16.0,
                   help="the largest request body, MiB (default 16; larger: 413)")
    p.add_argument("--max-connections", type=_positive(int), default=None,
                   help="open HTTP connections at most (default 1,024, fewer under a low "
                        "ulimit -n); past it the oldest idle one is closed")
    p.add_argument("--header-timeout", type=_positive(float), default=10.0,
                   help="seconds a client has to send a request's head (slow clients closed)")
    p.add_argument("--revive-after", type=float, default=5.0,
                   help="seconds until a replica whose loop died is replaced (< 0: never)")
    add_host_options(p)


def _positive(kind: type) -> Any:
    def parse(text: str) -> Any:
        try:
            value = kind(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected a number, got {text!r}") from None
        if not value > 0:
            raise argparse.ArgumentTypeError(f"must be > 0, got {text!r}")
        return value
    return parse


def add_host_options(p: argparse.ArgumentParser) -> None:
    """`--host-ratio R` and `--write-policy`, named as `python -m radix simulate` names them
    (one ratio here: the engine runs one host pool)."""
    p.add_argument("--host-ratio", type=positive_ratio, default=None, metavar="R",
                   help="add SGLang's host tier (HiCache): a CPU host pool of R x the device "
                        "pool's tokens; requests then run one at a time (engine/hosttier.py)")
    p.add_argument("--write-policy", choices=WRITE_POLICIES, default="write_through",
                   help="the host tier's write policy (--hicache-write-policy)")


def _listen(host: str, port: int) -> socket.socket:
    sock = socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind((host, port))
    except OSError as exc:
        sock.close()
        raise ValueError(f"--port: cannot listen on {host}:{port} ({exc.strerror})") from None
    sock.listen(128)
    return sock


def hash_seed() -> str:
    """vLLM's NONE_HASH seed for sha256 modes (kv_cache_utils.resolve_none_hash_seed):
    PYTHONHASHSEED when set, else the fixed "vllm-none-hash"."""
    return os.environ.get("PYTHONHASHSEED", VLLM_NONE_HASH_SEED)


def kv_endpoints(args: argparse.Namespace, http_host: str) -> tuple[str | None, str | None]:
    """The PUB and replay endpoints of rank 0: as named, 'off' as None, unnamed where HTTP
    listens (a KV event carries token ids: a prompt's text can be read back from them).

    >>> a = argparse.Namespace(kv_events_endpoint=None, kv_replay_endpoint="off")
    >>> kv_endpoints(a, "127.0.0.1"), kv_endpoints(a, "0.0.0.0")[0], kv_endpoints(a, "::1")[0]
    (('tcp://127.0.0.1:5557', None), 'tcp://*:5557', 'tcp://[::1]:5557')
    """
    host = "*" if http_host in ("0.0.0.0", "::", "") else (
        f"[{http_host}]" if ":" in http_host else http_host)

    def pick(named: str | None, port: int) -> str | None:
        if named is None:
            return f"tcp://{host}:{port}"
        return None if named.lower() in ("off", "none", "") else named
    return pick(args.kv_events_endpoint, 5557), pick(args.kv_replay_endpoint, 5567)


def startup_lines(cluster: Any, model_name: str, device: str, url: str) -> list[str]:
    """What serve prints before "ready": the URL and setup, then each rank's endpoints as
    bound (a wildcard as *, reached at any of this host's addresses), then the hashing."""
    config = cluster.config
    lines = [f"engine serve: {url} ({model_name} on {device}, dp={config.dp}, router="
             f"{config.router}, {config.capacity_tokens:,} KV tokens per replica"
             + ("" if config.host_ratio is None else
                f", host tier {config.host_ratio:g}x {config.write_policy}") + ")"]
    for info in cluster.publisher_info():
        if info["endpoint"]:
            replay = info["replay_endpoint"]
            lines.append(f"kv events rank {info['rank']}: {info['endpoint']}"
                         + (f",{replay}" if replay else ""))
    seed = "" if config.hash_algo == "radixlens" else (
        f", NONE_HASH seed {config.hash_seed!r}"
        f"{' from PYTHONHASHSEED' if 'PYTHONHASHSEED' in os.environ else ''}")
    return [*lines, f"block hashes: {config.hash_algo}{seed}"]


def cmd_serve(args: argparse.Namespace) -> int:
    from engine.cluster import Cluster, ClusterConfig
    from engine.connections import GuardedServer, guarded_config
    from engine.kv_pool import KVPool, parse_capacity
    from engine.model import load_model
    from engine.server import Server, build_app

    sock = _listen(args.host, args.port)
    host, port = sock.getsockname()[:2]
    pub, replay = kv_endpoints(args, host)
    try:
        config = ClusterConfig(
            dp=args.dp, router=args.router, block_size=args.block_size, kv_endpoint=pub,
            kv_replay_endpoint=replay, buffer_steps=args.buffer_steps, topic=args.topic,
            kv_bind=not args.kv_events_connect, hash_algo=args.hash, hash_seed=hash_seed(),
            host_ratio=args.host_ratio, write_policy=args.write_policy,
            revive_after_s=None if args.revive_after < 0 else args.revive_after)
        _log_to_stderr()
        loaded = load_model(args.model, args.random_init, args.device)
    except BaseException:
        sock.close()
        raise
    per_token = KVPool.bytes_per_token_of(loaded.model.config, loaded.dtype)
    config = ClusterConfig(**{**config.__dict__,
                              "capacity_tokens": parse_capacity(args.capacity, per_token)})
    cluster = Cluster(loaded, config)
    try:
        server = Server(cluster, args.served_model_name or loaded.name, args.max_tokens_default,
                        args.max_model_len)
        url = f"http://{f'[{host}]' if ':' in host else host}:{port}/v1"
        for line in startup_lines(cluster, server.model_name, loaded.device.type, url):
            print(line, flush=True)
        print("ready", flush=True)
        app = build_app(server, max_body_bytes=int(args.max_body_mb * 2**20))
        GuardedServer(guarded_config(app, args.max_connections, args.header_timeout,
                                     timeout_graceful_shutdown=2)).run(sockets=[sock])
    finally:
        cluster.close()
        sock.close()
    return 0


def _log_to_stderr() -> None:
    """engine's log lines (a request that failed, a replica down, a refused connection) on
    stderr, one line each."""
    logger = logging.getLogger("engine")
    if not logger.handlers:
        handler = logging.StreamHandler()
        handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
        logger.addHandler(handler)
        logger.setLevel(logging.INFO)
