"""SGLang's flags for a hybrid tree: the strategy's resolution, the pool split, and clear errors
for settings SGLang refuses (radix/tree/hybrid_args.py)."""

from __future__ import annotations

import pytest

from radix.tree.components.base import MAMBA, SWA
from radix.tree.hybrid_args import HybridServerArgs, HybridShape, build_hybrid_cache, pool_sizes

QWEN35 = HybridShape(has_mamba=True, mamba_state_bytes=2**20)


@pytest.mark.parametrize("kwargs,field", [
    (dict(mamba_radix_cache_strategy="buffered"), "mamba_radix_cache_strategy"),
    (dict(swa_full_tokens_ratio=1.5), "swa_full_tokens_ratio"),
    (dict(mamba_max_states_per_path=0), "mamba_max_states_per_path"),
])
def test_a_bad_flag_is_named(kwargs, field):
    with pytest.raises(ValueError, match=field):
        HybridServerArgs(**kwargs)


def test_no_buffer_needs_page_1_and_no_overlap():
    """SGLang asserts both (mamba_hook.py validate_mamba_no_buffer)."""
    with pytest.raises(ValueError, match="page_size 1"):
        HybridServerArgs(mamba_radix_cache_strategy="no_buffer", page_size=16,
                         disable_overlap_schedule=True).resolved(QWEN35)
    with pytest.raises(ValueError, match="overlap"):
        HybridServerArgs(mamba_radix_cache_strategy="no_buffer").resolved(QWEN35)


def test_auto_with_pages_keeps_the_extra_buffer_even_without_overlap():
    args = HybridServerArgs(page_size=64, disable_overlap_schedule=True).resolved(QWEN35)
    assert args.mamba_radix_cache_strategy == "extra_buffer"


def test_swa_pool_is_the_ratio_of_the_full_pool():
    """A budget of 1 GiB at 64 KiB (full) + 0.5 * 32 KiB (SWA) per token: 13,107 full tokens
    (page 16: 13,104) and 0.5 of them for SWA, 6,552, page-aligned: 6,544."""
    shape = HybridShape(sliding_window=128, full_kv_bytes_per_token=2**16,
                        swa_kv_bytes_per_token=2**15)
    args = HybridServerArgs(page_size=16, swa_full_tokens_ratio=0.5)
    assert pool_sizes(shape, args, 1 << 30) == (13_104, 6_544, 0)
    cache, knobs = build_hybrid_cache(shape, args, 1 << 30)
    assert SWA in cache.components and MAMBA not in cache.components
    assert (cache.allocator.full.size, cache.allocator.swa.size) == (13_104, 6_544)
    assert knobs.enable_overlap_schedule
