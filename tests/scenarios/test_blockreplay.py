"""scenarios/blockreplay.py: the keyframe builder's fast replay leaves the pool run_blocks does."""

from __future__ import annotations

import random

from blockhelp import pool_state
from hypothesis import given, settings
from hypothesis import strategies as st

from radix.blocks.manager import BlockCacheManager
from radix.blocks.pool import BlockPool
from radix.request import Req
from radix.runs.compare import run_blocks
from radix.tokens import RunList, TokenRuns
from scenarios.blockreplay import replay_blocks


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


@given(st.integers(0, 10**6), st.sampled_from([1, 2, 4]), st.integers(3, 14),
       st.booleans(), st.sampled_from(["right", "none", "wrong"]))
@settings(max_examples=60, deadline=None)
def test_replay_blocks_leaves_the_pool_run_blocks_does(seed, block_size, num_blocks, memo,
                                                       hits):
    """Oracle: run_blocks over the same requests, in batches (the keyframe builder's), on
    pools small enough to evict, to reject prompts and to cache one hash on two blocks: every
    block's hash, parent, position and ref_cnt, the free queue's order, the hash map (its
    order, its groups) and the eviction count agree after each batch. Hit counts given right
    (as the block-extent summary has them), not at all, or wrong (checked, so only slower)."""
    fast = BlockCacheManager(BlockPool(num_blocks, block_size), hash_memo=memo)
    slow = BlockCacheManager(BlockPool(num_blocks, block_size))
    reqs, again = _requests(seed, 30), _requests(seed, 30)
    for start in range(0, 30, 7):
        batch = again[start:start + 7]
        run_blocks([r for r, _ in batch], [o for _, o in batch], num_blocks * block_size,
                   block_size, manager=slow)
        want = [lk.hit_blocks for lk in slow.lookups[-len(batch):]]
        given_hits = {"right": want, "none": None,
                      "wrong": [h + (-1) ** h for h in want]}[hits]
        replay_blocks(fast, reqs[start:start + 7], given_hits)
        assert pool_state(fast) == pool_state(slow), start
        assert not fast.requests
        fast.check_invariants()


def test_replay_blocks_hashes_compact_prompts_and_huge_outputs_as_run_blocks():
    """Mooncake's shape: TokenRuns prompts (512-token hash ids) sharing their first runs, and
    outputs past int64 (compact traces' synthetic replies): same pool as run_blocks, with
    evictions (150 blocks of 16 for prompts of 1,024-1,536 tokens)."""
    def reqs() -> list[tuple[Req, TokenRuns]]:
        out = []
        for i in range(12):
            ids = [0, 1 + i % 3] + ([100 + i] if i % 2 else [])
            prompt = TokenRuns([(u * 512, 512) for u in ids])
            req = Req(f"m{i}", prompt, output_ids=RunList())
            out.append((req, TokenRuns([((1 << 63) + (i << 21), 40)])))
        return out
    fast = BlockCacheManager(BlockPool(151, 16), hash_memo=True)
    slow = BlockCacheManager(BlockPool(151, 16))
    pairs = reqs()
    run_blocks([r for r, _ in pairs], [o for _, o in pairs], 2400, 16, manager=slow)
    replay_blocks(fast, reqs(), [lk.hit_blocks for lk in slow.lookups])
    assert pool_state(fast) == pool_state(slow) and slow.pool.num_evictions > 0
