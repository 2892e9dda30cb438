"""Events: the replay law, the event log's scrubbing, no cost without a sink, and layering."""

from __future__ import annotations

import subprocess
import sys

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from radix import events as ev
from radix.runs.ops import OpRunner
from radix.traces.ops import Op, OpTrace
from radix.tree.evict_policy import POLICIES
from radix.tree.radix_cache import RadixCache
from radix.tree.replay import EventLog, TreeModel

op_st = st.one_of(
    st.tuples(st.just("start"), st.lists(st.integers(0, 2), min_size=1, max_size=16)),
    st.tuples(st.just("step"), st.integers(0, 9)),
    st.tuples(st.just("evict"), st.integers(0, 12)),
    st.tuples(st.just("insert"), st.lists(st.integers(0, 2), max_size=12), st.integers(0, 3)),
)


def drive(runner: OpRunner, ops) -> None:
    """Random request lifecycles: start, then each 'step' moves one request one stage on."""
    for i, op in enumerate(ops):
        try:
            if op[0] == "start":
                runner.num_started = getattr(runner, "num_started", 0) + 1
                runner.run(Op(i, "start", {"rid": f"r{runner.num_started}", "tokens": op[1]}))
            elif op[0] == "evict":
                runner.run(Op(i, "evict", {"num_tokens": op[1]}))
            elif op[0] == "insert":
                runner.run(Op(i, "insert", {"tokens": op[1], "priority": op[2]}))
            elif runner.reqs:
                rid = sorted(runner.reqs)[op[1] % len(runner.reqs)]
                req = runner.reqs[rid]
                if len(req.slot_ids) < len(req.origin_input_ids):
                    runner.run(Op(i, "extend", {"rid": rid}))
                    if op[1] % 2:  # else it finishes with no checkpoint after prefill: the
                        # prompt boundary falls inside the new leaf, which the checkpoint splits
                        runner.run(Op(i, "unfinished", {"rid": rid}))
                elif len(req.output_ids) < 2:
                    runner.run(Op(i, "decode", {"rid": rid, "token": op[1] % 3}))
                else:
                    runner.run(Op(i, "finished", {"rid": rid}))
        except ValueError as exc:
            assert "out of KV slots" in str(exc)


@settings(max_examples=80, deadline=None)
@given(ops=st.lists(op_st, max_size=40), page=st.sampled_from([1, 2, 4]),
       policy=st.sampled_from(POLICIES))
def test_replaying_the_events_rebuilds_the_same_tree(ops, page, policy):
    """The law: a TreeModel fed only the events equals cache.snapshot(), and the event log
    rebuilds every intermediate step from its keyframes."""
    log = EventLog(keyframe_every=3, page_size=page)
    runner = OpRunner(OpTrace(page_size=page, policy=policy, capacity=48), sink=log)
    snapshots = [runner.cache.snapshot()]
    steps_seen = [log.num_steps]
    for op in ops:
        drive(runner, [op])
        snapshots.append(runner.cache.snapshot())
        steps_seen.append(log.num_steps)
    model = TreeModel(page)
    model.apply_all(log)
    assert model.snapshot() == runner.cache.snapshot()
    for step, snap in zip(steps_seen, snapshots):
        assert log.snapshot_at(step) == snap


@pytest.mark.parametrize("flavor, kinds", [
    ("classic", ["NodeSplit", "NodesTouched", "PrefixMatched"]),
    # unified: the split touches the child after the new node (split_times)
    ("unified", ["NodeSplit", "NodesTouched", "NodesTouched", "PrefixMatched"]),
])
def test_steps_group_one_public_call_each(flavor, kinds):
    log = EventLog()
    c = RadixCache(sink=log, flavor=flavor)
    c.insert([1, 2, 3, 4])
    c.match_prefix([1, 2, 9])  # split-on-read
    ops = [step[0].op for step in log.steps]
    assert ops == ["reset", "insert", "match_prefix"]
    assert [type(e).__name__ for e in log.micro_events(2)] == kinds
    assert all(isinstance(s[-1], ev.StepEnded) for s in log.steps)


def test_lock_walk_emits_one_event_per_hop():
    """A node three levels deep: inc_lock_ref walks 3 hops, each a LockChanged."""
    log = EventLog()
    c = RadixCache(sink=log)
    c.insert([1, 2, 3, 4, 5, 6])
    c.match_prefix([1, 2, 9])
    leaf = c.match_prefix([1, 2, 3, 4, 8]).last_node
    c.match_prefix([1, 2, 3, 4, 5, 6])
    leaf = c.match_prefix([1, 2, 3, 4, 5, 6]).last_node
    c.inc_lock_ref(leaf)
    hops = [e for e in log.micro_events(log.num_steps - 1) if isinstance(e, ev.LockChanged)]
    assert [h.lock_ref for h in hops] == [1, 1, 1] and len(hops) == 3
    assert sum(h.size_moved for h in hops) == 6


def test_scrubbing_a_long_log_is_bounded_by_keyframes():
    log = EventLog(keyframe_every=64)
    c = RadixCache(sink=log)
    for i in range(2000):
        c.insert([i % 50, i % 7, i])
    assert log.num_steps == 2001
    mid = log.snapshot_at(1000)
    assert mid.step == 1000 and len(mid.nodes) > 1
    assert log.snapshot_at(log.num_steps) == c.snapshot()
    assert '"type": "NodeInserted"' in log.to_jsonl()


def test_radix_imports_without_torch_or_streamlit():
    """The house's arrows: radix/ is pure Python (engine and pages sit above it)."""
    code = (
        "import sys\n"
        "class Block:\n"
        "    def find_spec(self, name, path=None, target=None):\n"
        "        if name.split('.')[0] in ('torch', 'streamlit', 'transformers', 'engine',"
        " 'viz', 'numpy'):\n"
        "            raise ImportError('blocked: ' + name)\n"
        "sys.meta_path.insert(0, Block())\n"
        "import pkgutil, importlib, radix\n"
        "for m in pkgutil.iter_modules(radix.__path__):\n"
        "    if m.name != '__main__':\n"
        "        importlib.import_module('radix.' + m.name)\n"
        "print('ok')\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "ok"
