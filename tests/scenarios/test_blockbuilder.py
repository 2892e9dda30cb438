"""scenarios/blockbuilder.py: run_blocks over a BlockCacheManager on the array pool gives the
stats, lookups and rejections of one on a BlockPool, and its keyframes are, byte for byte,
`capture` of that BlockPool; a step between keyframes (run_blocks from a restored keyframe, a
compact prompt packed by pack_runs) is too."""

from __future__ import annotations

import random

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from radix.blocks.hashing import BlockHasher, hash_request_tokens
from radix.blocks.manager import BlockCacheManager, UnsupportedByStorage
from radix.blocks.pool import BlockPool
from radix.request import Req
from radix.runs.compare import run_blocks
from radix.tokens import RunList, TokenRuns
from scenarios.blockbuilder import ArrayPool
from scenarios.blockframes import BlockFrames, capture
from scenarios.blockhashes import BlockHashes, HashIds

LORA = {"lora-a": "/adapters/a"}


def _requests(seed: int, n: int) -> list[tuple[Req, list[int]]]:
    """Prompts that share prefixes (a third repeat an earlier one whole, so a fully cached
    prompt recomputes its last block and one hash lands on two blocks), some LoRA names and
    salts, outputs of 0-7 tokens."""
    rng = random.Random(seed)
    seen: list[list[int]] = []
    out = []
    for i in range(n):
        if seen and rng.random() < 0.3:
            prompt = list(rng.choice(seen))
        elif seen and rng.random() < 0.5:
            base = rng.choice(seen)
            prompt = base[:rng.randrange(len(base) + 1)] + [rng.randrange(4)
                                                              for _ in range(rng.randrange(9))]
        else:
            prompt = [rng.randrange(4) for _ in range(rng.randrange(1, 24))]
        prompt = prompt or [1]
        seen.append(prompt)
        req = Req(f"r{i}", prompt, extra_key=rng.choice([None, None, "lora-a"]),
                  cache_salt=rng.choice([None, None, None, "tenant"]))
        out.append((req, [90 + j for j in range(rng.randrange(8))]))
    return out


def _mooncake(n: int) -> list[tuple[Req, TokenRuns]]:
    """Mooncake's shape: TokenRuns prompts (512-token hash ids) sharing their first runs,
    outputs past int64 (compact traces' synthetic replies), request 30 repeating request 29's
    prompt and reply whole (its blocks hit): 1,024-1,536-token prompts."""
    out: list[tuple[Req, TokenRuns]] = []
    for i in range(n):
        ids = [0, 1 + i % 3] + ([100 + i] if i % 2 else [])
        prompt = TokenRuns([(u * 512, 512) for u in ids])
        if i == 30:  # the last request's prompt and reply, and one more token
            prompt = out[-1][0].origin_input_ids + out[-1][1] + TokenRuns([(5, 1)])
        reply = TokenRuns([((1 << 63) + (i << 21), 40)])
        out.append((Req(f"m{i}", prompt, output_ids=RunList()), reply))
    return out


@given(st.integers(0, 10**6), st.sampled_from([1, 2, 4]), st.integers(3, 14),
       st.sampled_from([BlockHasher(), BlockHasher("vllm-sha256", lora_paths=LORA)]))
@settings(max_examples=30, deadline=None)
def test_an_array_pool_keyframe_is_the_block_pools(seed, block_size, num_blocks, hash_algo):
    """Oracle: run_blocks over the same requests, in batches, on a BlockPool, on pools small
    enough to evict (parents before children), to reject prompts and to cache one hash on two
    blocks (a fully cached prompt recomputes its last block), with LoRA names and salts (""
    and None alike): after each batch the same stats, lookups, rejected requests and
    unreachable blocks, the keyframe the same bytes, the array pool's invariants hold."""
    fast = BlockCacheManager(ArrayPool(num_blocks, block_size, hash_algo))
    slow = BlockCacheManager(BlockPool(num_blocks, block_size, hash_algo=hash_algo))
    reqs, again = _requests(seed, 30), _requests(seed, 30)
    for req, _ in reqs[::4]:
        req.extra_key = req.extra_key or ""  # hashed as None
    for start in range(0, 30, 7):
        got = []
        for m, pairs in ((slow, again), (fast, reqs)):
            batch, rejected = pairs[start:start + 7], []
            got.append((run_blocks([r for r, _ in batch], [o for _, o in batch],
                                   num_blocks * block_size, block_size, manager=m,
                                   rejected_rids=rejected), rejected))
        assert got[0] == got[1] and fast.lookups == slow.lookups, start
        assert fast.pool.capture() == capture(slow), start
        fast.check_invariants()


def test_an_array_pool_hashes_compact_prompts_and_huge_outputs_as_run_blocks():
    """Mooncake's shape (`_mooncake`): evictions and a log compacted several times."""
    fast = BlockCacheManager(ArrayPool(151, 16))
    slow = BlockCacheManager(BlockPool(151, 16))
    pairs, again = _mooncake(40), _mooncake(40)
    want = run_blocks([r for r, _ in pairs], [o for _, o in pairs], 2400, 16, manager=slow)
    got = run_blocks([r for r, _ in again], [o for _, o in again], 2400, 16, manager=fast)
    assert got == want and fast.lookups == slow.lookups
    assert fast.pool.capture() == capture(slow) and slow.pool.num_evictions > 0
    assert slow.lookups[30].hit_blocks > slow.lookups[29].num_tokens // 16  # the reply hit


def test_an_array_pool_holds_one_request_at_a_time_and_names_what_it_cannot_do():
    """Its hits are free blocks only because no other request holds one: a second lookup
    while a request holds blocks is refused; snapshots, prepaid blocks and a reset raise
    UnsupportedByStorage naming it; its invariants hold, and fail on a miscounted queue."""
    m = BlockCacheManager(ArrayPool(8, 2))
    a, b = Req("a", [1, 2, 3, 4, 5]), Req("b", [1, 2, 9])
    assert m.allocate_slots(a, 5, m.get_computed_blocks(a)) == 3
    with pytest.raises(ValueError, match="one request at a time"):
        m.get_computed_blocks(b)
    for call in (m.snapshot, lambda: m.reserve_blocks(1), m.reset_prefix_cache):
        with pytest.raises(UnsupportedByStorage, match="an ArrayPool"):
            call()
    m.check_invariants()
    m.free(a)
    assert m.get_computed_blocks(b).num_computed_tokens == 2
    m.pool.num_free += 1
    with pytest.raises(AssertionError, match="free count"):
        m.check_invariants()


def test_a_step_between_keyframes_is_run_blocks_from_scratch():
    """Oracle: the pool BlockFrames.at(n) stands on (an array pool's keyframe restored, the
    requests after it run by run_blocks, their compact prompts packed by pack_runs) is, byte
    for byte, the pool run_blocks leaves after the first n requests from an empty one:
    Mooncake's shape, every 4, steps past a keyframe by 1-3 requests, back and forth."""
    frames = BlockFrames(40, lambda a, b: _mooncake(40)[a:b], 2400, 16, every=4)
    for n in (5, 7, 11, 31, 39, 6):
        fresh = BlockCacheManager(BlockPool(151, 16))
        pairs = _mooncake(n)
        run_blocks([r for r, _ in pairs], [o for _, o in pairs], 2400, 16, manager=fresh)
        assert capture(frames.manager_at(n)) == capture(fresh), n
    assert frames.evictions[4] > 0  # evicting from the 5th request on


def test_an_array_pool_keeps_the_order_of_the_blocks_sharing_a_hash():
    """One prompt three times (each recomputes its last block: three blocks carry its hash),
    then prompts that evict some of them, then the prompt again: it hits the first cached
    block still carrying the hash, as vLLM's map keeps them."""
    def reqs() -> list[tuple[Req, list[int]]]:
        same = [(Req(f"a{i}", [1, 2, 3, 4]), []) for i in range(3)]
        other = [(Req(f"b{i}", [7, i, 8, i]), []) for i in range(3)]
        return same + other + [(Req("a3", [1, 2, 3, 4, 5]), [])]
    for num_blocks in range(6, 12):  # 10: the first of three carriers evicted
        fast = BlockCacheManager(ArrayPool(num_blocks, 2))
        slow = BlockCacheManager(BlockPool(num_blocks, 2))
        for m in (slow, fast):
            pairs = reqs()
            run_blocks([r for r, _ in pairs], [o for _, o in pairs], 2 * num_blocks, 2,
                       manager=m)
        assert fast.pool.capture() == capture(slow) and fast.lookups == slow.lookups, num_blocks


@given(st.integers(0, 10**6), st.sampled_from([2, 4, 16]),
       st.sampled_from([BlockHasher(), BlockHasher("vllm-sha256", lora_paths=LORA)]))
@settings(max_examples=12, deadline=None)
def test_a_block_hash_asked_for_late_is_hash_request_tokens(seed, block_size, hash_algo):
    """Oracle: hash_request_tokens over each sequence whole. HashIds hashes nothing when it
    hands out ids; the hashes asked for afterwards (a few ids at a time, in a random order:
    segments hashed part way, then further, parents first; kept, and hashed afresh each
    time) are every block's of every sequence, prompts and prompts plus replies (a walk
    resumed), with 16-token blocks Mooncake's compact prompts with replies past int64 too."""
    rng = random.Random(seed)
    pairs = _requests(seed, 12) + (_mooncake(6) if block_size == 16 else [])
    memo = HashIds(hash_algo, block_size)
    asked = []
    for req, out in pairs:
        prompt, lora, salt = req.origin_input_ids, req.extra_key, req.cache_salt
        ns = (lora or None, salt or None)
        ids = memo.ids(prompt, ns, len(prompt) // block_size, lora, salt)
        whole = prompt + out
        longer = memo.ids(whole, ns, len(whole) // block_size, lora, salt, memo.walk)
        assert longer[:len(ids)].tolist() == ids.tolist()
        want = hash_request_tokens(whole, block_size, lora, salt, hash_algo=hash_algo)
        asked += zip(longer.tolist(), want, strict=True)
    for keep in (True, False):
        hashes = BlockHashes(hash_algo, block_size, keep)
        hashes._starts, hashes._segs = memo.hashes._starts, memo.hashes._segs
        hashes.count = memo.count
        rng.shuffle(asked)
        for k in range(0, len(asked), 9):
            some = asked[k:k + 9]
            assert hashes.of([i for i, _ in some]) == b"".join(h for _, h in some)
