"""Debug-only: what a Streamlit server holds, on demand (benchmarks/trace_memory.py --snapshots).

Python imports `sitecustomize` at start-up from the first folder on its path that has one; this
folder is put on PYTHONPATH of the server under measurement only, never in the app. In a process
started as `python -m streamlit ...` with RADIXLENS_MEMSNAP=DIR set (other processes, e.g. the
what-ifs' spawned workers, are left alone) it starts tracemalloc (RADIXLENS_MEMSNAP_FRAMES
frames, 1 by default; 0 does not trace) and, on SIGUSR1, collects garbage and writes
DIR/snap-K.tm (the tracemalloc snapshot, K counting from 0), then DIR/snap-K.json: the modules
loaded (count and names), the traced bytes, RSS, pymalloc's arenas (sys._debugmallocstats),
glibc's and Arrow's pools, the collector's objects made since the last snapshot, and last
DIR/snap-K.done, so the benchmark knows the files are whole.
"""

from __future__ import annotations

import os
import sys

_DIR = os.environ.get("RADIXLENS_MEMSNAP")


def _arenas() -> dict[str, int]:
    """pymalloc's counters from sys._debugmallocstats (written to the C stderr: caught in a
    temporary file while it runs)."""
    import tempfile

    with tempfile.TemporaryFile() as tmp:
        sys.stderr.flush()
        saved = os.dup(2)
        os.dup2(tmp.fileno(), 2)
        try:
            sys._debugmallocstats()
        finally:
            os.dup2(saved, 2)
            os.close(saved)
        tmp.seek(0)
        text = tmp.read().decode(errors="replace")
    out = {}
    for line in text.splitlines():
        for key in ("# arenas allocated current", "# arenas highwater mark",
                    "# bytes in allocated blocks", "# bytes in available blocks"):
            if line.startswith(key):
                out[key[2:].replace(" ", "_")] = int(line.split("=")[1].replace(",", ""))
    return out


def _native() -> dict:
    """Memory outside Python's allocators: glibc's (mallinfo2: its heaps' in-use and free
    bytes, mmapped chunks), pyarrow's pool when loaded (st.dataframe goes through Arrow), the
    threads, and the anonymous mappings over 1 MiB resident (start, size and RSS, KiB)."""
    import ctypes

    class Info(ctypes.Structure):
        _fields_ = [(n, ctypes.c_size_t) for n in (
            "arena", "ordblks", "smblks", "hblks", "hblkhd", "usmblks", "fsmblks", "uordblks",
            "fordblks", "keepcost")]

    out: dict = {"threads": len(os.listdir("/proc/self/task"))}
    try:
        libc = ctypes.CDLL("libc.so.6")
        libc.mallinfo2.restype = Info
        m = libc.mallinfo2()
        out["glibc_mb"] = {k: round(getattr(m, k) / 2**20, 1) for k in
                           ("arena", "hblkhd", "uordblks", "fordblks", "keepcost")}
    except (OSError, AttributeError):
        pass
    if "pyarrow" in sys.modules:
        pool = sys.modules["pyarrow"].default_memory_pool()
        out["arrow"] = {"backend": pool.backend_name,
                        "allocated_mb": round(pool.bytes_allocated() / 2**20, 1),
                        "max_mb": round(pool.max_memory() / 2**20, 1)}
    maps, head = [], None
    for line in open("/proc/self/smaps"):  # noqa: SIM115
        first = line.split()
        if "-" in first[0] and not first[0].endswith(":"):
            lo, hi = (int(x, 16) for x in first[0].split("-"))
            head = [first[0].split("-")[0], (hi - lo) // 1024, first[5] if len(first) > 5
                    else ""]
        elif first[0] == "Rss:" and head is not None:
            if not head[2] or head[2] == "[heap]":
                if int(first[1]) > 1024:
                    maps.append([*head, int(first[1])])
    out["anon_maps_kb"] = maps
    return out


_IDS = None  # the addresses of the objects the collector tracked at the last snapshot (sorted)


def _survivors(objs: list) -> dict:
    """The objects the collector tracks that were not there at the last snapshot (made since,
    and alive: what a session left), by type, and the 1 MiB address ranges they and all the
    tracked objects lie in (a few new objects in many ranges: they pin arenas)."""
    import bisect
    import gc
    import reprlib
    from array import array
    from collections import Counter

    global _IDS
    ids = array("Q", sorted(id(o) for o in objs))
    old, new = _IDS, []
    if old is not None:
        for o in objs:
            i = bisect.bisect_left(old, id(o))
            if i == len(old) or old[i] != id(o):
                new.append(o)
    _IDS = ids
    name = lambda o: f"{type(o).__module__}.{type(o).__qualname__}"  # noqa: E731
    kinds = Counter(name(o) for o in new)
    fresh, owners = {id(o): o for o in new}, Counter()
    for o in objs:  # who holds them: one pass over every tracked object's referents
        for r in gc.get_referents(o):
            if id(r) in fresh:
                owners[f"{name(r)} <- {name(o)}"] += 1
    samples = [reprlib.repr(o) for o in new if type(o) in (list, dict)][:: max(1, len(new) // 40)]
    return {"new_objects": len(new), "new_bytes": sum(sys.getsizeof(o) for o in new),
            "new_by_type": kinds.most_common(20), "new_owners": owners.most_common(30),
            "new_samples": samples[:40],
            "new_regions_1mib": len({id(o) >> 20 for o in new}),
            "all_regions_1mib": len({i >> 20 for i in ids})}


def _snap(_signum: int, _frame: object) -> None:
    import gc
    import json
    import tracemalloc
    from pathlib import Path

    folder = Path(_DIR)
    k = len(list(folder.glob("snap-*.done")))
    gc.collect()
    if tracemalloc.is_tracing():
        tracemalloc.take_snapshot().dump(str(folder / f"snap-{k}.tm"))
    status = Path("/proc/self/status").read_text()
    rss = next(int(x.split()[1]) for x in status.splitlines() if x.startswith("VmRSS:"))
    mods = sorted(sys.modules)
    (folder / f"snap-{k}.json").write_text(json.dumps({
        "modules": len(mods), "module_names": mods, "rss_mb": round(rss / 1024, 1),
        "traced_mb": round(tracemalloc.get_traced_memory()[0] / 2**20, 1),
        "gc_objects": len(gc.get_objects()), **_survivors(gc.get_objects()), **_arenas(),
        **_native()}))
    (folder / f"snap-{k}.done").touch()


if _DIR and sys.orig_argv[1:3] == ["-m", "streamlit"]:
    import signal
    import tracemalloc

    _frames = int(os.environ.get("RADIXLENS_MEMSNAP_FRAMES", "1"))
    if _frames:  # 0: no tracing (its overhead would move RSS), the rest of the files still
        tracemalloc.start(_frames)
    signal.signal(signal.SIGUSR1, _snap)
