"""scenarios/blockbuilder.py: the array pool's keyframes are, byte for byte, `capture` of the
BlockPool run_blocks leaves."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st
from test_blockreplay import _requests

from radix.blocks.hashing import BlockHasher
from radix.blocks.manager import BlockCacheManager
from radix.blocks.pool import BlockPool
from radix.request import Req
from radix.runs.compare import run_blocks
from radix.tokens import RunList, TokenRuns
from scenarios.blockbuilder import ArrayPool
from scenarios.blockframes import capture

LORA = {"lora-a": "/adapters/a"}


@given(st.integers(0, 10**6), st.sampled_from([1, 2, 4]), st.integers(3, 14),
       st.sampled_from([BlockHasher(), BlockHasher("vllm-sha256", lora_paths=LORA)]))
@settings(max_examples=30, deadline=None)
def test_an_array_pool_keyframe_is_the_block_pools(seed, block_size, num_blocks, hash_algo):
    """Oracle: run_blocks over the same requests, in batches (the keyframe builder's), on
    pools small enough to evict (parents before children), to reject prompts and to cache one
    hash on two blocks (a fully cached prompt recomputes its last block), with LoRA names
    and salts ("" and None alike): the keyframe after each batch is the same bytes."""
    fast = ArrayPool(num_blocks, block_size, hash_algo)
    slow = BlockCacheManager(BlockPool(num_blocks, block_size, hash_algo=hash_algo))
    reqs, again = _requests(seed, 30), _requests(seed, 30)
    for req, _ in reqs[::4]:
        req.extra_key = req.extra_key or ""  # hashed as None
    for start in range(0, 30, 7):
        batch = again[start:start + 7]
        run_blocks([r for r, _ in batch], [o for _, o in batch], num_blocks * block_size,
                   block_size, manager=slow)
        fast.replay(reqs[start:start + 7])
        assert fast.capture() == capture(slow), start


def test_an_array_pool_hashes_compact_prompts_and_huge_outputs_as_run_blocks():
    """Mooncake's shape: TokenRuns prompts (512-token hash ids) sharing their first runs,
    outputs past int64 (compact traces' synthetic replies), one reply repeated whole by a
    later prompt (its blocks hit); evictions and a log compacted several times."""
    def reqs() -> list[tuple[Req, TokenRuns]]:
        out = []
        for i in range(40):
            ids = [0, 1 + i % 3] + ([100 + i] if i % 2 else [])
            prompt = TokenRuns([(u * 512, 512) for u in ids])
            if i == 30:  # the last request's prompt and reply, and one more token
                prompt = out[-1][0].origin_input_ids + out[-1][1] + TokenRuns([(5, 1)])
            reply = TokenRuns([((1 << 63) + (i << 21), 40)])
            out.append((Req(f"m{i}", prompt, output_ids=RunList()), reply))
        return out
    fast = ArrayPool(151, 16)
    slow = BlockCacheManager(BlockPool(151, 16))
    pairs = reqs()
    run_blocks([r for r, _ in pairs], [o for _, o in pairs], 2400, 16, manager=slow)
    fast.replay(reqs())
    assert fast.capture() == capture(slow) and slow.pool.num_evictions > 0
    assert slow.lookups[30].hit_blocks > slow.lookups[29].num_tokens // 16  # the reply hit


def test_an_array_pool_keeps_the_order_of_the_blocks_sharing_a_hash():
    """One prompt three times (each recomputes its last block: three blocks carry its hash),
    then prompts that evict some of them, then the prompt again: it hits the first cached
    block still carrying the hash, as vLLM's map keeps them."""
    def reqs() -> list[tuple[Req, list[int]]]:
        same = [(Req(f"a{i}", [1, 2, 3, 4]), []) for i in range(3)]
        other = [(Req(f"b{i}", [7, i, 8, i]), []) for i in range(3)]
        return same + other + [(Req("a3", [1, 2, 3, 4, 5]), [])]
    for num_blocks in range(6, 12):  # 10: the first of three carriers evicted
        fast, slow = ArrayPool(num_blocks, 2), BlockCacheManager(BlockPool(num_blocks, 2))
        pairs = reqs()
        run_blocks([r for r, _ in pairs], [o for _, o in pairs], 2 * num_blocks, 2,
                   manager=slow)
        fast.replay(reqs())
        assert fast.capture() == capture(slow), num_blocks
