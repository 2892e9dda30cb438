"""Known-answer tests for the block cache (radix/blocks/pool.py, radix/blocks/manager.py)."""

from __future__ import annotations

import struct

from hypothesis import given, settings
from hypothesis import strategies as st

from radix.blocks.hashing import NONE_HASH, BlockHasher, hash_block_tokens, hash_request_tokens
from radix.blocks.manager import BlockCacheManager
from radix.blocks.pool import BlockPool
from radix.request import Req
from radix.tokens import TokenRuns

# The customer-support scenario (shared/DESIGN.md): S = 512-token system prompt, F = 1,543-token
# few-shot block; R1 = S+F+96, R2 = S+F+80, R3 = S + 2,112 (RAG context and query).
S = list(range(0, 512))
F = list(range(1000, 2543))
R1 = Req("r1", S + F + list(range(5000, 5096)))
R2 = Req("r2", S + F + list(range(6000, 6080)))
R3 = Req("r3", S + list(range(7000, 9112)))


def run_prefill(m: BlockCacheManager, req: Req) -> int:
    """Looks up, allocates the rest of the prompt, returns the hit length."""
    hit = m.get_computed_blocks(req)
    assert m.allocate_slots(req, len(req.origin_input_ids) - hit.num_computed_tokens, hit)
    m.check_invariants()
    return hit.num_computed_tokens


def queue_ids(pool: BlockPool) -> list[int]:
    return [b.block_id for b in pool.free_block_queue]


def test_three_request_scenario():
    """R1: nothing cached; its 2,151 tokens take ceil(2151/16) = 135 blocks, 134 of them full.
    R2 shares S+F = 2,055 tokens = 128 full blocks (2,048) + 7 tokens of block 128, whose other
    9 tokens are R2's own query: the lookup stops at block 128 (a miss), hits 2,048 tokens and
    re-prefills the 7 shared ones (the tree matches all 2,055). R3 shares S = 32 full blocks."""
    m = BlockCacheManager(BlockPool(1000))
    assert run_prefill(m, R1) == 0
    assert len(m.requests["r1"].blocks) == 135 and m.requests["r1"].num_cached_blocks == 134
    m.free(R1)
    assert run_prefill(m, R2) == 2048
    rec = m.lookups[-1]
    assert (rec.hit_blocks, rec.stop_block, rec.reason) == (128, 128, "miss")
    assert 2055 - rec.hit_tokens == 7
    m.free(R2)
    assert run_prefill(m, R3) == 512
    assert m.lookups[-1][2:] == (32, 512, 32, "miss")


def test_fully_cached_32_token_prompt_hits_16():
    """32 tokens = 2 full blocks, both cached. The cap is 31 tokens -> floor(31/16) = 1 block:
    the lookup hits 16 tokens and the last block is recomputed (reason "cap")."""
    m = BlockCacheManager(BlockPool(10))
    a, b = Req("a", list(range(32))), Req("b", list(range(32)))
    run_prefill(m, a)
    m.free(a)
    assert run_prefill(m, b) == 16
    assert m.lookups[-1].reason == "cap" and m.lookups[-1].stop_block == 1
    # 33 tokens: cap 32 -> both blocks hit, stopped by the partial third block.
    c = Req("c", list(range(32)) + [99])
    assert m.get_computed_blocks(c).num_computed_tokens == 32
    assert m.lookups[-1].reason == "partial"


def test_free_queue_order_after_frees_and_touches():
    """block_size 4, blocks 1..5. r1 (10 tokens) takes 1,2,3; 1 and 2 are full and cached.
    free r1 walks 3,2,1: 3 has no hash -> front; 2,1 hashed -> tail: [3,4,5,2,1].
    r2 = r1's first 8 tokens + 4 new: hits 1,2 (touch pulls them out: [3,4,5]), takes 3 (head)
    for its third block, which fills and is cached: [4,5]. free r2 walks 3,2,1, all hashed:
    [4,5,3,2,1]."""
    pool = BlockPool(6, block_size=4)
    m = BlockCacheManager(pool)
    r1 = Req("r1", list(range(10)))
    run_prefill(m, r1)
    assert queue_ids(pool) == [4, 5]
    m.free(r1)
    assert queue_ids(pool) == [3, 4, 5, 2, 1]
    r2 = Req("r2", list(range(8)) + [100, 101, 102, 103])
    hit = m.get_computed_blocks(r2)
    assert [b.block_id for b in hit.blocks] == [1, 2]
    assert queue_ids(pool) == [3, 4, 5, 2, 1]  # a lookup changes nothing
    assert [b.block_id for b in m.allocate_slots(r2, 4, hit)] == [3]
    assert queue_ids(pool) == [4, 5]
    m.free(r2)
    assert queue_ids(pool) == [4, 5, 3, 2, 1]
    m.check_invariants()


def test_lazy_eviction():
    """Freed hashed blocks stay cached in the queue until popped. blocks 1..3, block_size 4:
    r1 (8 tokens) caches 1,2; free -> [3,2,1], both hashes still found. r2 (8 other tokens)
    pops 3 and 2: only block 2's hash (r1's second block) is evicted; r1's first block stays."""
    pool = BlockPool(4, block_size=4)
    m = BlockCacheManager(pool)
    r1 = Req("r1", list(range(8)))
    run_prefill(m, r1)
    m.free(r1)
    h0, h1 = hash_request_tokens(list(range(8)), 4)
    assert pool.get_cached_block(h0).block_id == 1 and pool.get_cached_block(h1).block_id == 2
    assert pool.get_cached_block(h0).ref_cnt == 0
    r2 = Req("r2", list(range(50, 58)))
    run_prefill(m, r2)
    assert pool.get_cached_block(h1) is None and pool.get_cached_block(h0).block_id == 1
    assert pool.num_evictions == 1 and m.num_unreachable_blocks() == 0


def test_reverse_free_order_evicts_tail_first():
    """A request's blocks are freed last to first, so its chain is evicted from the tail and no
    block is left unreachable. Freeing in forward order (by hand) shows what reverse avoids:
    the head block is evicted first and the child becomes unreachable."""
    pool = BlockPool(4, block_size=4)
    m = BlockCacheManager(pool)
    run_prefill(m, Req("r", list(range(8))))
    m.free(Req("r", []))
    assert queue_ids(pool) == [3, 2, 1]
    pool2 = BlockPool(4, block_size=4)
    blocks = pool2.get_new_blocks(2)
    hashes = hash_request_tokens(list(range(8)), 4)
    pool2.cache_full_blocks(blocks, hashes, 0, 2)
    pool2.free_blocks(blocks)  # forward order: head block first in line
    pool2.get_new_blocks(2)  # pops 3, then 1 (the chain's head)
    snap = BlockCacheManager(pool2).snapshot()
    assert [(s.id, s.state) for s in snap.blocks] == [
        (1, "in_use"), (2, "unreachable"), (3, "in_use")]
    assert snap.num_unreachable == 1 and snap.blocks[1].chain_pos == 1


def test_cache_salt_and_lora_partition():
    """Same tokens, other salt -> other first hash -> nothing shared; the salt only enters block
    0 but the chain carries it on. A LoRA name enters every block."""
    m = BlockCacheManager(BlockPool(20, block_size=4))
    toks = list(range(13))
    run_prefill(m, Req("a", toks, cache_salt="tenant-a"))
    assert run_prefill(m, Req("b", toks, cache_salt="tenant-b")) == 0
    assert run_prefill(m, Req("c", toks, cache_salt="tenant-a")) == 12
    assert run_prefill(m, Req("d", toks, extra_key="lora-1")) == 0
    assert hash_block_tokens(None, [1, 2]) == hash_block_tokens(NONE_HASH, [1, 2])
    salted = hash_request_tokens(toks, 4, cache_salt="s")
    plain = hash_request_tokens(toks, 4)
    assert all(x != y for x, y in zip(salted, plain))


def test_decode_fills_and_caches_blocks():
    """A 14-token prompt (block_size 4) holds 4 blocks, 3 cached. Two decode tokens bring it to
    16 = 4 full blocks: the fourth is cached; a new request with those 16 tokens + 1 hits 16."""
    m = BlockCacheManager(BlockPool(20, block_size=4))
    r = Req("r", list(range(14)))
    run_prefill(m, r)
    for tok in (500, 501):
        r.output_ids.append(tok)
        assert m.allocate_slots(r, 1) == []
    assert m.requests["r"].num_cached_blocks == 4
    m.check_invariants()
    r2 = Req("r2", list(range(14)) + [500, 501, 7])
    assert m.get_computed_blocks(r2).num_computed_tokens == 16


def test_allocation_failure_changes_nothing_and_duplicates():
    """blocks 1..3: a 12-token prompt (3 blocks) fits, a second one concurrently does not ->
    None and no state change. Two live requests that both missed cache the same hash twice;
    lookups return the first cached block."""
    pool = BlockPool(4, block_size=4)
    m = BlockCacheManager(pool)
    run_prefill(m, Req("a", list(range(12))))
    b = Req("b", list(range(100, 112)))
    before = queue_ids(pool)
    assert m.allocate_slots(b, 12, m.get_computed_blocks(b)) is None
    assert queue_ids(pool) == before
    m.free(b)
    big = BlockCacheManager(BlockPool(10, block_size=4))
    x, y = Req("x", list(range(9))), Req("y", list(range(9)))
    hx, hy = big.get_computed_blocks(x), big.get_computed_blocks(y)
    big.allocate_slots(x, 9, hx)
    big.allocate_slots(y, 9, hy)
    h0 = big.requests["x"].block_hashes[0]
    assert [b.block_id for b in big.pool.cached_blocks(h0)] == [1, 4]
    assert big.pool.get_cached_block(h0).block_id == 1
    big.check_invariants()


def test_null_block_is_skipped_by_touch_and_free():
    """vLLM's BlockPool.touch and free_blocks skip the null block (its ref_cnt is not kept).
    Found by tools/diff_vllm.py: ours counted it, so touch made it 1 and a double free -1.
    blocks 1..3 stay in the queue in id order; the null block stays at ref_cnt 0, out of it."""
    pool = BlockPool(4, block_size=4)
    pool.touch([pool.null_block])
    pool.free_blocks([pool.null_block, pool.null_block])
    assert pool.null_block.ref_cnt == 0 and queue_ids(pool) == [1, 2, 3]
    pool.check_invariants()



@settings(max_examples=150, deadline=None)
@given(st.lists(st.tuples(st.lists(st.sampled_from([(0, 8), (100, 5), (200, 16), (300, 3)]),
                                   min_size=1, max_size=4),
                          st.sampled_from([None, "lora"]), st.sampled_from([None, "", "t1"]),
                          st.booleans()),
                min_size=1, max_size=12),
       st.sampled_from(["radixlens", "vllm-sha256"]))
def test_the_hash_memo_gives_the_hashes_without_it(reqs, algo):
    if algo != "radixlens":  # vLLM's own hash needs each LoRA's path
        algo = BlockHasher(algo, lora_paths={"lora": "/adapters/lora"})
    """Prompts that repeat, extend and branch from each other, in namespaces: every request's
    block hashes (prompt, then prompt + a reply) are the same with the memo as without, and the
    memo reused some when a prompt repeated an earlier prefix."""
    plain = BlockCacheManager(BlockPool(4, 4, hash_algo=algo))
    memo = BlockCacheManager(BlockPool(4, 4, hash_algo=algo), hash_memo=True)
    for i, (pieces, lora, salt, compact) in enumerate(reqs):
        spans = [(a + 1000 * k, n) for k, (a, n) in enumerate(pieces)]
        prompt = TokenRuns(spans) if compact else list(TokenRuns(spans))
        r1, r2 = (Req(f"r{i}", prompt, extra_key=lora, cache_salt=salt) for _ in range(2))
        assert memo.hash_request(r2) == plain.hash_request(r1)
        r1.output_ids += [7, 8, 9, 10, 11]
        r2.output_ids += [7, 8, 9, 10, 11]
        assert memo.hash_request(r2) == plain.hash_request(r1)
    repeats = any(a[:3] == b[:3] and sum(n for _, n in a[0]) >= 4
                  for a, b in zip(reqs, reqs[1:]))
    if repeats:  # the same prompt in the same namespace again: its hashes come from the memo
        assert memo.memo.reused > 0


@settings(max_examples=80, deadline=None)
@given(st.lists(st.sampled_from([0, 7, 2**63 - 1, 2**63, 2**63 + 5, -(2**63), -(2**63) - 1]),
                min_size=1, max_size=30), st.sampled_from([1, 2, 4]),
       st.sampled_from([None, "lora-a"]), st.sampled_from([None, "salt"]))
def test_blocks_with_tokens_past_int64_hash_one_by_one_and_a_packer_changes_nothing(
        tokens, block_size, lora, salt):
    """Oracle: hash_request_tokens equals hash_block_tokens block by block (each block's own
    form: int64s packed, or the decimal form when one of its tokens does not fit), on tokens
    at and past int64's ends, given a packer (struct.pack's bytes, or None: cannot) or not."""
    want, parent = [], None
    for i in range(len(tokens) // block_size):
        keys = BlockHasher().extra_keys(i, lora, salt)
        parent = hash_block_tokens(parent, tokens[i * block_size:(i + 1) * block_size], keys)
        want.append(parent)
    assert hash_request_tokens(tokens, block_size, lora, salt) == want

    def pack(new):
        return (struct.pack(f"<{len(new)}q", *new)
                if all(-(2**63) <= t < 2**63 for t in new) else None)
    assert hash_request_tokens(tokens, block_size, lora, salt, pack=pack) == want
    first = hash_request_tokens(tokens[:block_size], block_size, lora, salt)
    assert hash_request_tokens(tokens, block_size, lora, salt, first, pack=pack) == want


@settings(max_examples=60, deadline=None)
@given(st.lists(st.tuples(st.sampled_from([0, 2**63 - 20, 2**63, 2**63 + 990, 10**19 - 30,
                                           -(2**63) - 40]),
                          st.integers(0, 40), st.integers(1, 50)), min_size=1, max_size=4),
       st.sampled_from([1, 4, 16]), st.sampled_from([None, "lora-a"]),
       st.sampled_from([None, "salt"]), st.integers(0, 3))
def test_runs_past_int64_hash_as_their_tokens_do(runs, block_size, lora, salt, known):
    """A TokenRuns with runs past int64 (a compact trace's synthetic reply; runs crossing
    int64's ends, a multiple of 1,000 and a power of ten) hashes by its runs, unexpanded:
    oracle, the same tokens as a list, from the start or after `known` hashed blocks."""
    tokens = TokenRuns([(base + skip, length) for base, skip, length in runs])
    want = hash_request_tokens(list(tokens), block_size, lora, salt)
    assert hash_request_tokens(tokens, block_size, lora, salt) == want
    first = want[:known]
    assert hash_request_tokens(tokens, block_size, lora, salt, list(first)) == want
