"""Files and lines on one request's path from a trace line to the tree picture (not a test).

Runs the Trace debugger's line below the page for a one-request trace: `scenarios/trace.py:
replay` (load, expand, both caches, the event log), the tree at every step
(`EventLog.snapshot_at`), the scene (`viz/scene.py: tree_scene`) and the step's words
(`viz/trace.py: step_lines`), with a profiler noting every repository file whose code runs.
Prints each file with its line count, then the totals and the lines of radix/tree/, as JSON.
The page itself and the SVG component (JavaScript) are left out: they need a browser.

    python benchmarks/request_path.py [ROOT]   (ROOT: a checkout, default this one)
"""

from __future__ import annotations

import gzip
import json
import sys
from pathlib import Path


def count(root: Path) -> dict:
    sys.path.insert(0, str(root))
    from scenarios.trace import replay  # noqa: PLC0415 - from the checkout named
    from viz.scene import tree_scene  # noqa: PLC0415
    try:  # viz/trace.py (#41, and before viz.words); viz/scene.py from #23's fourth round
        from viz.trace import step_lines  # noqa: PLC0415
    except ImportError:
        try:
            from viz.scene import step_lines  # noqa: PLC0415
        except ImportError:
            from viz.words import step_lines  # noqa: PLC0415

    line = gzip.decompress((root / "examples/traces/three_requests.jsonl.gz").read_bytes())
    data = line.splitlines(keepends=True)[0]
    seen: set[str] = set()
    prefix = str(root.resolve()) + "/"

    def profile(frame, event, arg):  # noqa: ANN001 - sys.setprofile's signature
        name = frame.f_code.co_filename
        if name.startswith(prefix) and "/.venv/" not in name:
            seen.add(name[len(prefix):])

    sys.setprofile(profile)
    try:
        out = replay(data, "one.jsonl")
        for step in range(out.log.num_steps + 1):
            tree_scene(out.log.snapshot_at(step))
            if step < out.log.num_steps:
                step_lines(out.log, step)
    finally:
        sys.setprofile(None)
    files = sorted(f for f in seen if not f.startswith("benchmarks/"))
    lines = {f: len((root / f).read_text().splitlines()) for f in files}
    tree = sum(len(p.read_text().splitlines()) for p in (root / "radix/tree").glob("*.py"))
    return {"files": len(files), "lines": sum(lines.values()), "radix_tree_lines": tree,
            "per_file": lines}


def main() -> None:
    root = Path(sys.argv[1] if len(sys.argv) > 1 else Path(__file__).resolve().parents[1])
    result = count(root)
    for f, n in result["per_file"].items():
        print(f"{n:6d}  {f}")
    print(json.dumps({k: v for k, v in result.items() if k != "per_file"}))


if __name__ == "__main__":
    main()
