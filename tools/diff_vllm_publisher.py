"""vLLM 0.33's own ZmqEventPublisher, fed by its own BlockPool, watched by radix/watch (not a test).

Loads vllm/distributed/kv_events.py (the real msgspec structs and publisher), block_pool.py,
kv_cache_utils.py, single_type_kv_cache_manager.py and utils/hashing.py from an unpacked vLLM
wheel (through tools/diff_vllm.py's loader), and runs two data-parallel ranks: each a
FullAttentionManager + BlockPool driven by random requests (shared prefixes, small pools that
evict, chunked prefill, decode, finish, an occasional reset_prefix_cache), its events taken
after every step and published as vLLM's scheduler does (one KVEventBatch per non-empty
step) by a ZmqEventPublisher of that rank (ports offset by the rank, replay buffer on). Our
`Watcher` subscribes from the start, a second one joins half-way (replay catch-up); at the end
both must hold exactly vLLM's cached blocks: the hash set (low 64 bits, as the events carry
them), copies per hash, parents, and token ids that hash (vLLM's sha256 over pickle, chained
from the parent's digest) to the pool's own digest.

    python tools/diff_vllm_publisher.py /tmp/vllm/ex --seeds 20
"""

from __future__ import annotations

import logging
import random
import socket
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from diff_vllm import VReq, VSide, load_vllm  # noqa: E402
from wheels import run_seeds, wheel_args, wheel_parser  # noqa: E402

from radix.watch.subscriber import Watcher, expand_dp, parse_endpoint  # noqa: E402

LOW64 = (1 << 64) - 1
STATS = dict.fromkeys(["batches", "blocks", "checked", "replayed"], 0)  # over all seeds


def free_ports(n: int) -> int:
    """A base port with `n` consecutive free ports (ranks add their rank to it)."""
    for _ in range(200):
        base = random.randrange(20_000, 60_000)
        socks = []
        try:
            for p in range(base, base + n):
                s = socket.socket()
                socks.append(s)
                s.bind(("0.0.0.0", p))
            return base
        except OSError:
            continue
        finally:
            for s in socks:
                s.close()
    raise RuntimeError("no run of free ports")


class Rank:
    """One data-parallel rank: vLLM's manager + pool, its requests, its publisher."""

    def __init__(self, v, rank: int, seed: int, pub_base: int, replay_base: int) -> None:
        self.rng = random.Random(seed * 10 + rank)
        self.bs = self.rng.choice((16, 4))
        self.side = VSide(v, self.rng.randrange(6, 30) * 16 // self.bs, self.bs, True)
        self.prefixes = [[self.rng.randrange(4) for _ in range(self.rng.randrange(70))]
                         for _ in range(3)]
        self.publisher = v.events.ZmqEventPublisher(
            rank, f"tcp://*:{pub_base}", f"tcp://*:{replay_base}", buffer_steps=10_000)
        self.batch_cls, self.live, self.n, self.published = v.events.KVEventBatch, {}, 0, 0

    def step(self) -> None:
        """One scheduler step: start, continue or finish a request; then publish its events."""
        rng, side = self.rng, self.side
        op = rng.choice(["start", "start", "step", "step", "step", "finish", "reset"])
        if op == "start" or not self.live:
            self.n += 1
            toks = rng.choice(self.prefixes) + [rng.randrange(4)
                                                for _ in range(rng.randrange(1, 40))]
            req = VReq(side.hasher, f"r{self.n}", toks, None, None)
            blocks, hit = side.lookup(req)
            chunk = rng.randrange(1, req.num_tokens - hit + 1)
            if side.allocate(req, chunk, blocks, hit) is not None:
                self.live[req.request_id] = req
        elif op == "step":
            req = self.live[rng.choice(sorted(self.live))]
            done = side.computed[req.request_id]
            if done >= req.num_tokens:
                req.append(rng.randrange(4))
            chunk = max(1, rng.randrange(1, max(2, req.num_tokens - done + 1)))
            if side.allocate(req, min(chunk, max(req.num_tokens - done, 1))) is None:
                side.free(req.request_id)  # preempted
                del self.live[req.request_id]
        elif op == "finish":
            side.free(self.live.pop(rng.choice(sorted(self.live))).request_id)
        elif op == "reset" and rng.random() < 0.1:
            side.pool.reset_prefix_cache()
        events = side.pool.take_events()
        if events:  # Scheduler.update_from_output publishes only non-empty steps
            self.publisher.publish(self.batch_cls(ts=time.time(), events=events))
            self.published += 1

    def truth(self, v) -> dict[int, tuple[int, bytes]]:
        """low 64 bits -> (copies, full digest) of every hash the pool caches."""
        out: dict[int, tuple[int, bytes]] = {}
        for key, entry in self.side.pool.cached_block_hash_to_block._cache.items():
            digest = v.utils.get_block_hash(key)
            copies = len(entry) if isinstance(entry, dict) else 1
            out[int.from_bytes(digest, "big") & LOW64] = (copies, digest)
        return out


def compare(v, watcher: Watcher, ranks: list[Rank]) -> tuple[list[str], int]:
    """(problems, blocks whose token ids were checked by hashing them)."""
    problems, checked = [], 0
    for stream, rank in zip(watcher.streams, ranks):
        truth, cache = rank.truth(v), stream.cache
        if not stream.status().exact:
            problems.append(f"{stream.name}: {stream.status().view_state()}")
        if {h: c for h, (c, _) in truth.items()} != cache.copies:
            problems.append(f"{stream.name}: {len(cache.copies)} hashes watched, "
                            f"{len(truth)} in vLLM's pool")
            continue
        for h, block in cache.blocks.items():
            parent = None if block.parent_block_hash is None else truth.get(
                block.parent_block_hash, (0, None))[1]
            if block.parent_block_hash is not None and parent is None:
                continue  # the parent is no longer cached: its digest is unknown here
            digest = v.utils.hash_block_tokens(v.hashing.sha256, parent, block.token_ids, None)
            checked += 1
            if digest != truth[h][1]:
                problems.append(f"{stream.name}: block {h:016x}: token ids do not hash to it")
    return problems, checked


def settle(watchers: list[Watcher], ranks: list[Rank], timeout: float = 20.0) -> None:
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        for w in watchers:
            w.poll(0.02)
        if all(s.expected == r.published for w in watchers for s, r in zip(w.streams, ranks)):
            return


def run(v, seed: int, steps: int) -> int:
    """Runs one seed, adds its counts to STATS, asserts both watchers hold vLLM's blocks."""
    pub_base, replay_base = free_ports(2), free_ports(2)
    ranks = [Rank(v, r, seed, pub_base, replay_base) for r in range(2)]
    spec = [parse_endpoint(f"tcp://127.0.0.1:{pub_base},tcp://127.0.0.1:{replay_base}")]
    early = Watcher(expand_dp(spec, 2), replay_timeout=5)
    late = None
    try:
        early.poll(0.2)
        for i in range(steps):
            for rank in ranks:
                rank.step()
            early.poll(0)
            if i == steps // 2:
                late = Watcher(expand_dp(spec, 2), replay_timeout=5)
                late.poll(0.05)
        watchers = [early] + ([late] if late else [])
        settle(watchers, ranks)
        results = [compare(v, w, ranks) for w in watchers]
        STATS["batches"] += sum(r.published for r in ranks)
        STATS["blocks"] += sum(len(r.truth(v)) for r in ranks)
        STATS["checked"] += sum(c for _, c in results)
        STATS["replayed"] += sum(s.counts["replayed"] for s in late.streams) if late else 0
        problems = [p for found, _ in results for p in found]
        assert not problems, f"seed {seed}:\n  " + "\n  ".join(problems[:5])
        return 1
    finally:
        for w in (early, late):
            if w is not None:
                w.close()
        for r in ranks:
            r.publisher.shutdown()


def main() -> int:
    ap = wheel_parser(__doc__, "vllm", seeds=20)
    ap.add_argument("--steps", type=int, default=150, help="scheduler steps per rank and seed")
    args = wheel_args(ap, "vllm/distributed/kv_events.py")
    v = load_vllm(args.root)
    logging.disable(logging.WARNING)
    _, failures = run_seeds(lambda seed: run(v, seed, args.steps),
                            ((seed,) for seed in range(args.seeds)))
    print(f"{args.seeds} seeds x 2 ranks x 2 watchers: {STATS['batches']:,} batches published by "
          f"vLLM's ZmqEventPublisher ({STATS['replayed']:,} caught up by replay), "
          f"{STATS['blocks']:,} cached blocks in vLLM's pools at the ends, {STATS['checked']:,} "
          f"watched blocks' token ids re-hashed, {failures} mismatching seeds")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
