"""AppTest for the eviction lab page: renders, steps through evict(300), shows both caches."""

from __future__ import annotations

from pathlib import Path

from streamlit.testing.v1 import AppTest

PAGE = Path(__file__).resolve().parent.parent / "pages" / "eviction.py"


def _metrics(at: AppTest) -> dict[str, str]:
    return {m.label: m.value for m in at.metric}


def _page() -> AppTest:
    return AppTest.from_file(str(PAGE), default_timeout=60).run()


def test_default_state_shows_both_caches():
    """Before the call: 2,112 evictable, 10,112 protected; vLLM takes 19 blocks (304 tokens of
    cached RAG), none unreachable; every policy row frees 2,112 with overshoot 1,812."""
    at = _page()
    assert not at.exception and not at.error
    m = _metrics(at)
    assert (m["freed so far (tokens)"], m["evictable (tokens)"], m["protected (tokens)"]) == (
        "0", "2,112", "10,112")
    assert (m["blocks taken"], m["cached tokens dropped"], m["unreachable after"]) == (
        "19", "304", "0")
    assert "system prompt S (r>0, live children) is not one" in at.info[0].value
    table = at.dataframe[-1].value
    assert list(table["policy"]) == ["lru", "mru", "fifo", "filo", "lfu", "priority", "slru"]
    assert set(table["freed"]) == {2_112} and set(table["overshoot"]) == {1_812}
    assert set(table["S evicted"]) == {"no"}
    repeat = next(md.value for md in at.markdown if "repeat of the RAG" in md.value)
    assert "reuses 512 tokens in the tree" in repeat and "2,320 in the block cache" in repeat
    assert "95.8 ms vs 13.8 ms; derived, not measured" in repeat


def test_stepping_pops_the_rag_leaf():
    """next, next: the pop frame (2,112 of 300 freed); end: the overshoot line."""
    at = _page()
    at.button(key="eviction.b_next").click().run()
    at.button(key="eviction.b_next").click().run()
    assert at.session_state["eviction.k"] == 2
    assert at.info[0].value.endswith("2,112 of 300 freed")
    assert _metrics(at)["freed so far (tokens)"] == "2,112"
    at.button(key="eviction.b_end").click().run()
    assert "overshoot 1,812" in at.info[0].value and "S stays" in at.info[0].value
    assert _metrics(at)["evictable (tokens)"] == "0"


def test_mru_with_finished_conversations():
    """392 live, MRU: conv-007 is first in policy order; vLLM's 19 blocks start with 8 partial
    unhashed blocks, so only 11 x 16 = 176 cached tokens go. Changing a setting rewinds."""
    at = _page()
    at.button(key="eviction.b_end").click().run()
    at.selectbox(key="eviction.policy").set_value("mru")
    at.slider(key="eviction.live").set_value(392).run()
    assert not at.exception
    assert at.session_state["eviction.k"] == 0
    assert "9 evictable leaves" in at.info[0].value and "First in policy order: conv-007" in \
        at.info[0].value
    assert _metrics(at)["cached tokens dropped"] == "176"
    mru = at.dataframe[-1].value.set_index("policy").loc["mru"]
    assert (mru["freed"], mru["overshoot"]) == (2_304, 2_004)


def test_title_and_errors_follow_tokens_to_free():
    """Asking 100,000: the title says so; vLLM wants 100,000 / 16 = 6,250 blocks, 132 free
    (2,112 / 16); the tree's last frame says it is 97,888 short."""
    at = _page()
    at.number_input(key="eviction.to_free").set_value(100_000).run()
    at.button(key="eviction.b_end").click().run()
    assert not at.exception
    assert at.title[0].value == "Eviction lab: 100,000 tokens must go"
    assert "Only 132 blocks are free, 6,250 wanted" in at.error[0].value
    assert "97,888 short" in at.info[0].value
