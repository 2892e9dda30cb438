"""Differential check of radix/blocks' hybrid cache against vLLM 0.33's own code (not a test).

Drives vLLM's KVCacheManager over its hybrid coordinator and single-type managers (full
attention, sliding window, Mamba), and the scheduler's Mamba chunk split, on CPU (loaded by
tools/vllm_hybrid.py), beside ours (radix/blocks/kv_cache_manager.py), on randomized request
lifecycles for each configuration (a preset's vLLM layout under some options): shared prefixes,
exact replays and extensions, admission with the full-sequence check in small pools (eviction),
chunked prefill cut by the split, decode, finish, preemption, prefix-cache resets, LoRA and
cache_salt, copy-on-write copies released after each step. After every op it compares: the hit
per group (each alone) and agreed, num_uncached_common_prefix_tokens, the junction, the split,
the blocks handed out per group, every block table, ref counts, the free queue, the hash map
and each block's keys, the Mamba manager's state, and the KV events (as chains; odd seeds hash
as vLLM does and each step's events must encode to the same EventBatch bytes). First it checks
each configuration's layout (state shapes, page bytes, groups) against vLLM's code.

    python tools/diff_vllm_hybrid.py /tmp/vllm/ex --requests 2000
    python tools/diff_vllm_hybrid.py /tmp/vllm/ex --break-rule no-junction --requests 300
"""

from __future__ import annotations

import argparse
import logging
import random
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from diff_vllm_hybrid_rules import BREAK_RULES, break_rule  # noqa: E402
from vllm_hybrid import VReq, VSide, check_layouts, load_vllm_hybrid  # noqa: E402

from radix.blocks.hashing import BlockHasher  # noqa: E402
from radix.blocks.kv_events import EventBatch, encode_batch  # noqa: E402
from radix.models import VllmOptions, load_preset, vllm_layout  # noqa: E402
from radix.request import Req  # noqa: E402

THREE_KINDS = Path(__file__).resolve().parent / "data" / "three_kinds_config.json"
CONFIGS = {  # name -> (preset or config.json, options)
    "qwen3.5-4b/align/flashinfer-576": ("qwen3.5-4b", VllmOptions()),
    "qwen3.5-4b/align/triton-528": ("qwen3.5-4b", VllmOptions(gdn_prefill_backend="triton")),
    "qwen3.5-4b/align/flashinfer-576/prefix_match_unit-64": (
        "qwen3.5-4b", VllmOptions(prefix_match_unit=64)),
    "qwen3.5-4b/align/triton-528/retention-dense": (
        "qwen3.5-4b", VllmOptions(gdn_prefill_backend="triton",
                                  prefix_cache_retention_interval=None)),
    "qwen3.5-4b/none": ("qwen3.5-4b", VllmOptions(mamba_cache_mode="none")),
    "qwen3-next-80b-a3b/align/flashinfer-576": ("qwen3-next-80b-a3b", VllmOptions()),
    "qwen3-next-80b-a3b/align/triton-544": ("qwen3-next-80b-a3b",
                                            VllmOptions(gdn_prefill_backend="triton")),
    "gpt-oss-20b/block-16": ("gpt-oss-20b", VllmOptions()),
    "gpt-oss-20b/block-16/retention-dense": (
        "gpt-oss-20b", VllmOptions(prefix_cache_retention_interval=None)),
    "gemma-3-27b/block-16": ("gemma-3-27b", VllmOptions()),
    "nemotron-h-8b/align-1040": ("nemotron-h-8b", VllmOptions()),
    "nemotron-h-8b/none": ("nemotron-h-8b", VllmOptions(mamba_cache_mode="none")),
    "llama-3-8b/block-16": ("llama-3-8b", VllmOptions()),
    "three-kinds/align/triton": (str(THREE_KINDS), VllmOptions(gdn_prefill_backend="triton")),
}
STATS = {"byte_batches": 0, "ops": 0}
COVERAGE = ("hits", "junctions", "partial_hits", "groups_disagree", "evictions", "no_room",
            "preemptions", "cow_copies", "resets", "multi_key_blocks")


class Mismatch(AssertionError):
    pass


class Pair:
    """vLLM's side and ours on one layout and pool, fed the same lifecycle."""

    def __init__(self, v, preset, layout, seed: int) -> None:
        self.rng = rng = random.Random(seed)
        self.layout, self.seed = layout, seed
        bs = layout.block_size
        window = preset.sliding_window or 0
        self.scale = max(4 * bs, window + 4 * bs, 64)
        self.budget = rng.choice([self.scale // 2 + 1, self.scale, 8192])
        one = sum(-(-(3 * self.scale) // g.kv_cache_spec.block_size) + 2 for g in layout.groups)
        self.num_blocks = int(one * rng.uniform(1.0, 3.0)) + 2
        self.vs = VSide(v, layout, preset, self.num_blocks, self.budget)
        self.hash_algo = "vllm-sha256" if seed % 2 else "radixlens"
        hasher = BlockHasher(self.hash_algo, lora_paths={"lora-a": "/loras/lora-a"})
        self.m = layout.manager(self.num_blocks, max_in_flight_tokens=self.budget,
                                enable_kv_cache_events=True, hash_algo=hasher,
                                lora_ids={"lora-a": 1})
        self.prefixes = [self.tokens(rng.randrange(0, 2 * self.scale)) for _ in range(3)]
        self.prompts: list[list[int]] = []
        self.live: dict[str, tuple[VReq, Req]] = {}
        self.waiting: list[tuple[VReq, Req]] = []
        self.o2t: dict[bytes | int, bytes | int] = {}  # our hash (and its int64) -> vLLM's
        self.num_requests = 0
        self.memo: dict[bool, dict] = {True: {}, False: {}}  # key -> translated (per side)
        self.seen = dict.fromkeys(COVERAGE, 0)  # what the run exercised
        self.label = (f"seed {seed} ({self.num_blocks} blocks, budget {self.budget}, "
                      f"{self.hash_algo})")

    def tokens(self, n: int) -> list[int]:
        return [self.rng.randrange(50) for _ in range(n)]

    # --- requests ----------------------------------------------------------------------------
    def new_request(self) -> tuple[VReq, Req]:
        rng = self.rng
        roll = rng.random()
        if self.prompts and roll < 0.3:
            toks = list(rng.choice(self.prompts[-8:]))  # an exact replay of a recent prompt
        elif self.prompts and roll < 0.45:
            toks = rng.choice(self.prompts) + self.tokens(rng.randrange(1, self.scale))
        else:
            toks = rng.choice(self.prefixes) + self.tokens(rng.randrange(1, self.scale))
        self.prompts.append(toks)
        lora = "lora-a" if rng.random() < 0.15 else None
        salt = "s" if rng.random() < 0.1 else None
        rid = f"r{self.num_requests}"
        self.num_requests += 1
        return VReq(self.vs.hasher, rid, toks, lora, salt), Req(rid, toks, extra_key=lora,
                                                                  cache_salt=salt)

    def learn(self, vr: VReq, ours: Req) -> None:
        """Pairs each of our hashes (and int64) with vLLM's at the same position."""
        state = self.m.request(ours)
        for o, t in zip(state.block_hashes, vr.block_hashes, strict=True):
            for a, b in ((o, bytes(t)), (int.from_bytes(o[-8:], "big"),
                                         int.from_bytes(t, "big") & ((1 << 64) - 1))):
                if self.o2t.setdefault(a, b) != b:
                    raise Mismatch("one of our hashes stands for two vLLM chains")
            if self.hash_algo == "vllm-sha256" and o != bytes(t):
                raise Mismatch("vLLM-mode hashes differ")

    def admit(self, where: str) -> None:
        if self.waiting and self.rng.random() < 0.5:
            vr, ours = self.waiting.pop(0)
        else:
            vr, ours = self.new_request()
        blocks, hit, spb = self.vs.lookup(vr)
        mine = self.m.get_computed_blocks(ours)
        self.learn(vr, ours)
        per_group = self.vs.per_group_hits(vr)
        self.same((hit, spb, self.ids(blocks.blocks), per_group),
                  (mine.num_computed_tokens, mine.shared_prefix_boundary,
                   self.ids(mine.blocks), self.m.lookups[-1].group_hits), where, "lookup")
        self.seen["hits"] += hit > 0
        self.seen["junctions"] += spb > 0
        self.seen["partial_hits"] += hit % self.layout.block_size != 0
        self.seen["groups_disagree"] += len(set(per_group)) > 1
        remaining = vr.num_tokens - hit
        chunk = min(remaining, self.rng.randrange(1, self.budget + 1))
        n = self.vs.split(vr, chunk, hit)
        self.same(n, self.m.mamba_block_aligned_split(ours, chunk, hit, self.budget),
                  where, "split")
        if n == 0 and hit == 0:
            self.waiting.append((vr, ours))
            return
        a = self.vs.allocate(vr, n, blocks, hit, must_fit=True)
        b = self.m.allocate_slots(ours, n, mine, full_sequence_must_fit=True)
        self.same(self.ids(a), self.ids(b), where, "allocated blocks")
        if a is None:
            self.seen["no_room"] += 1
            self.waiting.append((vr, ours))
        else:
            self.live[vr.request_id] = (vr, ours)

    def advance(self, where: str) -> None:
        vr, ours = self.live[self.rng.choice(sorted(self.live))]
        if vr.num_computed_tokens < vr.num_tokens:  # prefill continues
            chunk = self.rng.randrange(1, vr.num_tokens - vr.num_computed_tokens + 1)
            n = self.vs.split(vr, min(chunk, self.budget), 0)
            self.same(n, self.m.mamba_block_aligned_split(ours, min(chunk, self.budget), 0,
                                                          self.budget), where, "split")
            if n == 0:
                return
        else:  # decode one token
            n, tok = 1, self.rng.randrange(50)
            vr.append(tok)
            ours.output_ids.append(tok)
        a, b = self.vs.allocate(vr, n), self.m.allocate_slots(ours, n)
        self.learn(vr, ours)
        self.same(self.ids(a), self.ids(b), where, "allocated blocks")
        if a is None:  # preempted: freed, back to waiting, recomputed from a lookup
            self.seen["preemptions"] += 1
            self.finish(vr.request_id)
            vr.num_computed_tokens, vr.num_preemptions = 0, vr.num_preemptions + 1
            self.waiting.append((vr, ours))

    def finish(self, rid: str) -> None:
        vr, ours = self.live.pop(rid)
        self.vs.free(vr)
        self.m.free(ours)

    # --- comparing ---------------------------------------------------------------------------
    @staticmethod
    def ids(groups) -> tuple | None:
        if groups is None:
            return None
        return tuple(tuple(b.block_id for b in g) for g in groups)

    def same(self, theirs, ours, where: str, what: str) -> None:
        if theirs != ours:
            raise Mismatch(f"{where}: {what} differ\n  vLLM {theirs}\n  ours {ours}")

    def key(self, key: bytes | None, ours: bool):
        if key is None:
            return None
        memo = self.memo[ours]
        out = memo.get(key)
        if out is None:
            h, gid = bytes(key[:-4]), int.from_bytes(key[-4:], "big")
            out = memo[key] = (self.o2t.get(h, ("unknown", h)) if ours else h), gid
        return out

    def state(self, pool, managers, ours: bool) -> tuple:
        def k(key):
            return self.key(key, ours)

        blocks = tuple((b.ref_cnt, k(b.block_hash),
                        b.block_hash_num_tokens if b.block_hash is not None else None)
                       for b in pool.blocks)
        queue = tuple(b.block_id for b in (pool.free_block_queue if ours else
                                           pool.free_block_queue.get_all_free_blocks()))
        table = pool.cached_block_hash_to_block if ours else pool.cached_block_hash_to_block._cache
        cached = {k(h): [e.block_id] if hasattr(e, "block_id") else list(e)  # first cached first
                  for h, e in table.items()}
        extra = {bid: sorted(map(k, keys))
                 for bid, keys in pool.cached_block_hashes_by_block.items() if keys}
        mgrs = []
        for m in managers:
            mgrs.append((
                {rid: tuple(b.block_id for b in bl) for rid, bl in m.req_to_blocks.items() if bl},
                dict(m.num_cached_block),
                {rid: (i, b.block_id) for rid, (i, b) in m._partial_hit_reqs.items()},
                dict(getattr(m, "last_state_block_idx", {})),
                dict(getattr(m, "_checkpoints", {})),
                sorted(getattr(m, "_allocated_block_reqs", ())),
                dict(getattr(m, "_num_retired_blocks", {})),
                sorted(map(k, getattr(m, "cached_blocks_this_step", ())))))
        return blocks, queue, cached, extra, mgrs

    def event_rows(self, events, ours: bool) -> list:
        t = (lambda h: self.o2t.get(h, ("unknown", h))) if ours else (lambda h: h)
        rows = []
        for e in events:
            name = type(e).__name__
            if name == "BlockStored":
                keys = e.extra_keys and tuple(None if x is None else tuple(x)
                                              for x in e.extra_keys)
                rows.append((name, tuple(map(t, e.block_hashes)),
                             None if e.parent_block_hash is None else t(e.parent_block_hash),
                             tuple(e.token_ids), e.block_size, e.lora_id, e.lora_name, keys,
                             e.medium, e.group_idx, e.kv_cache_spec_kind,
                             e.kv_cache_spec_sliding_window))
            elif name == "BlockRemoved":
                rows.append((name, tuple(map(t, e.block_hashes)), e.medium, e.group_idx))
            else:
                rows.append((name,))
        return rows

    def check(self, where: str) -> None:
        STATS["ops"] += 1
        theirs = self.state(self.vs.pool, self.vs.coord.single_type_managers, False)
        ours = self.state(self.m.block_pool, self.m.coordinator.single_type_managers, True)
        for what, a, b in zip(("blocks", "free queue", "hash map", "extra keys", "managers"),
                              theirs, ours, strict=True):
            self.same(a, b, where, what)
        self.seen["multi_key_blocks"] += sum(len(keys) > 1 for keys in ours[3].values())
        te, oe = self.vs.mgr.take_events(), self.m.take_events()
        self.seen["evictions"] += sum(type(e).__name__ == "BlockRemoved" for e in oe)
        self.same(self.event_rows(te, False), self.event_rows(oe, True), where, "KV events")
        if self.hash_algo == "vllm-sha256" and te:
            v = self.vs.v
            theirs_b = v.encoder.encode(v.events.KVEventBatch(ts=2.5, events=te,
                                                              data_parallel_rank=None))
            self.same(theirs_b, encode_batch(EventBatch(2.5, tuple(oe))), where, "batch bytes")
            STATS["byte_batches"] += 1
        self.m.check_invariants()


def run_seed(v, preset, layout, seed: int, num_requests: int, seen: dict) -> int:
    p = Pair(v, preset, layout, seed)
    step = 0
    while p.num_requests < num_requests or p.live:
        step += 1
        p.vs.mgr.new_step_starts()
        p.m.new_step_starts()
        closing = p.num_requests >= num_requests
        for i in range(p.rng.randrange(1, 5)):
            where = f"{p.label}, step {step} op {i}"
            roll = p.rng.random()
            if closing:
                if p.live:
                    p.finish(sorted(p.live)[0])
            elif (not p.live and roll < 0.2) or roll > 0.98:  # fails while a block is in use
                done = p.vs.mgr.reset_prefix_cache()
                p.same(done, p.m.reset_prefix_cache(), where, "reset")
                p.seen["resets"] += done
            elif roll < 0.35 or not p.live:
                p.admit(where + " (admit)")
            elif roll < 0.85:
                p.advance(where + " (advance)")
            else:
                p.finish(p.rng.choice(sorted(p.live)))
            p.check(where)
        copies = p.vs.end_step()
        ours, retained = p.m.take_kv_cache_block_copies()
        if ours:
            p.m.block_pool.free_blocks(retained)
        p.same(copies, ours, f"{p.label}, step {step}", "copy-on-write copies")
        p.seen["cow_copies"] += len(copies)
        p.check(f"{p.label}, step {step} end")
    for k, n in p.seen.items():
        seen[k] += n
    return p.num_requests


def run_config(v, name: str, total: int, per_seed: int, seen: dict) -> tuple[int, int]:
    source, options = CONFIGS[name]
    preset = load_preset(source)
    layout = vllm_layout(preset, options)
    requests = mismatches = seed = 0
    while requests < total:
        try:
            requests += run_seed(v, preset, layout, seed, per_seed, seen)
        except Mismatch as exc:
            mismatches += 1
            requests += per_seed
            print(f"MISMATCH [{name}]", str(exc)[:1500])
        seed += 1
    return requests, mismatches


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("root", type=Path, help="folder holding the unpacked vllm package")
    ap.add_argument("--requests", type=int, default=2000, help="requests per configuration")
    ap.add_argument("--per-seed", type=int, default=40, help="requests per randomized run")
    ap.add_argument("--configs", default="", help="comma-separated names (default: all)")
    ap.add_argument("--break-rule", choices=sorted(BREAK_RULES), default=None,
                    help="flip one rule of ours; the check must then find mismatches")
    args = ap.parse_args()
    if not (args.root / "vllm/v1/core/kv_cache_coordinator.py").exists():
        ap.error(f"{args.root}: no vllm/v1/core/kv_cache_coordinator.py there")
    v = load_vllm_hybrid(args.root)
    logging.disable(logging.WARNING)
    names = [n for n in args.configs.split(",") if n] or list(CONFIGS)
    layouts = [(load_preset(CONFIGS[n][0]), vllm_layout(load_preset(CONFIGS[n][0]), CONFIGS[n][1]))
               for n in names]
    problems = check_layouts(v, args.root, layouts)
    for problem in problems:
        print("LAYOUT MISMATCH", problem)
    print(f"layouts: {len(layouts)} configurations' state shapes, page bytes and KV-cache "
          f"groups against vLLM's code, {len(problems)} differences")
    if args.break_rule:
        break_rule(args.break_rule)
    failed = len(problems)
    for name in names:
        t0 = time.perf_counter()
        seen = dict.fromkeys(COVERAGE, 0)
        requests, mismatches = run_config(v, name, args.requests, args.per_seed, seen)
        failed += mismatches
        print(f"{name:55} {requests:6,} requests  {mismatches:3} mismatching runs  "
              f"{time.perf_counter() - t0:6.1f} s")
        print("    " + ", ".join(f"{k} {n:,}" for k, n in seen.items()))
    print(f"{STATS['ops']:,} ops compared, {STATS['byte_batches']:,} KV-event batches byte for "
          f"byte; {failed} mismatching runs")
    if args.break_rule:
        print(f"break rule {args.break_rule}: {'caught' if failed else 'NOT caught'}")
        return 0 if failed else 1
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
