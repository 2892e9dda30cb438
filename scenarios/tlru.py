"""The T-LRU question: three finished conversations, one eviction, T-LRU beside LRU.

T-LRU follows SGLang 0.5.23's TLRUStrategy (radix/tree/evict_policy.py): a leaf is "TEL-safe" when,
without it, its conversation's next prefill (the branch's high-water history L less the tokens
still cached above the leaf, plus the next prompt's estimate Q) stays within `threshold`, the
TTFT budget in tokens; TEL-safe leaves count as infinitely old and go first, by LRU; then LRU.
The defaults are the example in SGLang's --radix-eviction-policy-config help (4,096 and 512):
the class's own defaults (0, 0) make T-LRU exactly LRU, and the server refuses threshold <= Q.
Leaves out: drawing and words (viz/tlru.py); the hit a next turn would get.
"""

from __future__ import annotations

from typing import NamedTuple

from radix.tree.radix_cache import RadixCache

THRESHOLD = 4_096  # TTFT budget in tokens: SGLang's help example for tlru
NEXT_PROMPT = 512  # next-prompt estimate Q in tokens: the same example
TO_FREE = 3_000  # tokens the next admission must free
SYSTEM_LEN = 512  # a system prompt S every conversation starts with
LIMIT = 1_000_000  # widgets' upper bound, tokens
# (name, tokens per turn after S), in arrival order: the first is the least recently used
CONVERSATIONS = (("chat-A", (7_488,)), ("chat-B", (700,)), ("chat-C", (3_000, 2_500)))


def check_params(threshold: int, next_prompt: int, to_free: int = TO_FREE) -> None:
    """Raises ValueError naming the field; SGLang's server refuses threshold <= Q as well."""
    for name, x in (("threshold", threshold), ("next_prompt_estimate", next_prompt)):
        if isinstance(x, bool) or not isinstance(x, int) or not 0 <= x <= LIMIT:
            raise ValueError(f"{name}: {x!r} is not an int in 0..{LIMIT:,} tokens")
    if threshold <= next_prompt:
        raise ValueError(f"threshold: {threshold:,} must exceed next_prompt_estimate "
                         f"{next_prompt:,}, as SGLang requires: otherwise no leaf is ever "
                         "TEL-safe and T-LRU is exactly LRU")
    if isinstance(to_free, bool) or not isinstance(to_free, int) or not 1 <= to_free <= 20_000:
        raise ValueError(f"to_free: {to_free!r} is not an int in 1..20,000")


def build_tree(policy: str, threshold: int = THRESHOLD,
               next_prompt: int = NEXT_PROMPT) -> tuple[RadixCache, dict[int, str]]:
    """S, then each conversation's turns inserted in order (a turn extends its own branch),
    all finished (unlocked). Returns the cache and node id -> name of each turn's node."""
    config = {"threshold": threshold, "next_prompt_estimate": next_prompt}
    cache = RadixCache(eviction_policy=policy, policy_config=config if policy == "tlru" else None)
    system = list(range(SYSTEM_LEN))
    names: dict[int, str] = {}
    for k, (name, turns) in enumerate(CONVERSATIONS):
        tokens = list(system)
        for t, n in enumerate(turns):
            base = 100_000 * (k + 1) + len(tokens)
            tokens += range(base, base + n)
            leaf = cache.insert(list(tokens), rid=name).last_node
            names[leaf.id] = f"{name} turn {t + 1}"
    return cache, names


class Leaf(NamedTuple):
    """An evictable leaf before the call, under T-LRU's rule."""

    name: str
    num_tokens: int  # the leaf's own tokens
    history_len: int  # L: the branch's high-water depth (does not shrink on eviction)
    cached_above: int  # tokens cached on the path above the leaf
    reprefill: int  # L - cached_above + Q: the next prefill if this leaf goes
    tel_safe: bool  # reprefill <= threshold (SGLang: cached_above >= L + Q - threshold)
    last_access_time: float


class TLRURun(NamedTuple):
    threshold: int
    next_prompt: int
    to_free: int
    leaves: list[Leaf]  # before the call, in LRU order (oldest first)
    lru: list[tuple[str, int]]  # (name, tokens) LRU pops, in order
    tlru: list[tuple[str, int]]  # (name, tokens) T-LRU pops, in order


def _leaves(cache: RadixCache, names: dict[int, str], threshold: int, q: int) -> list[Leaf]:
    out = []
    for n in sorted(cache.evictable_leaves, key=lambda n: (n.last_access_time, n.id)):
        above = n.tlru_cached_prefix_len - len(n.key)
        again = n.tlru_history_len - above + q
        out.append(Leaf(names.get(n.id, f"#{n.id}"), len(n.key), n.tlru_history_len, above,
                        again, again <= threshold, n.last_access_time))
    return out


def run_tlru(threshold: int = THRESHOLD, next_prompt: int = NEXT_PROMPT,
             to_free: int = TO_FREE) -> TLRURun:
    """The same tree under LRU and under T-LRU, then evict(to_free) on each.

    Defaults (4,096, Q 512; derivation in tests/scenarios/test_scenarios_tlru.py): A's 7,488-token
    leaf is the oldest, so LRU pops it; T-LRU pops the TEL-safe B (700) and C's turn 2 (2,500).
    """
    check_params(threshold, next_prompt, to_free)
    popped = {}
    leaves: list[Leaf] = []
    for policy in ("lru", "tlru"):
        cache, names = build_tree(policy, threshold, next_prompt)
        if policy == "tlru":
            leaves = _leaves(cache, names, threshold, next_prompt)
        result = cache.evict(to_free)
        cache.check_invariants()
        popped[policy] = [(names.get(n.id, f"#{n.id}"), len(n.key))
                          for n in result.evicted_nodes]
    return TLRURun(threshold, next_prompt, to_free, leaves, popped["lru"], popped["tlru"])
