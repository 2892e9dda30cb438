"""The rules tools/diff_vllm_hybrid.py can flip in our hybrid cache, one at a time
(--break-rule): each replaces one small piece of radix/blocks by a wrong one, and the
differential check must then find a mismatch against vLLM's own code.

  no-junction            get_computed_blocks pins no shared-prefix junction (spb always 0)
  one-pass               the coordinator stops after one pass (no fixed point)
  swa-partial-window     a sliding-window hit needs only 1 cached block, not the window's
  swa-skip-off-by-one    the sliding window frees one token too early
  mamba-dense-retention  every Mamba state is cached (the retention mask ignored)
  mamba-same-step-hits   a Mamba state cached in this step may be hit in the same step
"""

from __future__ import annotations

from radix.blocks.hybrid_coordinator import HybridKVCacheCoordinator
from radix.blocks.kv_cache_manager import KVCacheManager
from radix.blocks.mamba_manager import MambaManager
from radix.blocks.single_type import SlidingWindowManager


def _no_junction() -> None:
    original = KVCacheManager.get_computed_blocks

    def get_computed_blocks(self, req):
        hit = original(self, req)
        self.requests[req.rid].shared_prefix_boundary = 0
        return hit._replace(shared_prefix_boundary=0)

    KVCacheManager.get_computed_blocks = get_computed_blocks


def _one_pass() -> None:
    HybridKVCacheCoordinator._stop = staticmethod(lambda converged, simple: True)


def _swa_partial_window() -> None:
    SlidingWindowManager._contiguous_blocks_for_hit = staticmethod(lambda window, bs: 1)


def _swa_skip_off_by_one() -> None:
    SlidingWindowManager.get_num_skipped_tokens = (
        lambda self, n: max(0, n - self.sliding_window + 2))


def _mamba_dense_retention() -> None:
    MambaManager.reachable_block_mask = classmethod(lambda cls, *args: None)


def _mamba_same_step_hits() -> None:
    original = MambaManager.cache_blocks

    def cache_blocks(self, *args):
        original(self, *args)
        self.cached_blocks_this_step.clear()

    MambaManager.cache_blocks = cache_blocks


BREAK_RULES = {"no-junction": _no_junction, "one-pass": _one_pass,
               "swa-partial-window": _swa_partial_window,
               "swa-skip-off-by-one": _swa_skip_off_by_one,
               "mamba-dense-retention": _mamba_dense_retention,
               "mamba-same-step-hits": _mamba_same_step_hits}


def break_rule(name: str) -> None:
    BREAK_RULES[name]()
