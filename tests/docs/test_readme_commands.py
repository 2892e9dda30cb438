"""The README's commands, read from README.md when the test runs (tools/readme_commands.py).

Every command in its code blocks either runs here (`--quick`: all but the real model's, the local
Ray's, and the two a test file runs in its own process, tests/readmehelp.py) and exits 0, printing
what its `$` transcript shows where it has one, or is skipped with its reason; every command in its
prose names an interpreter the setup provides and a script or module that exists; the op-trace
config example loads as written. Also tools/busy.py, the background load for running the suite on a
busy machine.
"""

from __future__ import annotations

import re
import subprocess
import sys

import pytest
from machine import seconds
from readmehelp import ROOT, rc

from radix.traces.ops import OpTraceError, load_ops

README = (ROOT / "README.md").read_text(encoding="utf-8")


def test_every_code_block_command_runs_or_is_skipped_with_its_reason():
    """The extraction finds the Command line section's commands (the demo, the CPU-sized
    --random-init run) and the GPU one is skipped, saying so; each skip has a reason. --quick
    leaves the random-init run and `engine why` to the test files its reason names, which run
    them in their process (tests/readmehelp.py); a full run runs them."""
    outcomes = rc.check(ROOT / "README.md", quick=True, timeout=1, dry=True)
    full_outcomes = rc.check(ROOT / "README.md", quick=False, timeout=1, dry=True)
    blocks = [o for o in outcomes if not o.command.inline]
    runs = {o.command.text for o in blocks if o.status == "run"}
    full_runs = {o.command.text for o in full_outcomes if o.status == "run"}
    assert "python -m radix demo" in runs
    assert any("tiny_llama.json" in t for t in full_runs)
    for words, test_file in (("tiny_llama.json", "tests/engine/test_engine_cli.py"),
                             ("python -m engine why", "tests/radix/why/test_why.py")):
        left = [o for o in blocks if words in o.command.text and o.command.text in full_runs]
        assert left and all(o.status == "skip" and test_file in o.detail for o in left)
    gpu = [o for o in blocks if "llama3_8b.json" in o.command.text]
    assert gpu and all(o.status == "skip" and "GPU" in o.detail for o in gpu)
    assert all(o.detail for o in blocks if o.status == "skip")
    # --quick leaves the local Ray sweep to tests/radix/cluster/test_sweep.py; a full run runs it
    sweep = [(q.status, f.status) for q, f in zip(outcomes, full_outcomes)
             if "radix sweep" in q.command.text and not q.command.inline]
    assert sweep and set(sweep) == {("skip", "run")}


def test_a_transcript_is_its_command_and_the_output_under_it(tmp_path):
    """`$ COMMAND` in an unmarked block runs COMMAND; the lines under it, to the next `$` or the
    fence, are its output as shown, and a run that prints anything else fails, naming the line."""
    text = "```\n$ python -m radix demo\nA\n\nB\n$ python -m radix why a b\nC\n```\n"
    first, second = rc.code_block_commands(text)
    assert (first.line, first.text, first.shown) == (2, "python -m radix demo", "A\n\nB\n")
    assert (second.text, second.shown) == ("python -m radix why a b", "C\n")
    assert rc.transcript_mismatch("A\n\nB\n", "A\n\nB\n") is None
    assert "line 3" in rc.transcript_mismatch("A\n\nB\n", "A\n\nX\n")
    assert "line 4" in rc.transcript_mismatch("A\n\nB\n", "A\n\nB\n\n")
    said = rc.Command(1, f"{sys.executable} -c 'print(2)'", False, "1\n")
    out = rc.run(said, {}, seconds(30), tmp_path)
    assert out.status == "FAIL" and "'1'" in out.detail and "'2'" in out.detail


def test_prose_commands_use_the_environment_and_exist():
    """No bare python3 (issue 25: outside .venv it fails with "No module named 'msgpack'"),
    and every script or module named exists: in the README's prose and in docs/*.md's, where
    the benchmarks' and tools' commands are quoted with their figures (docs/HISTORY.md aside:
    it names scripts since retired)."""
    pages = {"README.md": README} | {
        f"docs/{p.name}": p.read_text(encoding="utf-8")
        for p in sorted((ROOT / "docs").glob("*.md")) if p.name != "HISTORY.md"}
    inline = [(page, rc.check_inline(c)) for page, text in pages.items()
              for c in rc.inline_commands(text)]
    assert len(inline) >= 10
    assert [f"{page}:{o.command.line} {o.command.text}: {o.detail}" for page, o in inline
            if o.status != "ok"] == []
    assert rc.check_inline(rc.Command(1, "python3 benchmarks/watch.py", True)).status == "FAIL"


def test_op_trace_config_example_loads_as_written(tmp_path):
    """The README's config line (policy slru, protected_threshold 2) loads; the same option
    under lru is refused, as SGLang's LRU takes no option (issue 25 found it the other way). The
    example's whole block is the OPS.jsonl its `radix replay` transcript reads."""
    (line,) = re.findall(r'^\{"op": "config".*\}$', README, re.M)
    ops = rc.placeholders(tmp_path, README)["OPS.jsonl"]
    assert open(ops, encoding="utf-8").read().startswith(line + "\n")
    trace = load_ops((line + "\n" + '{"op": "insert", "tokens": [1, 2, 3]}\n').encode())
    assert (trace.policy, trace.policy_config) == ("slru", {"protected_threshold": 2})
    with pytest.raises(OpTraceError, match="protected_threshold"):
        load_ops((line.replace('"slru"', '"lru"') + "\n").encode())


def test_quick_readme_commands_pass():
    """Runs them, two at a time: each exits 0 (its output's tail is the failure message
    otherwise)."""
    outcomes = rc.check(ROOT / "README.md", quick=True, timeout=seconds(300), jobs=2)
    ran = [o for o in outcomes if not o.command.inline and o.status != "skip"]
    assert len(ran) >= 8
    assert [f"README:{o.command.line} {o.command.text}: {o.detail}" for o in ran
            if o.status != "ok"] == []


def test_a_command_writes_in_the_scratch_root_not_the_checkout(tmp_path):
    """The README's sweep writes sweep.jsonl and sweep.html where it stands: run in the scratch
    root, they stay out of the repository (a run once committed 4.8 MB of them)."""
    work = rc.scratch_root(tmp_path)
    assert (work / "examples").resolve() == ROOT / "examples" and not (work / ".git").exists()
    out = rc.run(rc.Command(1, "cp examples/traces/three_requests.jsonl.gz copied.gz", False),
                 {}, seconds(30), work)
    assert out.status == "ok", out.detail
    assert (work / "copied.gz").read_bytes() == (ROOT / "examples/traces/three_requests.jsonl.gz"
                                                 ).read_bytes()
    assert not (ROOT / "copied.gz").exists()


def test_busy_spins_around_a_command_and_returns_its_status():
    done = subprocess.run([sys.executable, str(ROOT / "tools" / "busy.py"), "--seconds", "30",
                           "--procs", "1", "--", sys.executable, "-c", "raise SystemExit(3)"],
                          capture_output=True, text=True, timeout=seconds(60))
    assert done.returncode == 3
    assert "exited 3 after" in done.stdout and "1 spinning processes" in done.stdout
