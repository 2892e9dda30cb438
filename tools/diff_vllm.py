"""Differential check of radix.blocks (manager, pool) against vLLM's own code (not a test).

Loads block_pool.py, kv_cache_utils.py, single_type_kv_cache_manager.py and utils/hashing.py from
an unpacked vLLM wheel (checked with 0.33.0), stubbing the heavy modules they import, and drives
vLLM's FullAttentionManager + BlockPool the way KVCacheManager.get_computed_blocks/allocate_slots/
free do (hit capped at num_tokens - 1), beside ours, on random requests: shared prefixes over a
4-token vocabulary, blocks of 16, 4 and 1 tokens, small pools (eviction, preemption), chunked
prefill, decode, finish, reset, LoRA, cache_salt, caching off, the null block through touch/free.
Compared after every op: hits, block ids handed out, ref counts (null block included), the
free queue head to tail, which token chain each block caches, the hash map, and the KV events
(stored/removed, as chains). Odd seeds hash as vLLM does (hash_algo="vllm-sha256"): the hashes
must be vLLM's, and each op's KV events, encoded as one EventBatch by vLLM's msgspec structs and
by ours, must be the same bytes. Even seeds use our fast default hash (values differ by design).

    pip download --no-deps vllm==0.33.0 -d /tmp/vllm
    unzip -q /tmp/vllm/vllm-*.whl 'vllm/v1/core/*' 'vllm/utils/*' -d /tmp/vllm/ex
    python tools/diff_vllm.py /tmp/vllm/ex --seeds 400
"""

from __future__ import annotations

import logging
import random
import sys
import types
from pathlib import Path

import msgspec

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from wheels import (  # noqa: E402
    AnyClasses,
    load,
    mocks,
    packages,
    run_seeds,
    wheel_args,
    wheel_parser,
)

from radix.blocks.hashing import BlockHasher, hash_request_tokens, hash_to_int64  # noqa: E402
from radix.blocks.kv_events import EventBatch, encode_batch  # noqa: E402
from radix.blocks.manager import BlockCacheManager  # noqa: E402
from radix.blocks.pool import BlockPool  # noqa: E402
from radix.events import ListSink  # noqa: E402
from radix.request import Req  # noqa: E402

BLOCK_SIZES = (16, 16, 4, 1)  # vLLM's default first; hash_block_size == block_size
KV_EVENT_NAMES = {"BlockStored", "BlockRemoved", "AllBlocksCleared"}
STATS = {"byte_batches": 0}  # KV-event batches compared byte for byte


def load_vllm(root: Path) -> types.SimpleNamespace:
    """vLLM's prefix cache (block pool, manager, hashing) and its real kv_events module (msgspec
    structs and ZmqEventPublisher)."""
    src = root / "vllm"
    packages("vllm", "vllm.v1", "vllm.v1.core", "vllm.utils", "vllm.distributed",
             "vllm.multimodal", "vllm.v1.hisparse", "vllm.config")
    mocks("vllm.multimodal.utils", "vllm.v1.core.kv_cache_metrics", "vllm.v1.request",
          "vllm.v1.utils", "vllm.v1.kv_cache_spec_registry", "vllm.config.kv_events",
          "vllm.utils.network_utils")
    sys.modules["vllm.config"].VllmConfig = object
    for name in ["vllm.v1.kv_cache_interface", "vllm.v1.hisparse.block_pool"]:
        sys.modules[name] = AnyClasses(name)
    logger = sys.modules["vllm.logger"] = types.ModuleType("vllm.logger")
    logger.init_logger = logging.getLogger
    envs = sys.modules["vllm.envs"] = types.ModuleType("vllm.envs")
    envs.VLLM_KV_EVENTS_USE_INT_BLOCK_HASHES = True  # vLLM's default: low-64-bit ints, as ours
    sys.modules["vllm"].envs = envs
    load("vllm.utils.math_utils", src / "utils/math_utils.py")
    hashing = load("vllm.utils.hashing", src / "utils/hashing.py")
    utils = load("vllm.v1.core.kv_cache_utils", src / "v1/core/kv_cache_utils.py")
    events = load("vllm.distributed.kv_events", src / "distributed/kv_events.py")  # msgspec
    pool = load("vllm.v1.core.block_pool", src / "v1/core/block_pool.py")
    stm = load("vllm.v1.core.single_type_kv_cache_manager",
               src / "v1/core/single_type_kv_cache_manager.py")
    utils.init_none_hash(hashing.sha256)
    spec_cls = sys.modules["vllm.v1.kv_cache_interface"].FullAttentionSpec
    return types.SimpleNamespace(utils=utils, pool=pool, stm=stm, hashing=hashing,
                                 spec_cls=spec_cls, events=events,
                                 encoder=msgspec.msgpack.Encoder())


class VReq:
    """The fields of vllm.v1.request.Request that the prefix cache reads."""

    def __init__(self, hasher, rid: str, tokens: list[int], lora: str | None, salt: str | None):
        self.request_id, self.all_token_ids, self.num_prompt_tokens = rid, list(tokens), len(tokens)
        self.lora_request = None if lora is None else types.SimpleNamespace(
            lora_name=lora, name=lora, lora_path=f"/loras/{lora}", adapter_id=1)
        self.cache_salt, self.mm_features, self.prompt_embeds = salt, [], None
        self.session_id, self.shared_prefix_boundary, self._hasher = None, 0, hasher
        self.num_tokens, self.block_hashes = len(tokens), []
        self.block_hashes.extend(self._hasher(self))  # as Request.__init__ and append_output

    def append(self, token: int) -> None:
        self.all_token_ids.append(token)
        self.num_tokens += 1
        self.block_hashes.extend(self._hasher(self))


class VSide:
    """vLLM's FullAttentionManager + BlockPool, glued as KVCacheManager glues them."""

    def __init__(self, v, num_blocks: int, bs: int, caching: bool) -> None:
        self.v, self.bs, self.caching = v, bs, caching
        self.hasher = v.utils.get_request_block_hasher(bs, v.hashing.sha256)
        self.spec = v.spec_cls()
        self.spec.block_size, self.spec.dcp_sharded, self.spec.prefix_cacheable = bs, False, True
        self.pool = v.pool.BlockPool(num_blocks, caching, bs, enable_kv_cache_events=True)
        self.mgr = v.stm.FullAttentionManager(self.spec, block_pool=self.pool,
                                              enable_caching=caching, kv_cache_group_id=0,
                                              scheduler_block_size=bs)
        self.computed: dict[str, int] = {}  # request.num_computed_tokens

    def lookup(self, req: VReq):
        if not self.caching:  # KVCacheManager.prefix_cache_lookup_enabled
            return [], 0
        blocks, hit = self.mgr.find_longest_cache_hit(
            block_hashes=req.block_hashes, max_length=req.num_tokens - 1,
            kv_cache_group_ids=[0], block_pool=self.pool, kv_cache_spec=self.spec,
            drop_eagle_block=False, alignment_tokens=self.bs)
        return blocks[0], hit

    def allocate(self, req: VReq, num_new: int, hits=(), hit_len: int = 0):
        rid, mgr = req.request_id, self.mgr
        local = self.computed.get(rid, 0) + hit_len
        total = local + num_new
        need = mgr.get_num_blocks_to_allocate(rid, total, hits, local, local, total)
        if need > self.pool.get_num_free_blocks():
            return None
        if rid not in mgr.num_cached_block:
            mgr.add_local_computed_blocks(rid, hits, local, 0)
        new = mgr.allocate_new_blocks(rid, total, total)
        if self.caching:  # the coordinator skips managers with caching off
            mgr.cache_blocks(req, min(total, req.num_tokens), replay_boundaries=())
        self.computed[rid] = total
        return new

    def free(self, rid: str) -> None:
        self.mgr.free(rid)
        self.computed.pop(rid, None)


def chain_keys(bs, tokens, lora, salt, our_keys: dict, their_keys: dict, vreq: VReq,
               hasher: BlockHasher) -> None:
    """Maps both sides' hashes (and their low 64 bits) of each full block to its token chain."""
    ours = hash_request_tokens(tokens, bs, lora, salt, hash_algo=hasher)
    if hasher.hash_algo == "vllm-sha256":
        assert ours == [bytes(h) for h in vreq.block_hashes], "vLLM-mode hashes differ"
    for i, (o, t) in enumerate(zip(ours, vreq.block_hashes, strict=True)):
        key = (lora, salt, tuple(tokens[:(i + 1) * bs]))
        our_keys[o] = our_keys[hash_to_int64(o)] = key
        their_keys[t] = their_keys[int.from_bytes(t, "big") & ((1 << 64) - 1)] = key


def pool_state(blocks, queue, cache: dict, key) -> tuple:
    """Ref counts, free queue ids, each block's cached chain, chain -> block ids in the map."""
    return (tuple(b.ref_cnt for b in blocks), tuple(b.block_id for b in queue),
            tuple(None if b.block_hash is None else key(b.block_hash) for b in blocks),
            {key(h): tuple([e.block_id] if hasattr(e, "block_id") else e)
             for h, e in cache.items()})


def event_rows(events, keys: dict) -> list:
    """KV events of either side (same field names) with hashes replaced by token chains."""
    out = []
    for e in events:
        name = type(e).__name__
        if name == "BlockStored":
            extra = e.extra_keys and tuple(None if k is None else tuple(k) for k in e.extra_keys)
            out.append((name, tuple(keys[h] for h in e.block_hashes),
                        keys.get(e.parent_block_hash), tuple(e.token_ids), e.block_size,
                        e.lora_name, extra or None, e.medium, e.group_idx))
        elif name == "BlockRemoved":
            out.append((name, tuple(keys[h] for h in e.block_hashes), e.medium, e.group_idx))
        elif name == "AllBlocksCleared":
            out.append((name,))
    return out


class Pair:
    """vLLM's side and ours, fed the same requests; `check` compares them."""

    def __init__(self, v, seed: int) -> None:
        self.rng = rng = random.Random(seed)
        self.bs, caching = BLOCK_SIZES[seed % len(BLOCK_SIZES)], rng.random() < 0.9
        num_blocks = rng.randrange(4, 40) * 16 // self.bs
        self.prefixes = [[rng.randrange(4) for _ in range(rng.randrange(70))] for _ in range(3)]
        self.vs, self.sink = VSide(v, num_blocks, self.bs, caching), ListSink()
        # odd seeds hash as vLLM does, so both sides' KV-event batches must be the same bytes
        self.hasher = BlockHasher("vllm-sha256" if seed % 2 else "radixlens",
                                  lora_paths={"lora-a": "/loras/lora-a"})
        self.m = BlockCacheManager(BlockPool(num_blocks, block_size=self.bs,
                                             enable_caching=caching, sink=self.sink,
                                             hash_algo=self.hasher), lora_ids={"lora-a": 1})
        self.our_keys: dict = {}
        self.their_keys: dict = {}
        self.live: dict[str, tuple[VReq, Req]] = {}
        self.waiting: list[tuple[VReq, Req]] = []  # preempted, to be resumed
        self.rank = rng.choice([None, 0, 3])  # the batches' data_parallel_rank
        self.label = f"seed {seed} ({num_blocks} blocks of {self.bs}, caching {caching}, " \
                     f"{self.hasher.hash_algo})"

    def new_request(self, rid: str) -> tuple[VReq, Req]:
        rng = self.rng
        lora, salt = rng.choice([None, None, "lora-a"]), rng.choice([None, None, "s"])
        toks = rng.choice(self.prefixes) + [rng.randrange(4) for _ in range(rng.randrange(1, 60))]
        vr = VReq(self.vs.hasher, rid, toks, lora, salt)
        chain_keys(self.bs, toks, lora, salt, self.our_keys, self.their_keys, vr, self.hasher)
        return vr, Req(rid, toks, extra_key=lora, cache_salt=salt)

    def start(self, rid: str, where: str) -> None:
        use_waiting = self.waiting and self.rng.random() < 0.5
        vr, our = self.waiting.pop(0) if use_waiting else self.new_request(rid)
        th_blocks, th_hit = self.vs.lookup(vr)
        hit = self.m.get_computed_blocks(our)
        assert (th_hit, [b.block_id for b in th_blocks]) == (
            hit.num_computed_tokens, [b.block_id for b in hit.blocks]), f"{where}: hits"
        chunk = self.rng.randrange(1, vr.num_tokens - th_hit + 1)
        a = self.vs.allocate(vr, chunk, th_blocks, th_hit)
        self.compare_new(a, self.m.allocate_slots(our, chunk, hit), where)
        if a is None:
            self.m.free(our)  # drops the state our lookup made; vLLM keeps none
        else:
            self.live[vr.request_id] = (vr, our)

    def step(self, where: str) -> None:
        vr, our = self.live[self.rng.choice(sorted(self.live))]
        done = self.vs.computed[vr.request_id]
        if done < vr.num_tokens:  # chunked prefill continues
            chunk = self.rng.randrange(1, vr.num_tokens - done + 1)
        else:  # decode one token
            chunk, tok = 1, self.rng.randrange(4)
            vr.append(tok)
            our.output_ids.append(tok)
            chain_keys(self.bs, vr.all_token_ids, our.extra_key, our.cache_salt, self.our_keys,
                       self.their_keys, vr, self.hasher)
        a, b = self.vs.allocate(vr, chunk), self.m.allocate_slots(our, chunk)
        self.compare_new(a, b, where)
        if a is None:  # preempted: vLLM's scheduler frees it and queues it again
            self.finish(vr.request_id)
            self.waiting.append((vr, our))

    def finish(self, rid: str) -> None:
        vr, our = self.live.pop(rid)
        self.vs.free(rid)
        self.m.free(our)

    @staticmethod
    def compare_new(a, b, where: str) -> None:
        assert (a is None) == (b is None), f"{where}: vLLM allocated {a is not None}, ours {b}"
        assert a is None or [x.block_id for x in a] == [x.block_id for x in b], f"{where}: ids"

    def check(self, where: str) -> None:
        pool, gid, keys = self.vs.pool, self.vs.v.utils.get_block_hash, self.their_keys
        theirs = pool_state(pool.blocks, pool.free_block_queue.get_all_free_blocks(),
                            pool.cached_block_hash_to_block._cache, lambda h: keys[gid(h)])
        ours = pool_state(self.m.pool.blocks, self.m.pool.free_block_queue,
                          self.m.pool.cached_block_hash_to_block, self.our_keys.__getitem__)
        assert theirs == ours, f"{where}: pools differ"
        their_events = pool.take_events()
        for e in their_events:  # KVCacheManager.take_events annotates the single group
            if isinstance(e, self.vs.v.events.BlockStored) and e.group_idx == 0:
                e.kv_cache_spec_kind, e.kv_cache_spec_sliding_window = "full_attention", None
        te = event_rows(their_events, keys)
        our_events = [e for e in self.sink.events if type(e).__name__ in KV_EVENT_NAMES]
        oe = event_rows(our_events, self.our_keys)
        self.sink.events.clear()
        assert te == oe, f"{where}: events\n  vLLM {te}\n  ours {oe}"
        if self.hasher.hash_algo == "vllm-sha256" and their_events:  # one step's batch
            v = self.vs.v
            theirs_b = v.encoder.encode(v.events.KVEventBatch(ts=1.5, events=their_events,
                                                              data_parallel_rank=self.rank))
            ours_b = encode_batch(EventBatch(1.5, tuple(our_events), self.rank))
            assert theirs_b == ours_b, f"{where}: batch bytes differ"
            STATS["byte_batches"] += 1


def run(v, seed: int, num_ops: int = 80) -> int:
    p = Pair(v, seed)
    for i in range(num_ops):
        op = p.rng.choice(["start"] * 2 + ["step"] * 4 + ["finish", "reset", "null"])
        where = f"{p.label}, op {i} ({op})"
        if op == "start":
            p.start(f"r{i}", where)
        elif op == "step" and p.live:
            p.step(where)
        elif op == "finish" and p.live:
            p.finish(p.rng.choice(sorted(p.live)))
        elif op == "null":  # the null block through touch and free_blocks: both skip it
            for pool in (p.vs.pool, p.m.pool):
                pool.touch([pool.null_block])
                pool.free_blocks([pool.null_block, pool.null_block])
        elif op == "reset" and p.rng.random() < 0.3:
            assert p.vs.pool.reset_prefix_cache() == p.m.reset_prefix_cache(), f"{where}: reset"
        p.check(where)
    return num_ops


def main() -> int:
    args = wheel_args(wheel_parser(__doc__, "vllm", seeds=400), "vllm/v1/core/block_pool.py")
    v = load_vllm(args.root)
    logging.disable(logging.WARNING)  # vLLM's "Failed to reset prefix cache" is expected here
    ops, failures = run_seeds(lambda seed: run(v, seed), ((seed,) for seed in range(args.seeds)))
    print(f"{STATS['byte_batches']:,} KV-event batches compared byte for byte")
    print(f"{ops:,} ops compared, {failures} mismatching runs")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
