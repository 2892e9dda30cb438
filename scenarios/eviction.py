"""The eviction question, in the radix tree (each of the eight policies) and in vLLM's block cache.

The state (DESIGN.md): a 512-token system prompt S shared by 400 conversations (S + 24 tokens
each; live ones hold a lock, so S carries r = number live) and a 2,112-token RAG context (S + RAG)
left by finished requests. The next admission must free `to_free` tokens. `evict` can only pop
evictable leaves (unlocked, no children): S is interior while any conversation is cached.
The lab's default also lets the policies disagree: 16 conversations have finished (unlocked,
still cached) and the RAG context was read by two requests (hit_count 2) of priority 1, so LRU
and FIFO pop the RAG leaf, LFU, priority and SLRU the least used conversations, MRU and FILO the
newest ones. The block side runs the same requests through BlockCacheManager (16-token blocks).
Leaves out: drawing and words (viz/eviction.py).
"""

from __future__ import annotations

from typing import NamedTuple

from examples.workloads import SYSTEM_LEN, eviction_question
from radix.blocks.manager import BlockCacheManager
from radix.blocks.pool import BlockPool
from radix.blocks.snapshot import BlockPoolSnapshot, unreachable_block_ids
from radix.request import Req
from radix.tree.evict_policy import POLICIES
from radix.tree.radix_cache import RadixCache
from radix.tree.replay import EventLog
from scenarios.tlru import NEXT_PROMPT, THRESHOLD

NUM_CONVERSATIONS = 400  # DESIGN.md: S is shared by 400 conversations
TO_FREE = 300  # tokens the next admission must free
SYSTEM = "system prompt S"
RAG = "RAG context"
BLOCK_SIZE = 16  # vLLM's default
TLRU = (THRESHOLD, NEXT_PROMPT)  # T-LRU's threshold and next-prompt estimate (scenarios/tlru.py)


class LabState(NamedTuple):
    """The cache before the call."""

    num_live: int  # conversations still running (locked); the oldest others finished
    rag_reads: int  # requests that read the RAG context (1 or 2): its leaf's hit_count
    rag_priority: int  # priority of the RAG requests (conversations have 0)


DEFAULT = LabState(NUM_CONVERSATIONS - 16, 2, 1)  # the policies disagree
DESIGN_QUESTION = LabState(NUM_CONVERSATIONS, 1, 0)  # DESIGN.md's question as stated


def check_params(policy: str, slru_threshold: int, state: LabState, to_free: int) -> None:
    """Raises ValueError naming the field when a parameter is out of range."""
    if policy not in POLICIES:
        raise ValueError(f"policy: {policy!r} is not one of {', '.join(POLICIES)}")
    if not 0 <= slru_threshold <= 1_000:
        raise ValueError(f"slru_threshold: {slru_threshold} is not in 0..1,000")
    if not 0 <= state.num_live <= NUM_CONVERSATIONS:
        raise ValueError(f"num_live: {state.num_live} is not in 0..{NUM_CONVERSATIONS}")
    if state.rag_reads not in (1, 2):
        raise ValueError(f"rag_reads: {state.rag_reads} is not 1 or 2")
    if not 0 <= state.rag_priority <= 100:
        raise ValueError(f"rag_priority: {state.rag_priority} is not in 0..100")
    if not 1 <= to_free <= 100_000:
        raise ValueError(f"to_free: {to_free} is not in 1..100,000")


class LabTree(NamedTuple):
    cache: RadixCache
    names: dict[int, str]  # node id -> "system prompt S" | "RAG context" | "conv-007"
    conv_ids: list[int]  # node ids of the conversation leaves, in arrival order
    system_id: int  # node id of S


def build_tree(policy: str = "lru", slru_threshold: int = 2, state: LabState = DEFAULT,
               sink=None, seed: int = 0, tlru: tuple[int, int] = TLRU) -> LabTree:
    """RAG inserted (read once or twice), then 400 conversations inserted and locked; the
    first 400 - num_live of them have finished (unlocked) since.

    Node ids: 1 is S + RAG until conv-000 splits it: 2 becomes S (512), 1 keeps the RAG 2,112;
    conv-i's leaf is i + 3. Sizes: 512 + 2,112 + 400 x 24 = 12,224 tokens; with all 400 live
    9,600 + 512 = 10,112 are protected and the 2,112 RAG tokens are the only evictable ones.
    subtle: under T-LRU with the default (4,096, 512) every branch here (at most 2,624 tokens)
    is shorter than 4,096 - 512, so every leaf is TEL-safe and T-LRU pops what LRU pops.
    """
    config = {"protected_threshold": slru_threshold} if policy == "slru" else None
    if policy == "tlru":
        config = {"threshold": tlru[0], "next_prompt_estimate": tlru[1]}
    cache = RadixCache(eviction_policy=policy, policy_config=config, sink=sink)
    rag, *convs = eviction_question(num_live=NUM_CONVERSATIONS, seed=seed)
    for i in range(state.rag_reads):
        leaf = cache.insert(list(rag.token_ids), rid=f"rag-{i}",
                            priority=state.rag_priority).last_node
    names = {leaf.id: RAG}
    leaves = []
    for conv in convs:
        leaf = cache.insert(list(conv.token_ids), rid=conv.rid).last_node
        cache.inc_lock_ref(leaf, rid=conv.rid)
        leaves.append(leaf)
        names[leaf.id] = conv.rid
    for conv, leaf in zip(convs[: NUM_CONVERSATIONS - state.num_live], leaves):
        cache.dec_lock_ref(leaf, rid=conv.rid)  # finished: its tokens stay cached, unlocked
    system = next(iter(cache.root_node.children.values()))
    names[system.id] = SYSTEM
    return LabTree(cache, names, [leaf.id for leaf in leaves], system.id)


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


def candidates(lab: LabTree) -> list[Candidate]:
    """The evictable leaves in the order `evict` pops them (sort key, then node id). Reads only."""
    cache = lab.cache
    leaves = sorted(cache.evictable_leaves, key=lambda n: (cache.sort_key(n), n.id))
    return [Candidate(n.id, lab.names.get(n.id, f"#{n.id}"), len(n.key), cache.sort_key(n),
                      n.hit_count, n.last_access_time, n.creation_time, n.priority)
            for n in leaves]


class EvictionRun(NamedTuple):
    log: EventLog  # the setup steps, then one `evict` step
    evict_step: int  # index of the evict step in the log
    names: dict[int, str]
    conv_ids: list[int]
    system_id: int
    candidates: list[Candidate]  # evictable leaves before the call, pop order
    evicted: list[tuple[int, str, int]]  # (node id, name, tokens) in pop order
    num_evicted: int  # tokens freed
    to_free: int
    policy: str
    state: LabState
    flavor: str = "unified"  # the tree's flavor (radix/tree/unified.py: split_times)

    @property
    def overshoot(self) -> int:
        return max(self.num_evicted - self.to_free, 0)


def run_eviction(policy: str = "lru", slru_threshold: int = 2, state: LabState = DEFAULT,
                 to_free: int = TO_FREE, tlru: tuple[int, int] = TLRU) -> EvictionRun:
    """Builds the state with an EventLog attached and runs `evict(to_free)` as its last step.

    DESIGN.md's question (all 400 live), any policy: the only candidate is the RAG leaf, so
    evict(300) pops it whole: 2,112 tokens freed, 2,112 - 300 = 1,812 over; S (r=400) stays.
    """
    check_params(policy, slru_threshold, state, to_free)
    log = EventLog(keyframe_every=64)
    lab = build_tree(policy, slru_threshold, state, sink=log, tlru=tlru)
    cands = candidates(lab)
    step = log.num_steps
    result = lab.cache.evict(to_free)
    lab.cache.check_invariants()
    evicted = [(n.id, lab.names.get(n.id, f"#{n.id}"), len(n.key)) for n in result.evicted_nodes]
    return EvictionRun(log, step, lab.names, lab.conv_ids, lab.system_id, cands, evicted,
                       result.num_evicted, to_free, policy, state, lab.cache.flavor)


class PolicyRow(NamedTuple):
    policy: str
    evicted: list[tuple[int, str, int]]  # (node id, name, tokens) in pop order
    freed: int  # tokens
    overshoot: int  # freed - asked (whole nodes go)
    system_evicted: bool  # S popped (only possible once every conversation finished)
    rag_repeat_hit: int  # tokens a repeat of the RAG request would reuse afterwards


def compare_policies(slru_threshold: int = 2, state: LabState = DEFAULT,
                     to_free: int = TO_FREE, tlru: tuple[int, int] = TLRU) -> list[PolicyRow]:
    """One row per policy, each on a fresh tree (no event log: fast). A repeat of the RAG
    request then reuses S only (512) when the RAG leaf went, else the 2,623 it may match
    (input_len - 1)."""
    rows = []
    rag_tokens = list(eviction_question(num_live=1)[0].token_ids)
    for policy in POLICIES:
        check_params(policy, slru_threshold, state, to_free)
        lab = build_tree(policy, slru_threshold, state, tlru=tlru)
        result = lab.cache.evict(to_free)
        evicted = [(n.id, lab.names.get(n.id, f"#{n.id}"), len(n.key))
                   for n in result.evicted_nodes]
        hit = lab.cache.match_prefix(rag_tokens[:-1]).prefix_len
        rows.append(PolicyRow(policy, evicted, result.num_evicted,
                              max(result.num_evicted - to_free, 0),
                              any(i == lab.system_id for i, _, _ in evicted), hit))
    return rows


# --- vLLM's block cache ---------------------------------------------------------------------


class QueueEntry(NamedTuple):
    pos: int  # place in the free queue (0 = taken first)
    block_id: int
    holds: str  # what the block caches, in words
    cached: bool  # carries a hash (taking it evicts cached KV)


class BlockEviction(NamedTuple):
    queue: list[QueueEntry]  # the free queue before the new request, head first
    num_wanted: int  # blocks the new request asks for: ceil(to_free / 16)
    num_needed: int  # blocks it takes: num_wanted, or the whole queue when that is shorter
    victims: list[QueueEntry]  # queue[:num_needed]
    cached_tokens_dropped: int  # 16 per cached victim
    unreachable_after: list[int]  # cached block ids no lookup can reach afterwards
    rag_repeat_hit: int  # tokens a repeat of the RAG request would reuse afterwards
    before: BlockPoolSnapshot
    after: BlockPoolSnapshot
    labels: dict[int, str]  # block id -> what it holds
    num_blocks: int  # the pool (without the null block)
    num_running: int  # requests holding blocks when the new one arrives


def _blocks(n: int) -> int:
    return -(-n // BLOCK_SIZE)


def _label(rid: str, pos: int, num_tokens: int) -> str:
    if pos < SYSTEM_LEN // BLOCK_SIZE:
        return f"S block {pos}"
    if rid.startswith("rag"):
        return f"RAG block {pos}"
    full = (pos + 1) * BLOCK_SIZE <= num_tokens
    return f"{rid} block {pos}" + ("" if full else " (partial, not cached)")


def run_block_eviction(state: LabState = DEFAULT, to_free: int = TO_FREE,
                       seed: int = 0) -> BlockEviction:
    """The free queue, the victims and the damage. All 400 live, RAG read once: the queue holds
    RAG blocks 163, 162, ..., 32 (132 blocks; S's 32 are in use); 19 go: RAG blocks 163..145
    (304 tokens). No block is left unreachable (the chain is eaten from its tail) and a repeat
    of the RAG request still reuses blocks 0..144: 145 x 16 = 2,320 tokens.
    """
    rag, *convs = eviction_question(num_live=NUM_CONVERSATIONS, seed=seed)
    rags = [Req(f"rag-{i}", list(rag.token_ids), max_new_tokens=1)
            for i in range(state.rag_reads)]
    reqs = [Req(c.rid, list(c.token_ids), max_new_tokens=c.output_len) for c in convs]
    shared = SYSTEM_LEN // BLOCK_SIZE
    num_blocks = _blocks(len(rag.token_ids)) + sum(
        _blocks(len(r.origin_input_ids)) - shared for r in reqs)
    m = BlockCacheManager(BlockPool(num_blocks + 1, BLOCK_SIZE))
    labels: dict[int, str] = {}
    for req in rags + reqs:
        hit = m.get_computed_blocks(req)
        m.allocate_slots(req, len(req.origin_input_ids) - hit.num_computed_tokens, hit)
        for pos, block in enumerate(m.requests[req.rid].blocks):
            labels.setdefault(block.block_id, _label(req.rid, pos, len(req.origin_input_ids)))
        if req in rags:
            m.free(req)  # the RAG requests finished before the conversations arrived
    for req in reqs[: NUM_CONVERSATIONS - state.num_live]:
        m.free(req)  # finished conversations, oldest first
    before = m.snapshot()
    queue = [QueueEntry(i, b.block_id, labels[b.block_id], b.block_hash is not None)
             for i, b in enumerate(m.pool.free_block_queue)]
    need = min(_blocks(to_free), len(queue))  # more would fail: vLLM cannot admit it
    victims = queue[:need]
    m.pool.get_new_blocks(need)  # lazy eviction: the popped blocks' hashes go now
    after = m.snapshot()
    again = Req("rag-again", list(rag.token_ids))
    hit = m.get_computed_blocks(again).num_computed_tokens
    m.requests.pop("rag-again", None)  # a lookup only: it holds no blocks
    dropped = BLOCK_SIZE * sum(v.cached for v in victims)
    return BlockEviction(queue, _blocks(to_free), need, victims, dropped,
                         unreachable_block_ids(m.pool), hit, before, after, labels, num_blocks,
                         len(m.requests))
