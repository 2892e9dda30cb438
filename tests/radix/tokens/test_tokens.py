"""TokenRuns and RunList against plain lists (a model test), the tree over compact keys against
the tree over the same ints as lists."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from radix.tokens import RunList, TokenRuns, common_prefix, common_prefix_from, joined
from radix.tree.key import RadixKey
from radix.tree.radix_cache import RadixCache

runs = st.lists(st.tuples(st.integers(-5, 40), st.integers(0, 6)), max_size=6)


@given(runs, runs, st.integers(-12, 30), st.integers(-12, 30))
def test_tokenruns_behave_like_the_list_of_their_ints(a, b, i, j):
    x, y = TokenRuns(a), TokenRuns(b)
    lx, ly = [s + k for s, n in a for k in range(n)], [s + k for s, n in b for k in range(n)]
    assert list(x) == lx and len(x) == len(lx)
    assert list(x[i:j]) == lx[i:j] and x[i:j] == lx[i:j]
    if -len(lx) <= i < len(lx):
        assert x[i] == lx[i]
    assert (x == y) == (lx == ly) and (x == ly) == (lx == ly)
    if lx == ly:
        assert hash(x) == hash(y)
    assert list(x + y) == lx + ly and list(ly + x) == ly + lx
    assert list(TokenRuns.concat([x, ly, y])) == lx + ly + ly
    cp = next((k for k, (p, q) in enumerate(zip(lx, ly)) if p != q), min(len(lx), len(ly)))
    assert x.common_prefix_len(y) == common_prefix(lx, y) == common_prefix(lx, ly) == cp
    lo, hi = sorted((abs(i), abs(j)))
    assert common_prefix_from(x, y, lo, hi) == common_prefix(lx[lo:hi], ly[lo:hi])
    assert TokenRuns.from_ids(lx) == x and x.num_runs <= len(a)


@given(runs, st.lists(st.tuples(st.sampled_from(["append", "extend", "set", "run"]),
                                st.integers(0, 30), st.integers(0, 5)), max_size=12))
def test_runlist_mutations_follow_a_list(a, ops):
    r, model = RunList(a), [s + k for s, n in a for k in range(n)]
    for op, v, n in ops:
        if op == "append":
            r.append(v)
            model.append(v)
        elif op == "extend":
            r.extend(range(v, v + n))
            model.extend(range(v, v + n))
        elif op == "run":
            r.extend_run(v, n)
            model.extend(range(v, v + n))
        else:
            lo, hi = sorted((v % (len(model) + 1), n))
            r[lo:hi] = [v, v + 1]
            model[lo:hi] = [v, v + 1]
        assert list(r) == model and r == TokenRuns.from_ids(model)
    with pytest.raises(TypeError):
        hash(r)
    assert isinstance(joined([], TokenRuns([(3, 2)])), RunList)
    assert isinstance([1] + TokenRuns([(3, 2)]), RunList)


@settings(max_examples=60, deadline=None)
@given(st.lists(st.lists(st.tuples(st.integers(0, 3), st.integers(1, 20)), min_size=1,
                         max_size=4), min_size=1, max_size=8), st.sampled_from([1, 4]))
def test_the_tree_over_compact_keys_equals_the_tree_over_lists(prompts, page):
    """The same inserts and matches with TokenRuns keys and with list keys: the same matches,
    and the same tree (keys as lists)."""
    compact, plain = RadixCache(page_size=page), RadixCache(page_size=page)
    for spans in prompts:
        t = TokenRuns((s * 100, n) for s, n in spans)
        assert (compact.match_prefix(RadixKey(t)).prefix_len
                == plain.match_prefix(RadixKey(list(t))).prefix_len)
        assert compact.insert(RadixKey(t)).prefix_len == plain.insert(RadixKey(list(t))).prefix_len
    a, b = compact.snapshot().nodes, plain.snapshot().nodes
    assert [(n.id, list(n.token_ids), list(n.slot_ids)) for n in a] == [
        (n.id, list(n.token_ids), list(n.slot_ids)) for n in b]
    compact.check_invariants()


@settings(max_examples=300, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 40), st.integers(1, 6)), max_size=6),
       st.lists(st.tuples(st.integers(0, 40), st.integers(1, 6)), max_size=4),
       st.integers(-2, 30), st.integers(1, 5))
def test_matches_at_and_values_at_are_the_slice_compare(runs, other_runs, pos, n):
    """The tree walk's in-place compare and paged child key against building the slice."""
    t, other = TokenRuns(runs), TokenRuns(other_runs)
    ids, oids = list(t), list(other)
    expect = 0 <= pos and pos + len(oids) <= len(ids) and ids[pos:pos + len(oids)] == oids
    assert t.matches_at(pos, other) == expect
    if 0 <= pos <= len(ids) - n:
        assert t.values_at(pos, n) == tuple(ids[pos:pos + n])
    # a slice of t itself always matches where it was cut
    if 0 <= pos <= len(ids):
        assert t.matches_at(pos, t[pos:pos + n])
@given(st.lists(st.integers(0, 3), max_size=12), st.lists(st.integers(0, 3), max_size=12))
def test_prefix_probe_answers_as_a_slice_compare(edge, rest):
    """PrefixProbe.starts_with(tok, guard(edge)) == (tok[:len(edge)] == edge) for len(tok) >
    len(edge), with big ints built anew (equal values, other objects: no identity shortcut)."""
    from radix.tokens.runs import PrefixProbe

    probe = PrefixProbe()
    tok = [int(str(10**20 + t)) for t in edge[: len(rest)] + rest] + [5]
    big_edge = [10**20 + t for t in edge]
    if len(tok) > len(big_edge):
        assert probe.starts_with(tok, probe.guard(big_edge)) == (tok[:len(edge)] == big_edge)


def test_assigning_the_ints_a_run_list_holds_keeps_it_as_it_is():
    """A checkpoint assigns a row the tree's slots, mostly the very ints it holds: that is no
    rebuild of the row (its run lists stay the same objects); other ints still go in, and a
    prompt with no output yet plus nothing is the prompt itself (immutable: no copy)."""
    r = RunList([(0, 5), (100, 3)])
    starts, ends = r._starts, r._ends
    r[2:6] = TokenRuns([(2, 3), (100, 1)])
    assert r._starts is starts and r._ends is ends and list(r) == [0, 1, 2, 3, 4, 100, 101, 102]
    r[2:4] = TokenRuns([(7, 2)])
    assert list(r) == [0, 1, 7, 8, 4, 100, 101, 102]
    r[8:8] = TokenRuns([])
    assert len(r) == 8
    t = TokenRuns([(5, 4)])
    assert t + [] is t and t + RunList() is t and t + TokenRuns() is t
    grown = RunList([(5, 4)]) + []
    assert type(grown) is RunList and grown is not t and list(grown) == [5, 6, 7, 8]


@settings(max_examples=80, deadline=None)
@given(st.lists(st.tuples(st.lists(st.tuples(st.integers(0, 3), st.integers(1, 9)), min_size=1,
                                   max_size=3), st.integers(0, 20), st.sampled_from([None, "b"])),
                min_size=1, max_size=8), st.sampled_from([1, 2, 4]))
def test_the_prefix_trie_over_runs_walks_as_over_lists(prompts, unit):
    """PrefixTrie's walks of compact tokens (an inlined loop over the runs) and of the same ints
    as lists: the same pieces, nodes and lengths. Each sequence is a cut of the one before plus
    runs of its own (so children hang inside runs); every third grows the one before under the
    same owner, its walk resumed. "mixed" files every other sequence as a list and walks runs
    (the loop's fallback for nodes over plain lists)."""
    from radix.tokens.runs import PrefixTrie

    def shape(walk):
        return [(n.d0, n.d1, lo, hi) for n, lo, hi in walk.pieces], walk.pos

    tries = {kind: PrefixTrie(unit) for kind in ("runs", "list", "mixed")}
    last: dict = {}
    t, last_ns = TokenRuns(), None
    for k, (spans, cut, ns) in enumerate(prompts):
        grows = k % 3 == 2  # extends the one before (same owner, its walk resumed)
        more = TokenRuns((s * 10 + k % 2, n) for s, n in spans)
        t, ns = (t + more, last_ns) if grows else (t[:cut] + more, ns)
        seqs = {"runs": t, "list": list(t), "mixed": list(t) if k % 2 and not grows else t}
        limit = len(t) // unit
        got = {kind: (tries[kind].known(t if kind == "mixed" else seqs[kind], ns, limit),
                      shape(tries[kind].walk(seqs[kind], ns, limit // 2 + 1)))
               for kind in tries}
        assert got["runs"] == got["list"] == got["mixed"]
        walks = {kind: tries[kind].insert(seqs[kind], ns, limit, ns or "-",
                                          last.get(kind) if grows else None) for kind in tries}
        assert shape(walks["runs"]) == shape(walks["list"]) == shape(walks["mixed"])
        last, last_ns = walks, ns
