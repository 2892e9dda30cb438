"""The words of each step: what an event did to the tree, in SGLang's and vLLM's terms.

`narrate` says one micro-event given the tree just before it (a `TreeModel`, or any object with
the same `nodes`), who owns each node and the step's context (split, leaf, lock_ref, evictable,
input_len - 1, and where SGLang 0.5.23's request lifecycle differs from the seed chapter);
`named_nodes` reads the nodes a sentence names back (a fold keeps them); `node_line` says a
node's details (KV slots as slot ranges). Leaves out: the CLI demo's words (radix may not
import viz), the Live page's condensed lines (viz/live.py), a log step's narration and caption
(viz/trace.py) and the highlights (viz/roles.py).
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from radix import events as ev
from radix.tree.replay import TreeModel
from viz.flavor import split_time_note


def build_owners(steps: Iterable[Sequence[ev.Event]]) -> dict[int, str]:
    """Node id -> rid of the step that inserted it; a split's new prefix node keeps the owner.

    >>> s = [[ev.StepStarted(0, "insert", "R1"), ev.NodeInserted(1, 0, (7,), (1,), 0, 0.0)]]
    >>> build_owners(s)
    {1: 'R1'}
    """
    owners: dict[int, str] = {}
    started, inserted, split = ev.StepStarted, ev.NodeInserted, ev.NodeSplit
    for events in steps:  # exact classes (events are final), compared by identity: the hot loop
        rid = None
        for e in events:
            kind = e.__class__
            if kind is started:
                if rid is None:
                    rid = e.rid
            elif kind is inserted:
                if rid:
                    owners[e.node_id] = rid
            elif kind is split and e.node_id in owners:
                owners[e.new_node_id] = owners[e.node_id]
    return owners


def depth_tokens(model: TreeModel, node_id: int) -> int:
    """Tokens on the path from the root down to the end of `node_id`'s edge (looked up by id
    in `model.nodes` hop by hop, so a PathBefore's copies are read, not the live nodes)."""
    total, nodes = 0, model.nodes
    while node_id in nodes and node_id != 0:
        node = nodes[node_id]
        total += len(node.key)
        node_id = node.parent.id
    return total


def hops_to_root(model: TreeModel, node_id: int) -> int:
    """Nodes from `node_id` up to the root, the root excluded (a lock walk's length)."""
    n, nodes = 0, model.nodes
    while node_id in nodes and node_id != 0:
        n += 1
        node_id = nodes[node_id].parent.id
    return n


def tokens(n: int) -> str:
    """A token count with its noun: tokens(1) -> '1 token', tokens(2151) -> '2,151 tokens'."""
    return f"{n:,} token" + ("" if n == 1 else "s")


def who(rid: str | None) -> str:
    return rid or "a call"


FINISH_OPS = ("cache_finished_req", "release_kv_cache", "checkpoint", "cache_unfinished_req")


def split_line(e: ev.NodeSplit, before: Any, owners: Mapping[int, str], rid: str | None,
               key_len: int | None = None, boundary: bool = False) -> str:
    """A split, and why it happened there; `key_len` (the step's match key) explains a split
    at the key's end: SGLang matches at most input_len - 1 tokens. `boundary`: the split of a
    finish or checkpoint's second insert, at the prompt's end (`prompt_boundary`)."""
    old = before.nodes[e.node_id]
    at = depth_tokens(before, e.parent_id) + e.split_len
    owner = owners.get(e.node_id)
    rest = len(old.key) - e.split_len
    if boundary:
        return (f"{who(rid)} splits its own leaf #{e.node_id} at the prompt boundary, token "
                f"{at:,}: {e.split_len:,} prompt + {rest:,} output token{'s' * (rest != 1)} "
                f"(new prefix "
                f"#{e.new_node_id}). SGLang 0.5.23 inserts prompt + output, then the prompt "
                "alone with priority + 1, so eviction can drop the output and keep the "
                "reusable prompt; the seed chapter's cache_finished_req inserted once and "
                "kept them in one leaf" + split_time_note(e))
    whose = f"leaves {owner}" if owner and owner != rid else "leaves the cached path"
    line = (f"{who(rid)} {whose} at token {at:,}: node #{e.node_id} splits into "
            f"{e.split_len:,} + {rest:,} (new prefix #{e.new_node_id})")
    if key_len is not None and at == key_len:
        line += (f". The match asked for {tokens(key_len)}, the prompt less its last one "
                 f"(input_len - 1 = {key_len + 1:,} - 1): SGLang always computes the last prompt "
                 "token again, for its logits, so even an exact repeat splits here")
    return line + split_time_note(e)


def prompt_boundary(e: ev.Event, op: str | None, earlier: Sequence[ev.Event]) -> bool:
    """A split is the prompt-boundary split when a finish or checkpoint step makes it after
    its first insert ended (that insert's HitCounted came first): the prompt's re-insert.

    >>> split = ev.NodeSplit(1, 2, 0, 5, 0.0)
    >>> prompt_boundary(split, "cache_finished_req", [ev.HitCounted((1,), 0, True)])
    True
    >>> prompt_boundary(split, "cache_finished_req", [])  # the first insert leaving a path
    False
    """
    return (isinstance(e, ev.NodeSplit) and op in FINISH_OPS
            and any(isinstance(x, ev.HitCounted) for x in earlier))


def narrate(e: ev.Event, before: Any, owners: Mapping[int, str], rid: str | None,
            key_len: int | None = None, *, op: str | None = None,
            earlier: Sequence[ev.Event] = ()) -> str:
    """The line for event `e`, given the tree `before` it, the owners and the step's rid;
    `op` (the step's public call) and `earlier` (its micro-events before `e`) let the words
    say where SGLang 0.5.23's request lifecycle differs from the seed chapter."""
    if isinstance(e, ev.StepStarted):
        return step_line(e)
    if isinstance(e, ev.NodeSplit):
        return split_line(e, before, owners, rid, key_len, prompt_boundary(e, op, earlier))
    if isinstance(e, ev.NodeInserted):
        line = (f"{who(rid)} grows a new leaf #{e.node_id} of {tokens(len(e.token_ids))} "
                f"under #{e.parent_id}")
        if op in ("checkpoint", "cache_unfinished_req"):
            line += (". SGLang 0.5.23 checkpoints a request's prompt right after its prefill, "
                     "so requests that arrive while it decodes already hit it; the seed "
                     "chapter cached a prompt at finish (or per chunk, when chunked)")
        return line
    if isinstance(e, ev.PrefixMatched):
        if not e.node_ids:
            return (f"{who(rid)} matches 0 of {tokens(e.key_len)}: nothing below the root "
                    "starts its way")
        return (f"{who(rid)} matches {e.prefix_len:,} of {tokens(e.key_len)} "
                f"over {len(e.node_ids)} node(s) ({node_ids(e.node_ids)})")
    if isinstance(e, ev.LockChanged):
        return lock_hop_line(e, before, rid)
    if isinstance(e, ev.LeafSetChanged):
        parts = [f"+#{n}" for n in e.added] + [f"-#{n}" for n in e.removed]
        return "evictable leaves: " + " ".join(parts)
    if isinstance(e, ev.NodeEvicted):
        return (f"evict pops leaf #{e.node_id} ({tokens(e.num_tokens)}) by policy order, "
                f"sort key {e.sort_key}")
    if isinstance(e, ev.NodesTouched):
        return touched_line(e, op, earlier)
    if isinstance(e, ev.HitCounted):
        return hit_line(e)
    if isinstance(e, ev.CacheReset):
        return "reset: the tree is empty again, only the root is left"
    if isinstance(e, ev.StepEnded):
        return f"step {e.step} ends"
    if isinstance(e, ev.RequestAdmitted):
        return admitted_line(e)
    if isinstance(e, ev.RequestRetracted):
        return f"{e.rid} retracted ({e.reason}): {e.freed_slots:,} slots back to the pool"
    return type(e).__name__


def step_line(e: ev.StepStarted) -> str:
    """A step's first line; an eviction says that the allocator asks only for its shortfall.

    >>> step_line(ev.StepStarted(3, "match_prefix", "R2", "key of 10 tokens"))
    'step 3: R2 calls match_prefix (key of 10 tokens)'
    """
    detail = f" ({e.detail})" if e.detail else ""
    who = f"{e.rid} calls " if e.rid else ""
    line = f"step {e.step}: {who}{e.op}{detail}"
    if e.op == "evict":
        line += (": when allocation calls it, only the shortfall (tokens wanted - free slots): "
                 "SGLang 0.5.23 evicts what the allocator lacks, where the seed chapter "
                 "evicted all the tokens wanted")
    return line


def node_ids(ids: Sequence[int], most: int = 6) -> str:
    """Nodes by their ids as the tree view labels them ("root" for node 0), the first `most`.

    >>> node_ids([0, 2, 5]), node_ids(range(1, 10), most=3)
    ('root, #2, #5', '#1, #2, #3 and 6 more')
    """
    shown = ", ".join("root" if i == 0 else f"#{i}" for i in list(ids)[:most])
    return shown + (f" and {len(ids) - most:,} more" if len(ids) > most else "")


NAMED = re.compile(r"#(\d+)|\bnode (\d+)\b|\b(root)\b")


def named_nodes(text: str) -> set[int]:
    """The node ids a sentence names ("#6", "node 6", "root" as 0), for the fold to keep.

    >>> sorted(named_nodes("step 22: u000-t5 calls inc_lock_ref (node 6)"))
    [6]
    >>> sorted(named_nodes("the walk writes t=4 to root, #2 and #5"))
    [0, 2, 5]
    """
    return {0 if m.group(3) else int(m.group(1) or m.group(2)) for m in NAMED.finditer(text)}


def touched_line(e: ev.NodesTouched, op: str | None = None,
                 earlier: Sequence[ev.Event] = ()) -> str:
    """The access time a walk writes, on the nodes it names. A split's own stamp (SGLang
    0.5.23's unified cache gives a split's lower half a clock read of its own, after the walk
    read its time) says so; the walk's time after it says why it is older.

    >>> split = ev.NodeSplit(1, 2, 0, 5, 5.0, 3.0)
    >>> touched_line(ev.NodesTouched((1,), 6.0), "match_prefix", [split])[:56]
    '#1 gets last access time t=6: the split stamps its lower'
    >>> touched_line(ev.NodesTouched((0,), 4.0), "match_prefix",
    ...              [split, ev.NodesTouched((1,), 6.0)])[:60]
    "the match's walk writes last access time t=4 to root: the ti"
    """
    names, t = node_ids(e.node_ids), f"t={e.time:g}"
    if (len(e.node_ids) == 1 and earlier and isinstance(earlier[-1], ev.NodeSplit)
            and earlier[-1].node_id == e.node_ids[0]):
        return (f"{names} gets last access time {t}: the split stamps its lower half with a "
                "clock read of its own (SGLang 0.5.23's unified cache), taken after the walk "
                "read the time it writes to the path next")
    later = max((x.time for x in earlier if isinstance(x, ev.NodesTouched)), default=None)
    walk = {"insert": "the insert's walk", "match_prefix": "the match's walk"}.get(op, "the walk")
    if later is not None and later > e.time:
        return (f"{walk} writes last access time {t} to {names}: the time it read when it "
                f"began, before the split's t={later:g}")
    return f"{walk} writes last access time {t} to {names} (what LRU evicts by)"


def hit_line(e: ev.HitCounted) -> str:
    """An insert's hit counting: once per request and node (SGLang 0.5.23's inserted_len).

    >>> hit_line(ev.HitCounted((4, 7, 9), 1, True, 2))[:56]
    'hit_count +1 on 1 of 3 node(s) (#4, #7, #9), priority 1:'
    """
    n, first = len(e.node_ids), e.first_counted
    if not e.counted:
        return (f"priority {e.priority} on {n} node(s) ({node_ids(e.node_ids)}), no hit "
                "counted: every node ends within what this request inserted before (SGLang "
                "0.5.23 counts a request's hit on a node once, by its inserted_len; the seed "
                "chapter skipped chunked inserts)")
    line = (f"hit_count +1 on {n - first} of {n} node(s) ({node_ids(e.node_ids)}), "
            f"priority {e.priority}")
    if first:
        line += (f": the first {first} end within what this request inserted before, and "
                 "SGLang 0.5.23 counts a request's hit on a node once (inserted_len)")
    return line


def lock_hop_line(e: ev.LockChanged, before: Any, rid: str | None) -> str:
    """One hop of a lock walk: the node, its lock_ref before -> after, tokens moved, and the
    hops left to the root."""
    verb = "locks" if e.delta > 0 else "unlocks"
    moved = ""
    if e.size_moved:
        src, dst = ("evictable", "protected") if e.delta > 0 else ("protected", "evictable")
        moved = f"; its {tokens(e.size_moved)} move {src} → {dst}"
    left = hops_to_root(before, e.node_id) - 1
    where = "the last hop below the root" if left == 0 else f"{left} more hop(s) to the root"
    return (f"{who(rid)} {verb} #{e.node_id}: lock_ref {e.lock_ref - e.delta} → "
            f"{e.lock_ref}{moved} ({where})")


def admitted_line(e: ev.RequestAdmitted) -> str:
    """An admission in words.

    >>> admitted_line(ev.RequestAdmitted("req-2", 300, 12, False, 4000))
    'req-2 admitted: 300 tokens from the tree, 12 to prefill'
    """
    more = " (chunked: more next round)" if e.chunked else ""
    return (f"{e.rid} admitted: {tokens(e.prefix_len)} from the tree, "
            f"{e.extend_len:,} to prefill{more}")


def slot_ranges(slot_ids: Sequence[int], max_runs: int = 4) -> str:
    """KV slots as runs: [5, 6, 7, 9] -> '5..7, 9' (4 slots)."""
    runs: list[list[int]] = []
    for s in slot_ids:
        if runs and s == runs[-1][1] + 1:
            runs[-1][1] = s
        else:
            runs.append([s, s])
    parts = [f"{a:,}" if a == b else f"{a:,}..{b:,}" for a, b in runs[:max_runs]]
    more = f", … {len(runs) - max_runs:,} more runs" if len(runs) > max_runs else ""
    return ", ".join(parts) + more + f" ({len(slot_ids):,} slots)"


def node_line(node: Any, owner: str | None = None) -> str:
    """A node's details: tokens, KV slots (as slot ranges: a slot is a place in the KV pool,
    not a token id), lock_ref, hits, times, priority."""
    who = f" (inserted by {owner})" if owner else ""
    return (f"Node #{node.id}{who}: {tokens(len(node.token_ids))}, first ids "
            f"{list(node.token_ids[:6])}; KV slots {slot_ranges(node.slot_ids)}; lock_ref "
            f"{node.lock_ref}, hit_count {node.hit_count}, created t={node.creation_time:g}, last "
            f"access t={node.last_access_time:g}, priority {node.priority}")
