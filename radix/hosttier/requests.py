"""One request's life through a HostTierCache, as SGLang 0.5.23's scheduler drives it: match the
prompt minus its last token, load a host hit back at admission (init_load_back), lock, allocate
the rest (evicting the device shortfall), finish as 0.5.23's release_kv_cache(checkpoint=True)
does: insert the whole sequence (duplicates freed from the locked prefix on), then the prompt
alone with priority + 1 (split off the output at the prompt boundary), unlock, free the
unaligned tail. `serve_request` returns where the prompt's
tokens came from: the device, the host (loaded back) or nowhere (computed). `admit_request` and
`finish_request` are its two halves: the engine (engine/hosttier.py) runs the model between them.
Between them, `checkpoint_request` is a chunked prefill's checkpoint (SGLang's
cache_unfinished_req, 0.5.23's `checkpoint`: insert what is computed so far, move the lock onto
the node it ends at) and `retract_request` a retraction (release_kv_cache with checkpoint=False:
nothing cached, the request's own slots freed, its lock dropped); tools/diff_sglang_hicache.py
`--lifecycle chunked` drives them interleaved beside SGLang's own `checkpoint`.

Leaves out: batching in the engine (requests run one at a time there), the admission budget
around the load (PrefillAdder.prepare_load_back and its host-locked reclaim).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import NamedTuple

from radix.hosttier.cache import HostTierCache
from radix.hosttier.node import HostInsert, HostNode
from radix.tree.key import RadixKey
from radix.tree.lifecycle import prompt_boundary_priority


class Served(NamedTuple):
    device_hit: int  # prompt tokens found on the device
    host_hit: int  # prompt tokens loaded back from the host
    miss: int  # prompt tokens computed
    admitted: bool  # False: the device could not hold the request (nothing cached)


def path_slots(node: HostNode) -> list[int]:
    """The device slots from the root to node (every node on it must be on the device)."""
    parts = []
    while node.parent is not None:
        parts.append(node.value)
        node = node.parent
    return [s for part in reversed(parts) for s in part]


def serve_request(cache: HostTierCache, prompt: Sequence[int],
                  output: Sequence[int] = (), priority: int = 0) -> Served:
    """Runs one request to completion and caches prompt + output.

    Write-through, device 8, host 17, load-back threshold 1: A = [1..6] is cached and backed
    up; B = [7..12] needs 6 slots, 2 are free, so A is demoted to host. A again: the match of
    A[:-1] splits A's host-only node 5 + 1 and finds 5 tokens on host; loading them needs 5
    slots, 2 are free, so B is demoted; the last token is computed, and its fresh slot
    restores the [6] node (DeviceRestored).
    >>> from radix.request import SlotAllocator
    >>> c = HostTierCache(SlotAllocator(8), 17, load_back_threshold=1)
    >>> a, b = list(range(1, 7)), list(range(7, 13))
    >>> serve_request(c, a), serve_request(c, b).miss, serve_request(c, a)
    (Served(device_hit=0, host_hit=0, miss=6, admitted=True), 6, \
Served(device_hit=0, host_hit=5, miss=1, admitted=True))
    """
    tokens = list(prompt) + list(output)
    adm = admit_request(cache, prompt, len(tokens), priority)
    if adm is None:
        return Served(0, 0, len(prompt), False)
    finish_request(cache, adm, tokens)
    return adm.served


class Admission(NamedTuple):
    """A request admitted by `admit_request`: its locked device prefix and fresh slots."""

    node: HostNode  # the node its device prefix ends at, locked until finish_request
    prefix: list[int]  # device slots of the prefix (hit on the device or loaded back)
    fresh: list[int]  # slots allocated for the rest of its tokens
    served: Served  # the prompt split into device hit, host hit and miss
    priority: int
    namespace: tuple[str | None, str | None] = (None, None)  # (extra_key, cache_salt)


def admit_request(cache: HostTierCache, prompt: Sequence[int], total_tokens: int,
                  priority: int = 0, namespace: tuple[str | None, str | None] = (None, None)
                  ) -> Admission | None:
    """The first half of `serve_request`: match prompt[:-1], load the host hit back, lock the
    prefix, allocate the other `total_tokens - len(prefix)` slots (evicting the device
    shortfall). None (nothing locked or taken) when the device cannot hold them. The engine
    (engine/hosttier.py) runs the model between this and `finish_request`. `namespace`:
    (extra_key, cache_salt); requests share KV only within one."""
    n_prompt = len(prompt)
    match = cache.match_prefix(RadixKey(list(prompt[: max(n_prompt - 1, 0)]), *namespace))
    loaded, node = cache.init_load_back(match)
    prefix = path_slots(node)
    cache.inc_lock_ref(node)
    alloc, ps = cache.allocator, cache.page_size
    need = total_tokens - len(prefix)
    short = -(-need // ps) * ps - alloc.available_size()
    if short > 0:
        cache.evict(short)
    fresh = alloc.alloc(need)
    if fresh is None:
        cache.dec_lock_ref(node)
        return None
    hit = min(match.device_prefix_len, n_prompt)
    host = min(loaded, n_prompt - hit)
    return Admission(node, prefix, fresh, Served(hit, host, n_prompt - hit - host, True),
                     priority, namespace)


@dataclass
class Running:
    """An admitted request between its checkpoints: SGLang's req.kv record, as far as the tree
    reads it. `row` plays its req_to_token row (tree-owned slots up to `protected`, its own
    after); `node` is the node its lock holds."""

    node: HostNode
    row: list[int]
    protected: int  # cache_protected_len: the row's prefix the tree owns
    inserted: int  # cache_inserted_len: how far its inserts have counted hits
    priority: int
    namespace: tuple[str | None, str | None]
    prompt_len: int = 0  # the prompt's tokens (origin_input_ids): where a finish splits

    @classmethod
    def admitted(cls, adm: Admission) -> Running:
        return cls(adm.node, adm.prefix + adm.fresh, len(adm.prefix), 0, adm.priority,
                   adm.namespace, sum(adm.served[:3]))


def _cache_computed(cache: HostTierCache, run: Running, tokens: Sequence[int],
                    n: int) -> HostInsert:
    """The inserts of 0.5.23's checkpoint_into_tree for tokens[:n] (n page-aligned): the tokens
    on the row's slots (duplicates from `protected` on freed, hits counted past `inserted`),
    then, where the aligned prompt ends inside them (a finish), the prompt alone with priority
    + 1 (radix/tree's `prompt_boundary_priority`, the rule the plain tree follows), from
    inserted_len = prev_prefix_len = the prompt: nothing freed, no hit, the leaf split at the
    boundary and the prompt's nodes raised. Returns the first insert's result."""
    got = cache.insert(RadixKey(list(tokens[:n]), *run.namespace), run.row[:n], run.priority,
                       inserted_len=run.inserted, prev_prefix_len=run.protected)
    run.inserted = max(run.inserted, n)
    boundary = run.prompt_len - run.prompt_len % cache.page_size
    raised = prompt_boundary_priority(boundary, n, run.priority)
    if raised is not None:
        cache.insert(RadixKey(list(tokens[:boundary]), *run.namespace), run.row[:boundary],
                     raised, inserted_len=boundary, prev_prefix_len=boundary)
    return got


def checkpoint_request(cache: HostTierCache, run: Running, tokens: Sequence[int],
                       up_to: int) -> None:
    """A chunk is computed: 0.5.23's `checkpoint(req, up_to)` (cache_unfinished_req) on the host
    tier. Caches tokens[:up_to] page-floored on the row's slots (duplicates from `protected` on
    freed, host-only nodes on the way restored with the row's slots, hits counted past
    `inserted`), points the row at the tree's slots, then moves the lock (unlock the old node,
    lock the one the insert ended at). A mid-prefill checkpoint stays inside the prompt, so
    there is no prompt-boundary split.

    >>> from radix.request import SlotAllocator
    >>> c = HostTierCache(SlotAllocator(8), 16)
    >>> adm = admit_request(c, [1, 2, 3, 4, 5], 5); run = Running.admitted(adm)
    >>> checkpoint_request(c, run, [1, 2, 3, 4, 5], 3); run.protected, c.protected_size_
    (3, 3)
    """
    n = up_to - up_to % cache.page_size
    if n <= 0:
        return
    got = _cache_computed(cache, run, tokens, n)
    owned = path_slots(got.last_node)
    run.row[run.protected:len(owned)] = owned[run.protected:]
    cache.dec_lock_ref(run.node)
    cache.inc_lock_ref(got.last_node)
    run.node, run.protected = got.last_node, len(owned)


def retract_request(cache: HostTierCache, run: Running) -> None:
    """Retraction: release_kv_cache(checkpoint=False). Nothing is cached; the row's own slots
    (past the tree-owned prefix, computed or only allocated) are freed and the lock dropped."""
    if run.protected < len(run.row):
        cache.allocator.free(run.row[run.protected:])
    cache.dec_lock_ref(run.node)


def finish_running(cache: HostTierCache, run: Running, tokens: Sequence[int]) -> None:
    """A request finishes, as 0.5.23's scheduler finishes it (release_kv_cache with
    checkpoint=True): caches `tokens` (at most len(row)) on its row from `protected` on, the
    prompt split off the output with priority + 1 (`_cache_computed`), unlocks and frees the
    slots not cached (the unaligned tail and any past len(tokens)). SGLang's checkpoint moves
    the lock onto the new last node and release drops it at once; unlocking the old node after
    the inserts leaves the same tree.

    Page 1, nothing cached, prompt [1, 2, 3] + output [7] (priority 0): the insert makes one
    node of 4, the prompt insert splits it 3 + 1 and raises the prompt's node to priority 1.
    >>> from radix.request import SlotAllocator
    >>> c = HostTierCache(SlotAllocator(8), 16); tokens = [1, 2, 3, 7]
    >>> run = Running.admitted(admit_request(c, [1, 2, 3], 4)); finish_running(c, run, tokens)
    >>> top = c.root_node.children[1]
    >>> [(n.key.token_ids, n.priority) for n in (top, top.children[7])]
    [([1, 2, 3], 1), ([7], 0)]
    """
    row = run.row
    if len(tokens) > len(row):
        raise ValueError(f"{len(tokens)} tokens to cache on {len(row)} slots")
    aligned = len(tokens) - len(tokens) % cache.page_size
    _cache_computed(cache, run, tokens, aligned)
    cache.dec_lock_ref(run.node)
    if aligned < len(row):
        cache.allocator.free(row[aligned:])


def finish_request(cache: HostTierCache, adm: Admission, tokens: Sequence[int]) -> None:
    """The second half: caches `tokens` (at most len(prefix) + len(fresh) of them) on the
    admission's slots, unlocks the prefix and frees the slots not cached (the unaligned tail
    and any fresh slot past len(tokens))."""
    finish_running(cache, Running.admitted(adm), tokens)
