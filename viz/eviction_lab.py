"""The eviction lab: DESIGN.md's eviction question in the radix tree, one policy at a time.

The state: a 2,112-token RAG context used by one finished request (S + RAG, unlocked), then
conversations S + 24 tokens, each locked by its running request (`inc_lock_ref`), so the
512-token system prompt S carries r = 400. `evict(300)` can only pop evictable leaves (unlocked,
no children): S is interior with live children, so every policy takes the whole RAG leaf.
Finished conversations (fewer live ones) add candidates on which the policies disagree.
Leaves out: the block cache (viz/eviction_lab_blocks.py) and the drawing's collapse
(viz/eviction_lab_draw.py).
"""

from __future__ import annotations

from typing import NamedTuple

from examples.workloads import eviction_question
from radix.tree.eventlog import EventLog
from radix.tree.eviction import POLICIES
from radix.tree.radix_cache import RadixCache

NUM_CONVERSATIONS = 400  # DESIGN.md: S is shared by 400 live conversations
TO_FREE = 300  # tokens the next admission must free
SYSTEM = "system prompt S"
RAG = "RAG context"


class Candidate(NamedTuple):
    """An evictable leaf before the call, in the policy's pop order."""

    node_id: int
    name: str
    num_tokens: int
    sort_key: object  # the policy's key: smallest goes first
    hit_count: int
    last_access_time: float
    creation_time: float
    priority: int


class EvictionRun(NamedTuple):
    log: EventLog  # the setup steps, then one `evict` step
    evict_step: int  # index of the evict step in the log
    names: dict[int, str]  # node id -> "system prompt S" | "RAG context" | "conv-007"
    conv_ids: list[int]  # node ids of the conversation leaves, in arrival order
    system_id: int  # node id of S
    candidates: list[Candidate]  # evictable leaves before the call, pop order
    evicted: list[tuple[int, str, int]]  # (node id, name, tokens) in pop order
    num_evicted: int  # tokens freed
    to_free: int
    policy: str

    @property
    def overshoot(self) -> int:
        return max(self.num_evicted - self.to_free, 0)


def check_params(policy: str, slru_threshold: int, num_live: int, to_free: int) -> None:
    """Raises ValueError naming the field when a parameter is out of range."""
    if policy not in POLICIES:
        raise ValueError(f"policy: {policy!r} is not one of {', '.join(POLICIES)}")
    if not 0 <= slru_threshold <= 1_000:
        raise ValueError(f"slru_threshold: {slru_threshold} is not in 0..1,000")
    if not 0 <= num_live <= NUM_CONVERSATIONS:
        raise ValueError(f"num_live: {num_live} is not in 0..{NUM_CONVERSATIONS}")
    if not 1 <= to_free <= 100_000:
        raise ValueError(f"to_free: {to_free} is not in 1..100,000")


def build_tree(policy: str = "lru", slru_threshold: int = 2, num_live: int = NUM_CONVERSATIONS,
               sink=None, seed: int = 0) -> tuple[RadixCache, dict[int, str], list[int]]:
    """The eviction question's tree: RAG inserted (finished), then 400 conversations inserted
    and locked; the first 400 - num_live of them have finished (unlocked) since.

    Node ids: 1 is S + RAG until conv-000 splits it: 2 becomes S (512), 1 keeps the RAG 2,112;
    conv-i's leaf is i + 3. Sizes: 512 + 2,112 + 400 x 24 = 12,224 tokens; with all 400 live
    9,600 + 512 = 10,112 are protected and the 2,112 RAG tokens are the only evictable ones.
    """
    config = {"protected_threshold": slru_threshold} if policy == "slru" else None
    cache = RadixCache(eviction_policy=policy, policy_config=config, sink=sink)
    rag, *convs = eviction_question(num_live=NUM_CONVERSATIONS, seed=seed)
    names = {cache.insert(list(rag.token_ids), rid=rag.rid).last_node.id: RAG}
    leaves = []
    for conv in convs:
        leaf = cache.insert(list(conv.token_ids), rid=conv.rid).last_node
        cache.inc_lock_ref(leaf, rid=conv.rid)
        leaves.append(leaf)
        names[leaf.id] = conv.rid
    for conv, leaf in zip(convs[: NUM_CONVERSATIONS - num_live], leaves):
        cache.dec_lock_ref(leaf, rid=conv.rid)  # finished: its tokens stay cached, unlocked
    system = next(iter(cache.root_node.children.values()))
    names[system.id] = SYSTEM
    return cache, names, [leaf.id for leaf in leaves]


def candidates(cache: RadixCache, names: dict[int, str]) -> list[Candidate]:
    """The evictable leaves in the order `evict` pops them (sort key, then node id). Reads only."""
    leaves = sorted(cache.evictable_leaves, key=lambda n: (cache.sort_key(n), n.id))
    return [Candidate(n.id, names.get(n.id, f"#{n.id}"), len(n.key), cache.sort_key(n),
                      n.hit_count, n.last_access_time, n.creation_time, n.priority)
            for n in leaves]


def run_eviction(policy: str = "lru", slru_threshold: int = 2,
                 num_live: int = NUM_CONVERSATIONS, to_free: int = TO_FREE) -> EvictionRun:
    """Builds the state with an EventLog attached and runs `evict(to_free)` as its last step.

    Default (all 400 live, any policy): the only candidate is the RAG leaf, so evict(300) pops
    it whole: 2,112 tokens freed, 2,112 - 300 = 1,812 over; S (r=400) stays.
    """
    check_params(policy, slru_threshold, num_live, to_free)
    log = EventLog(keyframe_every=64)
    cache, names, conv_ids = build_tree(policy, slru_threshold, num_live, sink=log)
    cands = candidates(cache, names)
    system_id = next(i for i, n in names.items() if n == SYSTEM)
    step = log.num_steps
    result = cache.evict(to_free)
    cache.check_invariants()
    evicted = [(n.id, names.get(n.id, f"#{n.id}"), len(n.key)) for n in result.evicted_nodes]
    return EvictionRun(log, step, names, conv_ids, system_id, cands, evicted,
                       result.num_evicted, to_free, policy)


class PolicyRow(NamedTuple):
    policy: str
    evicts: str  # what it pops, in order, in words
    num_leaves: int
    freed: int  # tokens
    overshoot: int  # freed - asked (whole nodes go)
    system_evicted: bool  # S popped (only possible once every conversation finished)
    rag_repeat_hit: int  # tokens a repeat of the RAG request would reuse afterwards


def describe(evicted: list[tuple[int, str, int]]) -> str:
    """Pop order in words; runs of conversations fold: 'conv-399 … conv-387 (13 x 24)'.

    >>> describe([(1, "RAG context", 2112)])
    'RAG context (2,112)'
    >>> describe([(5, "conv-002", 24), (4, "conv-001", 24), (1, "RAG context", 2112)])
    'conv-002 … conv-001 (2 x 24), then RAG context (2,112)'
    """
    parts: list[list[tuple[int, str, int]]] = []
    for item in evicted:
        if parts and item[1].startswith("conv-") and parts[-1][-1][1].startswith("conv-"):
            parts[-1].append(item)
        else:
            parts.append([item])
    words = []
    for run in parts:
        if len(run) == 1:
            words.append(f"{run[0][1]} ({run[0][2]:,})")
        else:
            words.append(f"{run[0][1]} … {run[-1][1]} ({len(run)} x {run[0][2]:,})")
    return ", then ".join(words) if words else "nothing"


def compare_policies(slru_threshold: int = 2, num_live: int = NUM_CONVERSATIONS,
                     to_free: int = TO_FREE) -> list[PolicyRow]:
    """One row per policy, each on a fresh tree (no event log: fast). A repeat of the RAG
    request then reuses S only (512) when the RAG leaf went, else all 2,623 it may match."""
    rows = []
    for policy in POLICIES:
        check_params(policy, slru_threshold, num_live, to_free)
        cache, names, _ = build_tree(policy, slru_threshold, num_live)
        rag_tokens = list(eviction_question(num_live=1)[0].token_ids)
        result = cache.evict(to_free)
        evicted = [(n.id, names.get(n.id, f"#{n.id}"), len(n.key)) for n in result.evicted_nodes]
        hit = min(cache.match_prefix(rag_tokens).prefix_len, len(rag_tokens) - 1)
        rows.append(PolicyRow(policy, describe(evicted), len(evicted), result.num_evicted,
                              max(result.num_evicted - to_free, 0),
                              any(name == SYSTEM for _, name, _ in evicted), hit))
    return rows

