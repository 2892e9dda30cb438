"""Runs the commands the README shows, read from README.md at run time, and reports each.

Which commands: every line of a fenced code block marked bash/sh/shell, and the lines of an
unmarked block that start like a command (python, .venv/bin/..., bash, source: an unmarked block
may be a diagram). A line starting with `#` is a comment (the `#   kv events ...` output lines
too), and so is a trailing `  # ...`. In an unmarked block, `$ COMMAND` is a transcript: the
lines after it, up to the next `$` line or the block's end, are what the command prints, and a
run whose output differs fails. JSON blocks are data, not commands (the op-trace example is
loaded by tests/docs/test_readme_commands.py, and is the OPS.jsonl the README's replay reads).
Commands in the prose (inline code: the benchmarks' and tools' invocations, quoted with their
figures) are checked, not run: they must use an interpreter that exists after `bash
scripts/setup.sh` (`.venv/bin/python`, or `python` where the README says it means the project's
environment; never a bare `python3`, which outside .venv lacks the packages) and name a script or
module that exists. Running them is the benchmarks' business (minutes each, some with the
reference wheels).

How a code-block command runs: as a new user with the environment activated (`.venv/bin` first on
PATH, as `source .venv/bin/activate` does), from the repository root, in a shell, each with a time
limit. The root it runs in is a scratch copy made of links to the repository's top-level entries
(`scratch_root`), so what a command writes where it stands (`sweep.jsonl`, `--html sweep.html`)
lands in the scratch folder, not in the checkout. Placeholders become sample inputs (`placeholders`
below: TRACE is the three-request walk, OPS.jsonl the README's op-trace example (the JSON block
that opens with its config line), OUT... a temporary path), an optional `[--flag]` is passed.
Skipped, each with its reason (SKIPS): what needs a GPU, a server that runs until stopped, another
machine's server, the reference wheels, a checkpoint the user brings, or is the setup / the suite
itself (CI runs those two). `--quick` also leaves out the slow commands run elsewhere in the suite
(SLOW: the real model's, a local Ray's, and the two whose own process would import torch or
transformers again: the test file their reason names runs them in its process,
tests/readmehelp.py).

Usage: .venv/bin/python tools/readme_commands.py [--quick] [--list] [--timeout S] [--readme P]
Exit 0 when every command run passed and every inline command checked out, else 1.
"""

from __future__ import annotations

import argparse
import os
import re
import shlex
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import NamedTuple

ROOT = Path(__file__).resolve().parent.parent
SHELL_LANGS = ("", "bash", "sh", "shell", "console")
# in an unmarked block (also diagrams), only lines that start like a command are commands
COMMAND_START = re.compile(r"^([A-Z_]+=\S+ )*(python3?|\.venv/bin/\w+|bash|source) ")
# (pattern, reason): the first that matches a command skips it
SKIPS = [
    (r"^bash " + re.escape("scripts/setup.sh"),
     "the setup and the two commands after it: CI (.ci/run) runs "
     "them on a clean clone"),
    (r"streamlit run app\.py", "a server that runs until stopped (the browser tests serve the "
     "app on a free port)"),
    (r"engine serve", "a server that runs until stopped (tests/engine/test_engine_serve.py starts "
     "one)"),
    (r"radix watch (tcp://|\.\.\.)", "needs a running server (the line above) to watch"),
    (r"radix watch --read", "needs a recording made by watching a server"),
    (r"llama3_8b\.json", "needs a GPU with ~20 GiB free (Llama-3-8B's shape)"),
    (r"--model PATH", "needs a Hugging Face checkpoint of the user's "
     "(tests/engine/test_engine_model.py makes a tiny one)"),
    (r"/tmp/(sgl|vllm)", "needs the reference wheels unpacked at /tmp/sgl/ex, /tmp/vllm/ex"),
    (r"\bcuda\b|--device cuda", "needs a GPU"),
]
# (pattern, reason): the slow commands --quick leaves out, each run elsewhere in the suite
SLOW = [
    (r"python -m engine run TRACE(?! --random-init)",
     "loads the real model (left out by --quick; run without it)"),
    (r"python -m radix sweep(?!.*--ray-address)",
     "starts a local Ray of its own (~30 CPU-s; left out by --quick: "
     "tests/radix/cluster/test_sweep.py starts one, runs `radix sweep` on it and holds its rows "
     "to the serial run's)"),
    (r"python -m engine why ",
     "imports transformers and loads the tokenizer in a process of its own (~8-17 CPU-s); left "
     "out by --quick: tests/radix/why/test_why.py runs this line in its process, tokenizer loaded"),
    (r"python -m engine run \S+ --random-init \S*tiny_llama\.json",
     "imports torch in a process of its own (~7-13 CPU-s); left out by --quick: "
     "tests/engine/test_engine_cli.py runs this line in its process, engine imported"),
]


class Command(NamedTuple):
    line: int  # 1-based line in the README
    text: str  # as shown (comment removed; a transcript's `$ ` too)
    inline: bool  # from the prose, not a code block
    shown: str | None = None  # a transcript's output as the README shows it (each line + "\n")


class Outcome(NamedTuple):
    command: Command
    status: str  # ok, FAIL, skip
    seconds: float
    detail: str  # the skip's reason, or the failure's output tail


def code_block_commands(readme: str) -> list[Command]:
    """Each command line of the shell (or unmarked) fenced blocks, without its comment; a
    transcript's command with the output shown under it.

    >>> code_block_commands("x\\n```bash\\npython -m radix demo   # hi\\n# note\\n```\\n")
    [Command(line=3, text='python -m radix demo', inline=False, shown=None)]
    >>> code_block_commands("```\\n$ python -m radix demo\\ninsert [1, 2, 3]\\n```\\n")
    [Command(line=2, text='python -m radix demo', inline=False, shown='insert [1, 2, 3]\\n')]
    """
    out, lang, said = [], None, None  # said: the open transcript's (line, command, output lines)

    def close() -> None:
        if said:
            out.append(Command(said[0], said[1], False, "".join(f"{x}\n" for x in said[2])))

    for n, raw in enumerate(readme.splitlines(), 1):
        fence = re.match(r"^\s*```(\w*)", raw)
        if fence:
            lang = fence.group(1).lower() if lang is None else None
            close()
            said = None
            continue
        if lang is None or lang not in SHELL_LANGS:
            continue
        if not lang and raw.startswith("$ "):
            close()
            said = (n, raw[2:].strip(), [])
            continue
        if said:
            said[2].append(raw)
            continue
        text = re.split(r"\s{2,}#\s", raw)[0].strip()
        if text and not text.startswith("#") and (lang or COMMAND_START.match(text)):
            out.append(Command(n, text, False))
    return out


def transcript_mismatch(shown: str, printed: str) -> str | None:
    """None when a transcript's output is what the command printed, else the first line that
    differs (1-based, counted from the line under the `$`).

    >>> transcript_mismatch("a\\nb\\n", "a\\nb\\n") is None
    True
    >>> transcript_mismatch("a\\nb\\n", "a\\nc\\n")
    "output line 2: the README shows 'b', the command printed 'c'"
    """
    if shown == printed:
        return None
    want, got = shown.splitlines(), printed.splitlines()
    for i in range(max(len(want), len(got))):
        a = want[i] if i < len(want) else "(nothing)"
        b = got[i] if i < len(got) else "(nothing)"
        if a != b:
            return f"output line {i + 1}: the README shows {a!r}, the command printed {b!r}"
    return "the output differs in its line endings"


def inline_commands(readme: str) -> list[Command]:
    """Inline code in the prose that runs an interpreter or a script (may wrap one line).

    >>> inline_commands("see `python benchmarks/engine.py --n 3` and `RadixCache`")
    [Command(line=1, text='python benchmarks/engine.py --n 3', inline=True, shown=None)]
    """
    out = []
    for m in re.finditer(r"```.*?```|`([^`]+)`", readme, re.S):
        if m.group(0).startswith("```"):
            continue
        text = " ".join(m.group(1).split())
        if COMMAND_START.match(text):
            out.append(Command(readme.count("\n", 0, m.start()) + 1, text, True))
    return out


def skip_reason(cmd: Command, quick: bool) -> str | None:
    for pattern, reason in SKIPS + (SLOW if quick else []):
        if re.search(pattern, cmd.text):
            return reason
    return None


def placeholders(tmp: Path, readme: str) -> dict[str, str]:
    """What each placeholder the README writes stands for, when a command runs."""
    example = re.search(r'^```json\n(\{"op": "config".*?\n)```$', readme, re.M | re.S)
    ops = tmp / "ops.jsonl"
    ops.write_text(example.group(1) if example else "")
    return {"TRACE": "examples/traces/three_requests.jsonl.gz", "OPS.jsonl": str(ops),
            "OUT.jsonl": str(tmp / "out.jsonl"), "OUTDIR": str(tmp / "outdir"), "N": "4096"}


def runnable(cmd: Command, subs: dict[str, str]) -> str:
    """The shell line to run: placeholders filled in, optional `[--flag]`s passed.

    >>> runnable(Command(1, "python -m radix replay OPS.jsonl [--json]", False),
    ...          {"OPS.jsonl": "/t/o.jsonl"})
    'python -m radix replay /t/o.jsonl --json'
    """
    words = []
    for word in shlex.split(re.sub(r"\[([^\]]+)\]", r"\1", cmd.text)):
        words.append(subs.get(word, word))
    return shlex.join(words)


def scratch_root(tmp: Path) -> Path:
    """A folder that looks like the repository's root (a link per top-level entry, .git left
    out) for the commands to run in: they read the project through the links and write beside
    them."""
    work = tmp / "root"
    work.mkdir()
    for entry in ROOT.iterdir():
        if entry.name != ".git":
            (work / entry.name).symlink_to(entry, target_is_directory=entry.is_dir())
    return work


def run(cmd: Command, subs: dict[str, str], timeout: float, cwd: Path = ROOT) -> Outcome:
    env = dict(os.environ, PATH=f"{ROOT / '.venv' / 'bin'}{os.pathsep}{os.environ['PATH']}",
               VIRTUAL_ENV=str(ROOT / ".venv"))
    line = runnable(cmd, subs)
    started = time.monotonic()
    try:
        done = subprocess.run(line, shell=True, cwd=cwd, env=env, capture_output=True,
                              text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        return Outcome(cmd, "FAIL", time.monotonic() - started, f"still running after {timeout} s")
    seconds = time.monotonic() - started
    if done.returncode != 0:
        tail = (done.stdout + done.stderr).strip().splitlines()[-5:]
        return Outcome(cmd, "FAIL", seconds, f"exit {done.returncode}: " + " | ".join(tail))
    differs = cmd.shown is not None and transcript_mismatch(cmd.shown, done.stdout)
    if differs:
        return Outcome(cmd, "FAIL", seconds, differs)
    return Outcome(cmd, "ok", seconds, line)


def check_inline(cmd: Command) -> Outcome:
    """An inline command: an interpreter the setup provides, and a target that exists."""
    words = [w for w in cmd.text.split() if not re.match(r"^[A-Z_]+=", w)]
    if words[0] == "python3":
        return Outcome(cmd, "FAIL", 0.0, "a bare python3 (outside .venv it lacks the packages): "
                       "write .venv/bin/python")
    if words[1] == "-m":
        module = words[2]
        here = ROOT / Path(*module.split("."))
        found = here.with_suffix(".py").is_file() or here.is_dir() or _installed(module)
        return Outcome(cmd, "ok" if found else "FAIL", 0.0, f"module {module}" +
                       ("" if found else " not found"))
    target = ROOT / words[1]
    return Outcome(cmd, "ok" if target.exists() else "FAIL", 0.0,
                   f"{words[1]}" + ("" if target.exists() else " does not exist"))


def _installed(module: str) -> bool:
    python = ROOT / ".venv" / "bin" / "python"
    probe = f"import importlib.util, sys; sys.exit(importlib.util.find_spec({module!r}) is None)"
    return subprocess.run([str(python), "-c", probe], capture_output=True).returncode == 0


def check(readme_path: Path, quick: bool, timeout: float, dry: bool = False,
          jobs: int = 1) -> list[Outcome]:
    """Each code-block command's outcome (in README order), then each inline one's. `jobs`:
    how many commands run at once (each its own process and outputs; most of a command's time
    is its interpreter importing, so two overlap well on two cores)."""
    readme = readme_path.read_text(encoding="utf-8")
    with tempfile.TemporaryDirectory(prefix="readme-commands-") as tmp:
        subs = placeholders(Path(tmp), readme)
        work = scratch_root(Path(tmp))

        def one(cmd: Command) -> Outcome:
            reason = skip_reason(cmd, quick)
            if reason is not None or dry:
                return Outcome(cmd, "skip" if reason else "run", 0.0,
                               reason or runnable(cmd, subs))
            return run(cmd, subs, timeout, work)

        with ThreadPoolExecutor(max(1, jobs)) as pool:
            outcomes = list(pool.map(one, code_block_commands(readme)))
    return outcomes + [check_inline(c) for c in inline_commands(readme)]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true",
                    help="leave out the slow commands the suite runs elsewhere (SLOW)")
    ap.add_argument("--list", action="store_true", help="classify the commands, run nothing")
    ap.add_argument("--timeout", type=float, default=600.0, help="seconds per command")
    ap.add_argument("--readme", type=Path, default=ROOT / "README.md")
    ap.add_argument("--jobs", type=int, default=1, help="commands run at once")
    args = ap.parse_args(argv)
    outcomes = check(args.readme, args.quick, args.timeout, dry=args.list, jobs=args.jobs)
    for o in outcomes:
        kind = "inline" if o.command.inline else "block"
        print(f"{o.status:<5} {o.seconds:6.1f} s  README:{o.command.line:<4} {kind:<6} "
              f"{o.command.text}\n{'':>21}{o.detail}")
    failed = [o for o in outcomes if o.status == "FAIL"]
    ran = sum(o.status == "ok" and not o.command.inline for o in outcomes)
    print(f"\n{ran} run and passed, {sum(o.status == 'skip' for o in outcomes)} skipped, "
          f"{sum(o.command.inline for o in outcomes)} inline checked, {len(failed)} failed")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
