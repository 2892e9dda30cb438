"""`python -m engine serve`: the model behind an OpenAI-compatible API, publishing KV events.

Loads the model once, starts `--dp N` replicas (engine/cluster.py) and serves the FastAPI app
(engine/server.py) with uvicorn. Prints one line per address it serves (the HTTP base URL, each
rank's PUB and replay endpoints; port 0 anywhere takes a free port), then "ready". Watch it with
`python -m radix watch tcp://127.0.0.1:5557,tcp://127.0.0.1:5567 --dp N`. The PUB endpoint is
bound as named (tcp://127.0.0.1:5557 too; `--kv-events-connect` restores vLLM's rule, which
connects to a concrete host). Block hashes are vLLM's sha256 over pickle by default (`--hash`),
seeded as vLLM seeds NONE_HASH: PYTHONHASHSEED when the environment sets it, else its fixed seed.
"""

from __future__ import annotations

import argparse
import os
import socket

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
    p.add_argument("--kv-events-endpoint", default="tcp://*:5557",
                   help="PUB endpoint of rank 0 (rank r: port + r); 'off' publishes nothing")
    p.add_argument("--kv-replay-endpoint", default="tcp://*:5567",
                   help="replay ROUTER of rank 0 (rank r: port + r); 'off' for none")
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
    add_host_options(p)


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


def cmd_serve(args: argparse.Namespace) -> int:
    import uvicorn

    from engine.cluster import Cluster, ClusterConfig
    from engine.kv_pool import KVPool, parse_capacity
    from engine.model import load_model
    from engine.server import Server, build_app
    from radix.watch.wire import connectable

    off = ("off", "none", "")
    config = ClusterConfig(
        dp=args.dp, router=args.router, block_size=args.block_size,
        kv_endpoint=None if args.kv_events_endpoint in off else args.kv_events_endpoint,
        kv_replay_endpoint=None if args.kv_replay_endpoint in off else args.kv_replay_endpoint,
        buffer_steps=args.buffer_steps, topic=args.topic, kv_bind=not args.kv_events_connect,
        hash_algo=args.hash, hash_seed=hash_seed(), host_ratio=args.host_ratio,
        write_policy=args.write_policy)
    sock = _listen(args.host, args.port)
    loaded = load_model(args.model, args.random_init, args.device)
    per_token = KVPool.bytes_per_token_of(loaded.model.config, loaded.dtype)
    config = ClusterConfig(**{**config.__dict__,
                              "capacity_tokens": parse_capacity(args.capacity, per_token)})
    cluster = Cluster(loaded, config)
    try:
        server = Server(cluster, args.served_model_name or loaded.name, args.max_tokens_default)
        host, port = sock.getsockname()[:2]
        print(f"engine serve: http://{host}:{port}/v1 ({server.model_name} on "
              f"{loaded.device.type}, dp={config.dp}, router={config.router}, "
              f"{config.capacity_tokens:,} KV tokens per replica"
              + ("" if config.host_ratio is None else
                 f", host tier {config.host_ratio:g}x {config.write_policy}") + ")", flush=True)
        for info in cluster.publisher_info():
            if info["endpoint"]:
                replay = info["replay_endpoint"]
                print(f"kv events rank {info['rank']}: {connectable(info['endpoint'])}"
                      + (f",{connectable(replay)}" if replay else ""), flush=True)
        seed = "" if config.hash_algo == "radixlens" else (
            f", NONE_HASH seed {config.hash_seed!r}"
            f"{' from PYTHONHASHSEED' if 'PYTHONHASHSEED' in os.environ else ''}")
        print(f"block hashes: {config.hash_algo}{seed}", flush=True)
        print("ready", flush=True)
        uv = uvicorn.Server(uvicorn.Config(build_app(server), log_level="warning",
                                           timeout_graceful_shutdown=2))
        uv.run(sockets=[sock])
    finally:
        cluster.close()
        sock.close()
    return 0
