"""The house's arrows: every import of every module, including those inside functions, points down.

Layers, top to bottom (ranks): app.py and pages/ (5); scenarios/ and viz/ (4, never each other);
runtime/ (3.5: the worker pool, budgets and session registry, below the runs); engine/ and
examples/ (3, never each other); radix/ (below; its sub-packages are ranked too:
cli 6 > runs, watch, why 5 > traces 4 > sched 3 > models 2.5 > tree, blocks 2 > events,
request 1 > tokens 0). An import may go to a lower rank only, or within its own package (radix/tree
importing radix/tree). No two modules import each other, directly or through a circle. tests/,
tools/, benchmarks/ and the root conftest.py import anything. radix/ imports no torch, streamlit
or numpy, even inside functions. viz/ only draws: it imports nothing that builds or drives a
cache (RadixCache, BlockPool, BlockCacheManager, Scheduler, EngineService, the runs of
radix/runs) and constructs none of them.
"""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
# may import anything; nothing imports them
FREE = ("tests", "tools", "benchmarks", "scripts", "conftest.py")
RANKS = {
    "app": 51, "pages": 50,  # app.py (the entry) may import pages
    "scenarios": 40, "viz": 41,  # the same height: different numbers so neither sees the other
    "runtime": 35,  # the server runtime (jobs, budgets, sessions): the runs use it, it knows none
    "engine": 30, "examples": 31,
    "radix.__main__": 7, "radix": 7,  # radix/__init__.py: the public surface
    "radix.cli": 6, "radix.cluster": 5.5,  # the cluster: above runs and watch, below cli
    "radix.hosttier": 5.2,  # the host tier: a tree of its own, priced by runs.costs
    "radix.runs": 5, "radix.watch": 5, "radix.traces": 4, "radix.sched": 3,
    "radix.models": 2.5,  # presets from configs: read by runs and cli, built on tree and blocks
    "radix.why": 5,  # prompt diffs and miss causes (radix/why/): reads traces, runs caches
    "radix.tree": 2, "radix.blocks": 2,
    "radix.events": 1, "radix.request": 1,
    "radix.tokens": 0,  # compact token sequences: below everything that holds tokens
}
SIBLINGS = {frozenset({"scenarios", "viz"}), frozenset({"engine", "examples"}),
            frozenset({"radix.tree", "radix.blocks"}), frozenset({"radix.runs", "radix.watch"})}
HEAVY = ("torch", "transformers", "streamlit", "numpy", "plotly", "pandas")
# what viz/ may not import or call: the things that build or drive a cache
DRIVERS = ("RadixCache", "BlockPool", "BlockCacheManager", "Scheduler", "EngineService",
           "SimRunner", "OpRunner", "SchedulePolicy", "SlotAllocator", "BlockShadow")
# (the types viz reads live apart from the cache: TreeSnapshot in radix/tree/snapshot.py,
# TreeModel and EventLog in radix/tree/replay.py; radix/tree/radix_cache.py is the cache)
DRIVER_MODULES = ("radix.tree.radix_cache", "radix.blocks.pool", "radix.blocks.manager",
                  "radix.sched", "radix.runs.compare", "radix.runs.sim", "radix.runs.ops",
                  "radix.request", "engine", "scenarios")


def module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def project_modules() -> dict[str, Path]:
    out = {}
    for path in ROOT.rglob("*.py"):
        rel = path.relative_to(ROOT)
        if rel.parts[0] in FREE or "node_modules" in rel.parts or rel.parts[0].startswith("."):
            continue
        out[module_name(path)] = path
    return out


def imports_of(path: Path, name: str, modules: set[str] | frozenset = frozenset()) -> set[str]:
    """Every module an import statement names, at any depth (functions, if-blocks included).
    `from p import m` names p.m when that is one of `modules`, else p."""
    tree = ast.parse(path.read_text(), str(path))
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    out = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            out.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parent = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join(parent + ([base] if base else []))
            for a in node.names:  # `from radix import events` imports radix.events
                sub = f"{base}.{a.name}"
                out.add(sub if sub in modules else base)
    return out


def group(module: str) -> str | None:
    """The ranked group a module belongs to (its longest prefix in RANKS)."""
    parts = module.split(".")
    for n in range(len(parts), 0, -1):
        prefix = ".".join(parts[:n])
        if prefix in RANKS:
            return prefix
    return None


def test_every_import_points_down():
    modules = project_modules()
    wrong = []
    for name, path in modules.items():
        src = group(name)
        assert src is not None, f"{name} belongs to no layer: add it to RANKS"
        for target in imports_of(path, name, modules.keys()):
            if target not in modules:
                if name.startswith("radix") and target.split(".")[0] in HEAVY:
                    wrong.append(f"{name} -> {target} (radix/ is pure Python)")
                continue
            dst = group(target)
            same = dst == src or (src == "radix" and name == "radix.__main__")
            if same:
                continue
            if RANKS[dst] >= RANKS[src] or frozenset({src, dst}) in SIBLINGS:
                wrong.append(f"{name} -> {target}")
    assert not wrong, "imports that point up or sideways:\n" + "\n".join(sorted(wrong))


def test_no_import_cycles():
    """Tarjan's strongly connected components over the module graph: every one is a single
    module that does not import itself."""
    modules = project_modules()
    graph = {n: sorted(t for t in imports_of(p, n, modules.keys()) if t in modules and t != n)
             for n, p in modules.items()}
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    cycles = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in graph[v]:
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                cycles.append(sorted(component))

    for v in graph:
        if v not in index:
            visit(v)
    # a package's __init__ importing its own modules is not a circle unless they import it back
    assert not cycles, f"modules that import each other: {cycles}"


def test_the_checker_sees_imports_inside_functions(tmp_path):
    """A known answer for the parser: an import hidden in a function body is found."""
    f = tmp_path / "m.py"
    f.write_text("def run():\n    from engine.sim import simulate\n    import viz.tour\n")
    assert imports_of(f, "radix.cli.m", {"engine.sim", "viz.tour"}) == {"engine.sim", "viz.tour"}


def _viz_drivers(path: Path, name: str, modules: set[str] | frozenset) -> list[str]:
    """What a viz module imports or calls that builds or drives a cache."""
    wrong = [f"{name} imports {t}" for t in imports_of(path, name, modules)
             if t.startswith(DRIVER_MODULES)]
    tree = ast.parse(path.read_text(), str(path))
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and any(a.name in DRIVERS for a in node.names):
            wrong.append(f"{name} imports {[a.name for a in node.names if a.name in DRIVERS]}")
        elif isinstance(node, ast.Call):
            f = node.func
            called = f.id if isinstance(f, ast.Name) else f.attr if isinstance(
                f, ast.Attribute) else ""
            if called in DRIVERS:
                wrong.append(f"{name}:{node.lineno} builds a {called}")
    return wrong


def test_viz_only_draws():
    """viz/ turns snapshots and events into pictures and words: no module of it imports the
    caches, the scheduler, the engine or the runs, or constructs a cache (the harness for the
    browser tests and the benchmark serves the bundle only: its trees come from scenarios/)."""
    modules = project_modules()
    wrong = []
    for name, path in modules.items():
        if group(name) == "viz":
            wrong += _viz_drivers(path, name, modules.keys())
    assert not wrong, "viz/ builds or drives a cache:\n" + "\n".join(sorted(wrong))


def test_the_viz_rule_can_fail(tmp_path):
    """A known answer: a module that builds a RadixCache or a BlockPool is caught by the
    module, the name and the call; one that reads a snapshot is not."""
    f = tmp_path / "m.py"
    f.write_text("from radix.tree.radix_cache import RadixCache\nc = RadixCache()\n")
    found = _viz_drivers(f, "viz.m", {"radix.tree.radix_cache"})
    assert len(found) == 3 and any("builds a RadixCache" in w for w in found)
    f.write_text("from radix.tree.snapshot import TreeSnapshot\n")
    assert _viz_drivers(f, "viz.m", {"radix.tree.snapshot"}) == []
    f.write_text("from radix.blocks.pool import BlockPool\np = BlockPool(4)\n")
    assert len(_viz_drivers(f, "viz.m", {"radix.blocks.pool"})) == 3
