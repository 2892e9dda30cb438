"""The Eviction lab's T-LRU question (scenarios/tlru.py) and its words (viz/tlru.py): which leaf
each policy evicts, computed by hand from the paper's rule, and the lab's tlru settings."""

from __future__ import annotations

import pytest

import scenarios.eviction as lab
from scenarios.tlru import build_tree, check_params, run_tlru
from viz.tlru import why_line


def test_tlru_and_lru_evict_different_leaves_at_the_defaults():
    """S = 512 tokens; chat-A = S + 7,488 (one turn), chat-B = S + 700, chat-C = S + 3,000 +
    2,500 (two turns), inserted in that order, so LRU order is A, B, C's turn 2. threshold
    4,096, Q 512. A leaf is TEL-safe when L - above + Q <= threshold (SGLang: above >= L + Q -
    threshold), L the branch's history, `above` the tokens cached above the leaf:

        chat-A turn 1: L 8,000, above 512:   8,000 - 512 + 512 = 8,000 > 4,096  no
        chat-B turn 1: L 1,212, above 512:   1,212 - 512 + 512 = 1,212 <= 4,096 TEL-safe
        chat-C turn 2: L 6,012, above 3,512: 6,012 - 3,512 + 512 = 3,012 <= 4,096 TEL-safe

    evict(3,000): LRU pops the oldest leaf, chat-A (7,488 >= 3,000). T-LRU pops the TEL-safe
    ones first, oldest first: chat-B (700), chat-C turn 2 (700 + 2,500 = 3,200 >= 3,000).
    """
    run = run_tlru()
    assert [(x.name, x.history_len, x.cached_above, x.reprefill, x.tel_safe)
            for x in run.leaves] == [("chat-A turn 1", 8_000, 512, 8_000, False),
                                     ("chat-B turn 1", 1_212, 512, 1_212, True),
                                     ("chat-C turn 2", 6_012, 3_512, 3_012, True)]
    assert run.lru == [("chat-A turn 1", 7_488)]
    assert run.tlru == [("chat-B turn 1", 700), ("chat-C turn 2", 2_500)]
    why = why_line(run)
    assert "chat-B turn 1 (next prefill 1,212 <= 4,096) and chat-C turn 2" in why
    assert why.endswith("So LRU evicts chat-A turn 1 (7,488) and T-LRU chat-B turn 1 (700), "
                        "then chat-C turn 2 (2,500).")


@pytest.mark.parametrize("threshold, tlru", [
    # 3,012 > 3,000: only chat-B is TEL-safe; then LRU: chat-A
    (3_000, [("chat-B turn 1", 700), ("chat-A turn 1", 7_488)]),
    # 8,000 <= 9,000: every leaf is TEL-safe, so the order is LRU's
    (9_000, [("chat-A turn 1", 7_488)]),
    # 1,212 > 600: nothing is TEL-safe, plain LRU
    (600, [("chat-A turn 1", 7_488)]),
])
def test_the_threshold_moves_the_tel_safe_set(threshold, tlru):
    assert run_tlru(threshold, 512).tlru == tlru


def test_the_table_agrees_with_the_policys_sort_key():
    """The scenario's TEL-safe column is computed apart from the policy: it must match the
    cache's own key (-1 for TEL-safe) on every evictable leaf, for several settings."""
    for threshold, q in [(4_096, 512), (3_000, 0), (9_000, 512), (600, 512)]:
        cache, names = build_tree("tlru", threshold, q)
        safe = {names[n.id]: cache.sort_key(n)[0] == -1 for n in cache.evictable_leaves}
        assert safe == {x.name: x.tel_safe for x in run_tlru(threshold, q).leaves}


def test_bad_settings_name_the_field():
    with pytest.raises(ValueError, match="must exceed next_prompt_estimate"):
        check_params(512, 512)
    with pytest.raises(ValueError, match="next_prompt_estimate: -1"):
        check_params(4_096, -1)
    with pytest.raises(ValueError, match="to_free: 0"):
        check_params(4_096, 512, 0)


def test_the_lab_runs_tlru_with_the_given_settings():
    """The 400-conversation lab no longer runs tlru with threshold 0 (which is LRU): the cache
    gets the settings. With 4,096 / 512 every branch (at most 2,624 tokens) is TEL-safe, so
    the RAG leaf goes, as under LRU."""
    tree = lab.build_tree("tlru", tlru=(3_000, 100))
    assert tree.cache.policy_config == {"threshold": 3_000, "next_prompt_estimate": 100}
    assert lab.build_tree("tlru").cache.policy_config["threshold"] == 4_096
    assert lab.run_eviction("tlru").evicted == [(1, lab.RAG, 2_112)]
