"""SlotAllocator (radix/request.py): one accounting, slots named as lists of ids or as runs.

Known answers for both representations, and a property: whatever the calls, the free count
(tokens or whole pages) does not depend on how the slots are named.
"""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from radix.request import RunAllocator, SlotAllocator
from radix.tokens import TokenRuns


def test_runs_rows_continue_in_place_and_frees_are_checked():
    """Two rows of 3: the second starts GAP ids after the first, so each can grow in place;
    a double free or a free of ids never handed out raises."""
    a = SlotAllocator(20, runs=True)
    r1, r2 = a.alloc(3), a.alloc(3)
    assert r1 == TokenRuns([(1, 3)]) and r2[0] == 1 + 3 + SlotAllocator.GAP
    assert a.next_after(3, 2) == 4
    assert a.alloc_extend(r2[-1], 1) == TokenRuns([(r2[-1] + 1, 1)])
    assert a.next_after(3) is None  # 3 is no longer that row's end: 5 is
    assert a.next_after(5) == 6 and a.available_size() == 20 - 10
    a.free(TokenRuns([(1, 6)]))
    with pytest.raises(ValueError, match="not in use"):
        a.free([2])
    with pytest.raises(ValueError, match="not in use"):
        a.free([10**9])
    a.check_invariants()
    assert a.available_size() == 16 and a.alloc(17) is None and a.alloc(16) is not None


def test_paged_runs_and_ids_take_and_release_the_same_pages():
    """Page 4, 12 slots = pages 1..3. alloc(3) takes page 1 (ids 4, 5, 6: 8 free); the row
    continues with 3 more: 7 fills page 1, 8 and 9 open page 2 (4 free). Freeing slots 5 and 8
    releases pages 1 and 2 whole: 12 free again. Both namings, one count."""
    for runs in (False, True):
        a = SlotAllocator(12, page_size=4, runs=runs)
        row = a.alloc(3)
        assert list(row) == [4, 5, 6] and a.available_size() == 8
        more = a.alloc_extend(6, 3)
        assert list(more) == [7, 8, 9] and (a.available_size(), a.num_used) == (4, 8)
        a.free([5, 8])
        assert a.available_size() == 12 and a.num_used == 0
        a.check_invariants()
    assert RunAllocator(12, page_size=4).runs  # the earlier name, kept


def test_lists_of_ids_never_grow_in_place():
    """Only runs continue a row in place: with lists of ids `next_after` takes nothing."""
    a = SlotAllocator(8)
    a.alloc(3)
    assert a.next_after(3) is None and not a.can_continue(3, 1) and a.available_size() == 5


_ops = st.lists(st.tuples(st.sampled_from(["alloc", "extend", "free"]), st.integers(0, 9),
                          st.integers(0, 7)), max_size=30)


@settings(max_examples=150, deadline=None)
@given(st.sampled_from([1, 2, 4]), _ops)
def test_the_free_count_does_not_depend_on_the_naming(page, ops):
    """The same calls on both representations (rows extended at their end, freed whole): every
    answer, None or not, and every free count agree."""
    pools = [SlotAllocator(24, page_size=page, runs=runs) for runs in (False, True)]
    rows: list[list[list[int]]] = [[], []]
    for op, n, pick in ops:
        got = []
        for pool, held in zip(pools, rows):
            if op == "alloc" or not held:
                out = pool.alloc(n)
                if out is not None and n:
                    held.append(list(out))
            elif op == "extend":
                row = held[pick % len(held)]
                out = pool.alloc_extend(row[-1], n)
                if out is not None:
                    row += list(out)
            else:
                pool.free(held.pop(pick % len(held)))
                out = True
            got.append((out is None, pool.available_size(), pool.num_used))
            pool.check_invariants()
        assert got[0] == got[1]
