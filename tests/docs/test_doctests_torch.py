"""The worked examples of the modules that import torch or transformers, run as tests.

Collection passes over these modules (conftest.py at the root, tests/doctest_rule.py), so that
collecting the suite needs no torch; here each module's examples run with doctest under the
flags pytest's doctest collection uses (ELLIPSIS), and a module must have at least one.
"""

from __future__ import annotations

import doctest
import importlib

import pytest
from doctest_rule import ROOT, torch_examples


def _dotted(path) -> str:
    return ".".join(path.relative_to(ROOT).with_suffix("").parts)


@pytest.mark.parametrize("module", [_dotted(p) for p in torch_examples()])
def test_worked_examples(module):
    mod = importlib.import_module(module)
    out: list[str] = []
    runner = doctest.DocTestRunner(optionflags=doctest.ELLIPSIS)
    tests = [t for t in doctest.DocTestFinder().find(mod, module) if t.examples]
    for test in tests:
        runner.run(test, out=out.append)
    result = runner.summarize(verbose=False)
    assert tests and result.attempted > 0, f"{module} has no examples"
    assert result.failed == 0, "".join(out)


def test_the_rule_finds_the_engine_examples():
    """engine/kv_pool.py has examples and imports torch: it is run here, not collected."""
    assert "engine.kv_pool" in [_dotted(p) for p in torch_examples()]
