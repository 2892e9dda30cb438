"""The one-rule changes `tools/diff_sglang_hybrid.py --break-rule` makes in our unified tree (not
a test): each must make the differential check fail, showing that it looks at that rule."""

from __future__ import annotations


def _no_swa_recovery() -> None:
    """An insert inside the window never recovers an SWA tombstone."""
    from radix.tree.components import swa

    swa.SWAComponent.insert_overlap = lambda self, node, m, *args: m


def _no_mamba_cow() -> None:
    """A match does not copy the node's Mamba state into the request's own slot."""
    from radix.tree import hybrid_lifecycle

    hybrid_lifecycle._copy_on_write = lambda cache, state, node: None


def _cascade_ignores_priority() -> None:
    """Tombstoning a component takes every other one on the node (MAMBA takes SWA too)."""
    from radix.tree.components.base import MAMBA, SWA
    from radix.tree.components.mamba import MambaComponent

    MambaComponent.internal_priority = SWA.value  # as high as SWA: the cascade takes it
    _ = MAMBA


def _no_swa_cascade() -> None:
    """Tombstoning SWA leaves the node's Mamba state in place."""
    from radix.tree.components.swa import SWAComponent

    SWAComponent.internal_priority = -1


def _swa_lock_node_only() -> None:
    """The SWA lock takes the node alone, not the last window of the path."""
    from radix.tree.components.swa import SWAComponent

    acquire = SWAComponent.acquire

    def node_only(self, node, receipt):
        w, self.window = self.window, 1
        try:
            return acquire(self, node, receipt)
        finally:
            self.window = w

    SWAComponent.acquire = node_only


def _swa_window_no_reset() -> None:
    """The SWA validator does not restart its count at a tombstone."""
    from radix.tree.components.base import SWA
    from radix.tree.components.swa import SWAComponent

    def validator(self):
        state = [float("inf")]

        def accepts(node) -> bool:
            if node.component_data[SWA].value is None:
                return False
            state[0] += len(node.key)
            return state[0] >= self.window

        return accepts

    SWAComponent.validator = validator


def _no_mamba_branching() -> None:
    """The match reports no mamba_branching_seqlen (no state kept at the branch point)."""
    from radix.tree.components.mamba import MambaComponent

    def finalize(self, result):
        result.mamba_branching_seqlen = None
        return result

    MambaComponent.finalize_match = finalize


def _no_path_cap() -> None:
    """mamba_max_states_per_path is ignored."""
    from radix.tree.components.mamba import MambaComponent

    MambaComponent._evict_excess_path_states = lambda self, tail: None


BREAKS = {"swa_recovery": _no_swa_recovery, "mamba_cow": _no_mamba_cow,
          "cascade_priority": _cascade_ignores_priority, "swa_cascade": _no_swa_cascade,
          "swa_window_lock": _swa_lock_node_only, "swa_validator": _swa_window_no_reset,
          "mamba_branching": _no_mamba_branching, "path_cap": _no_path_cap}
