"""Differential check of radix.block_manager / radix.blocks against vLLM's own code (not a test).

Loads block_pool.py, kv_cache_utils.py, single_type_kv_cache_manager.py and utils/hashing.py from
an unpacked vLLM wheel (checked with 0.33.0), stubbing the heavy modules they import, and drives
vLLM's FullAttentionManager + BlockPool the way KVCacheManager.get_computed_blocks/allocate_slots/
free do (hit capped at num_tokens - 1), beside ours, on random requests: shared prefixes over a
4-token vocabulary, 16-token blocks, small pools (eviction, preemption), chunked prefill, decode,
finish, LoRA and cache_salt. Compared after every op: hits, block ids handed out, ref counts, the
free queue head to tail, which token chain each block caches (hashes differ by design: vLLM
sha256-pickles, we sha256-msgpack), the hash map, and the KV events (stored/removed, as chains).

    pip download --no-deps vllm==0.33.0 -d /tmp/vllm
    unzip -q /tmp/vllm/vllm-*.whl 'vllm/v1/core/*' 'vllm/utils/*' -d /tmp/vllm/ex
    python tools/diff_vllm.py /tmp/vllm/ex --seeds 300
"""

from __future__ import annotations

import argparse
import importlib.util
import logging
import random
import sys
import traceback
import types
from pathlib import Path
from unittest import mock

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from radix import kv_events as our_ev  # noqa: E402
from radix.block_hash import hash_request_tokens, hash_to_int64  # noqa: E402
from radix.block_manager import BlockCacheManager  # noqa: E402
from radix.blocks import BlockPool  # noqa: E402
from radix.events import ListSink  # noqa: E402
from radix.request import Req  # noqa: E402

BS = 16


class _Classes(types.ModuleType):
    """A stub module whose every attribute is a fresh class (isinstance and `|` work)."""

    def __getattr__(self, name: str):
        if name.startswith("__"):
            raise AttributeError(name)
        cls = type(name, (), {})
        setattr(self, name, cls)
        return cls


class _Event:
    def __init__(self, **fields) -> None:
        self.__dict__.update(fields)


def load_vllm(root: Path) -> types.SimpleNamespace:
    src = root / "vllm"

    def load(name: str, path: Path):
        spec = importlib.util.spec_from_file_location(name, path)
        module = importlib.util.module_from_spec(spec)
        sys.modules[name] = module
        spec.loader.exec_module(module)
        return module

    for name in ["vllm", "vllm.v1", "vllm.v1.core", "vllm.utils", "vllm.distributed",
                 "vllm.multimodal", "vllm.v1.hisparse"]:
        sys.modules[name] = types.ModuleType(name)
        sys.modules[name].__path__ = []
    for name in ["vllm.config", "vllm.multimodal.utils", "vllm.v1.core.kv_cache_metrics",
                 "vllm.v1.request", "vllm.v1.utils", "vllm.v1.kv_cache_spec_registry", "cbor2"]:
        sys.modules[name] = mock.MagicMock(name=name)
    for name in ["vllm.v1.kv_cache_interface", "vllm.v1.hisparse.block_pool"]:
        sys.modules[name] = _Classes(name)
    logger = sys.modules["vllm.logger"] = types.ModuleType("vllm.logger")
    logger.init_logger = logging.getLogger
    envs = sys.modules["vllm.envs"] = types.ModuleType("vllm.envs")
    envs.VLLM_KV_EVENTS_USE_INT_BLOCK_HASHES = True  # events carry low-64-bit ints, as ours
    sys.modules["vllm"].envs = envs
    ev = sys.modules["vllm.distributed.kv_events"] = types.ModuleType("vllm.distributed.kv_events")
    ev.MEDIUM_GPU, ev.MEDIUM_CPU, ev.KVCacheEvent = "GPU", "CPU", object
    for cls in ("BlockStored", "BlockRemoved", "AllBlocksCleared"):
        setattr(ev, cls, type(cls, (_Event,), {}))
    load("vllm.utils.math_utils", src / "utils/math_utils.py")
    hashing = load("vllm.utils.hashing", src / "utils/hashing.py")
    utils = load("vllm.v1.core.kv_cache_utils", src / "v1/core/kv_cache_utils.py")
    pool = load("vllm.v1.core.block_pool", src / "v1/core/block_pool.py")
    stm = load("vllm.v1.core.single_type_kv_cache_manager",
               src / "v1/core/single_type_kv_cache_manager.py")
    utils.init_none_hash(hashing.sha256)
    hasher = utils.get_request_block_hasher(BS, hashing.sha256)
    spec = sys.modules["vllm.v1.kv_cache_interface"].FullAttentionSpec()
    spec.block_size, spec.dcp_sharded, spec.prefix_cacheable = BS, False, True
    return types.SimpleNamespace(utils=utils, pool=pool, stm=stm, hasher=hasher, spec=spec)


class VReq:
    """The fields of vllm.v1.request.Request that the prefix cache reads."""

    def __init__(self, v, rid: str, tokens: list[int], lora: str | None, salt: str | None):
        self.request_id, self.all_token_ids, self.num_prompt_tokens = rid, list(tokens), len(tokens)
        self.lora_request = None if lora is None else types.SimpleNamespace(
            lora_name=lora, name=lora, lora_path=f"/loras/{lora}", adapter_id=1)
        self.cache_salt, self.mm_features, self.prompt_embeds = salt, [], None
        self.session_id, self.shared_prefix_boundary, self._hasher = None, 0, v.hasher
        self.block_hashes: list[bytes] = []
        self.block_hashes.extend(self._hasher(self))

    @property
    def num_tokens(self) -> int:
        return len(self.all_token_ids)

    def append(self, token: int) -> None:
        self.all_token_ids.append(token)
        self.block_hashes.extend(self._hasher(self))


class VSide:
    """vLLM's FullAttentionManager + BlockPool, glued as KVCacheManager glues them."""

    def __init__(self, v, num_blocks: int, caching: bool) -> None:
        self.v, self.caching = v, caching
        self.pool = v.pool.BlockPool(num_blocks, caching, BS, enable_kv_cache_events=True)
        self.mgr = v.stm.FullAttentionManager(v.spec, block_pool=self.pool,
                                              enable_caching=caching, kv_cache_group_id=0,
                                              scheduler_block_size=BS)
        self.computed: dict[str, int] = {}  # request.num_computed_tokens

    def lookup(self, req: VReq):
        if not self.caching:  # KVCacheManager.prefix_cache_lookup_enabled
            return [], 0
        blocks, hit = self.mgr.find_longest_cache_hit(
            block_hashes=req.block_hashes, max_length=req.num_tokens - 1,
            kv_cache_group_ids=[0], block_pool=self.pool, kv_cache_spec=self.v.spec,
            drop_eagle_block=False, alignment_tokens=BS)
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


def chain_keys(tokens, lora, salt, our_keys: dict, their_keys: dict, vreq: VReq) -> None:
    """Maps both sides' hashes (and their low 64 bits) of each full block to its token chain."""
    ours = hash_request_tokens(tokens, BS, lora, salt)
    for i, (o, t) in enumerate(zip(ours, vreq.block_hashes)):
        key = (lora, salt, tuple(tokens[:(i + 1) * BS]))
        our_keys[o] = our_keys[hash_to_int64(o)] = key
        their_keys[t] = their_keys[int.from_bytes(t, "big") & ((1 << 64) - 1)] = key


def their_state(side: VSide, keys: dict) -> tuple:
    pool, gid = side.pool, side.v.utils.get_block_hash
    blocks = pool.blocks
    cache = {keys[gid(h)]: tuple([e.block_id] if hasattr(e, "block_id") else e)
             for h, e in pool.cached_block_hash_to_block._cache.items()}
    return (tuple(b.ref_cnt for b in blocks),
            tuple(b.block_id for b in pool.free_block_queue.get_all_free_blocks()),
            tuple(None if b.block_hash is None else keys[gid(b.block_hash)] for b in blocks),
            cache)


def our_state(m: BlockCacheManager, keys: dict) -> tuple:
    pool = m.pool
    blocks = pool.blocks
    cache = {keys[h]: tuple([e.block_id] if hasattr(e, "block_id") else e)
             for h, e in pool.cached_block_hash_to_block.items()}
    return (tuple(b.ref_cnt for b in blocks), tuple(b.block_id for b in pool.free_block_queue),
            tuple(None if b.block_hash is None else keys[b.block_hash] for b in blocks), cache)


def their_events(side: VSide, keys: dict) -> list:
    out = []
    for e in side.pool.take_events():
        name = type(e).__name__
        if name == "BlockStored":
            extra = e.extra_keys and tuple(None if k is None else tuple(k) for k in e.extra_keys)
            out.append((name, tuple(keys[h] for h in e.block_hashes),
                        keys.get(e.parent_block_hash), tuple(e.token_ids), e.block_size,
                        e.lora_name, extra or None, e.medium, e.group_idx))
        elif name == "BlockRemoved":
            out.append((name, tuple(keys[h] for h in e.block_hashes), e.medium, e.group_idx))
        else:
            out.append((name,))
    return out


def our_events(sink: ListSink, keys: dict) -> list:
    out = []
    for e in sink.events:
        if isinstance(e, our_ev.BlockStored):
            extra = e.extra_keys and tuple(None if k is None else tuple(k) for k in e.extra_keys)
            out.append(("BlockStored", tuple(keys[h] for h in e.block_hashes),
                        keys.get(e.parent_block_hash), tuple(e.token_ids), e.block_size,
                        e.lora_name, extra or None, e.medium, e.group_idx))
        elif isinstance(e, our_ev.BlockRemoved):
            out.append(("BlockRemoved", tuple(keys[h] for h in e.block_hashes), e.medium,
                        e.group_idx))
        elif isinstance(e, our_ev.AllBlocksCleared):
            out.append(("AllBlocksCleared",))
    sink.events.clear()
    return out


def run(v, seed: int, num_ops: int = 80) -> int:
    rng = random.Random(seed)
    num_blocks, caching = rng.randrange(4, 40), rng.random() < 0.9
    prefixes = [[rng.randrange(4) for _ in range(rng.randrange(0, 70))] for _ in range(3)]
    vs, sink = VSide(v, num_blocks, caching), ListSink()
    m = BlockCacheManager(BlockPool(num_blocks, block_size=BS, enable_caching=caching, sink=sink))
    our_keys: dict = {}
    their_keys: dict = {}
    live: dict[str, tuple[VReq, Req]] = {}
    waiting: list[tuple[VReq, Req]] = []  # preempted, to be resumed
    for i in range(num_ops):
        op = rng.choice(["start", "start", "step", "step", "step", "step", "finish", "reset",
                         "null"])
        where = f"seed {seed} ({num_blocks} blocks, caching {caching}), op {i} ({op})"
        if op == "start":
            if waiting and rng.random() < 0.5:
                vr, our = waiting.pop(0)
            else:
                lora, salt = rng.choice([None, None, "lora-a"]), rng.choice([None, None, "s"])
                toks = rng.choice(prefixes) + [rng.randrange(4) for _ in range(rng.randrange(60))]
                if not toks:
                    continue
                rid = f"r{i}"
                vr, our = VReq(v, rid, toks, lora, salt), Req(rid, toks, extra_key=lora,
                                                              cache_salt=salt)
                chain_keys(toks, lora, salt, our_keys, their_keys, vr)
            th_blocks, th_hit = vs.lookup(vr)
            hit = m.get_computed_blocks(our)
            assert (th_hit, [b.block_id for b in th_blocks]) == (
                hit.num_computed_tokens, [b.block_id for b in hit.blocks]), f"{where}: hits"
            chunk = rng.randrange(1, vr.num_tokens - th_hit + 1)
            a = vs.allocate(vr, chunk, th_blocks, th_hit)
            b = m.allocate_slots(our, chunk, hit)
            assert (a is None) == (b is None), f"{where}: admitted {a is not None}, ours {b}"
            if a is None:
                m.free(our)
            else:
                assert [x.block_id for x in a] == [x.block_id for x in b], f"{where}: new ids"
                live[vr.request_id] = (vr, our)
        elif op == "step" and live:
            vr, our = live[rng.choice(sorted(live))]
            done = vs.computed[vr.request_id]
            if done < vr.num_tokens:  # chunked prefill continues
                chunk = rng.randrange(1, vr.num_tokens - done + 1)
            else:  # decode one token
                tok = rng.randrange(4)
                vr.append(tok)
                our.output_ids.append(tok)
                chain_keys(vr.all_token_ids, our.extra_key, our.cache_salt, our_keys,
                           their_keys, vr)
                chunk = 1
            a, b = vs.allocate(vr, chunk), m.allocate_slots(our, chunk)
            assert (a is None) == (b is None), f"{where}: allocated {a is not None}, ours {b}"
            if a is None:  # preempted: vLLM's scheduler frees it and queues it again
                vs.free(vr.request_id)
                m.free(our)
                waiting.append(live.pop(vr.request_id))
            else:
                assert [x.block_id for x in a] == [x.block_id for x in b], f"{where}: new ids"
        elif op == "finish" and live:
            vr, our = live.pop(rng.choice(sorted(live)))
            vs.free(vr.request_id)
            m.free(our)
        elif op == "null":  # the null block through touch and free_blocks: both skip it
            for pool in (vs.pool, m.pool):
                pool.touch([pool.null_block])
                pool.free_blocks([pool.null_block, pool.null_block])
        elif op == "reset" and rng.random() < 0.3:
            assert vs.pool.reset_prefix_cache() == m.reset_prefix_cache(), f"{where}: reset"
        assert their_state(vs, their_keys) == our_state(m, our_keys), f"{where}: pools differ"
        te, oe = their_events(vs, their_keys), our_events(sink, our_keys)
        assert te == oe, f"{where}: events\n  vLLM {te}\n  ours {oe}"
    return num_ops


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("vllm_root", type=Path, help="folder holding the unpacked vllm package")
    ap.add_argument("--seeds", type=int, default=300)
    args = ap.parse_args()
    if not (args.vllm_root / "vllm" / "v1" / "core" / "block_pool.py").exists():
        ap.error(f"{args.vllm_root}: no vllm/v1/core/block_pool.py there")
    v = load_vllm(args.vllm_root)
    logging.disable(logging.WARNING)  # vLLM's "Failed to reset prefix cache" is expected here
    ops = failures = 0
    for seed in range(args.seeds):
        try:
            ops += run(v, seed)
        except Exception as exc:  # an assertion, or either side raising
            failures += 1
            print("MISMATCH", exc if isinstance(exc, AssertionError) else traceback.format_exc())
    print(f"{ops:,} ops compared, {failures} mismatching runs")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
