"""The Trace debugger's page under Streamlit's AppTest in a child process, for
benchmarks/block_view.py (not a benchmark itself).

`run` starts a child script in the checkout measured (its cwd, first on its sys.path, so the
page and everything below it are that checkout's) and hands it this file's path, from which the
child loads this module: an older checkout is measured with the same walk. In the child, the
page is open as `at`; `upload` sends a trace and waits for the summary, and `drawn` lists what
the page drew, so that two checkouts' pages can be compared by its `digest`.
"""

from __future__ import annotations

import hashlib
import json
import re
import subprocess
import sys
from pathlib import Path

HERE = str(Path(__file__).resolve())

# the child's first lines: the measured checkout first on sys.path, this module loaded by its
# path, the page opened (`at`). subtle: from_file takes a relative path relative to its caller's
# file, here "<string>": the path stays "pages/trace.py", and the widget ids, which hash it,
# are the same in every checkout (an absolute path would make two checkouts' pages differ).
PRELUDE = """
import importlib.util, sys
sys.path.insert(0, ".")
_spec = importlib.util.spec_from_file_location("trace_apptest", sys.argv[1])
_helper = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(_helper)
digest, drawn, upload = _helper.digest, _helper.drawn, _helper.upload
from streamlit.testing.v1 import AppTest
at = AppTest.from_file("pages/trace.py", default_timeout=3600)
at.run()
"""


def run(root: Path, code: str, *args: str) -> dict:
    """Run PRELUDE + `code` with cwd `root` (its sys.argv[2:] = `args`); its last line's JSON."""
    done = subprocess.run([sys.executable, "-c", PRELUDE + code, HERE, *args], cwd=root,
                          check=True, capture_output=True, text=True)
    return json.loads(done.stdout.strip().splitlines()[-1])


def upload(at, data: bytes) -> None:  # noqa: ANN001 - an AppTest
    """Upload `data` as trace.jsonl, wait for the page's replay job, rerun: the summary drawn."""
    at.file_uploader(key="trace.upload").set_value(("trace.jsonl", data, "text/plain")).run()
    from pages._serve import holdings  # noqa: PLC0415 - the measured checkout's

    state = holdings().get(at.session_state["trace.sid"], "trace")
    if state.get("job") is not None:
        assert state["job"].wait(3600)
    at.run()


def drawn(at) -> list[str]:  # noqa: ANN001 - an AppTest
    """Every element the page drew, as its type and proto, in the page's order. Left out: the
    memory caption (it measures the process); the downloads' random file ids (a button's, or a
    link's folder under static/downloads/) read "-"."""
    lines: list[str] = []

    def walk(node) -> None:  # noqa: ANN001 - an AppTest node
        proto = getattr(node, "proto", None)
        if proto is not None:
            text = str(proto)
            if "Memory (estimated)" not in text:
                lines.append(type(node).__name__ + " " + text)
        for child in getattr(node, "children", {}).values():
            walk(child)

    walk(at._tree)
    return [re.sub(r'static/downloads/[0-9a-f]+/', 'static/downloads/-/', re.sub(
        r'deferred_file_id: "[0-9a-f]+"', 'deferred_file_id: "-"', x)) for x in lines]


def digest(lines: list[str]) -> str:
    """The first 16 hex digits of the sha256 of `lines` joined by newlines."""
    return hashlib.sha256("\n".join(lines).encode()).hexdigest()[:16]
