"""glibc's per-thread heaps capped at runtime (runtime/budget.py `cap_malloc_arenas`, called by
app.py): eight threads that allocate at once get a heap each, unless the cap came first. Counted
by glibc itself (malloc_info's <heap nr=...> entries, the main heap included), in fresh
subprocesses: the test process has its threads and heaps already."""

from __future__ import annotations

import json
import os
import platform
import subprocess
import sys
from pathlib import Path

import pytest

from runtime.budget import cap_malloc_arenas

ROOT = Path(__file__).resolve().parents[2]
CHILD = """
import ctypes, json, sys, threading
capped = None
if sys.argv[2] == "cap":
    from runtime.budget import cap_malloc_arenas
    capped = [cap_malloc_arenas(), cap_malloc_arenas()]
barrier = threading.Barrier(9)

def hold():
    block = bytearray(100_000)  # glibc's malloc (pymalloc serves up to 512 bytes), in a heap
    barrier.wait()  # the eight threads hold their blocks at once
    barrier.wait()

threads = [threading.Thread(target=hold) for _ in range(8)]
for t in threads:
    t.start()
barrier.wait()
libc = ctypes.CDLL("libc.so.6")
libc.fopen.restype = ctypes.c_void_p
out = ctypes.c_void_p(libc.fopen(sys.argv[1].encode(), b"w"))
libc.malloc_info(0, out)
libc.fclose(out)
barrier.wait()
for t in threads:
    t.join()
print(json.dumps({"capped": capped, "heaps": open(sys.argv[1]).read().count("<heap nr=")}))
"""

pytestmark = pytest.mark.skipif(platform.libc_ver()[0] != "glibc", reason="glibc only")


def heaps(tmp_path: Path, how: str) -> dict:
    env = {k: v for k, v in os.environ.items() if k != "MALLOC_ARENA_MAX"}
    done = subprocess.run([sys.executable, "-c", CHILD, str(tmp_path / f"{how}.xml"), how],
                          cwd=ROOT, env=env, timeout=60, capture_output=True, text=True,
                          check=True)
    return json.loads(done.stdout)


def test_capped_threads_share_two_heaps(tmp_path):
    """Known answer: uncapped, the main heap + one per thread = 9 (glibc fixes its limit, 8 per
    core, only past 8 heaps); capped at 2 first, the main heap + the first thread's = 2, and the
    other seven threads share them. A second call answers True too and changes nothing."""
    assert heaps(tmp_path, "plain") == {"capped": None, "heaps": 9}
    assert heaps(tmp_path, "cap") == {"capped": [True, True], "heaps": 2}


def test_the_users_malloc_arena_max_wins(monkeypatch):
    monkeypatch.setenv("MALLOC_ARENA_MAX", "4")
    assert cap_malloc_arenas.__wrapped__(2) is False
