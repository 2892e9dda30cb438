"""Known answers for the Configurations page's run (scenarios/configs.py) and table and charts
(viz/configs.py): the four configurations on the three-request walk."""

from __future__ import annotations

import pytest

from radix.runs.sim import CONFIGS
from radix.traces import TraceError
from scenarios.configs import LABELS, SCENARIOS, run_configs, scenario_trace, workload_trace
from viz.configs import config_table, cumulative, hit_rate_figure, prefilled_figure

WALK = "three-request walk (3)"


def test_four_configs_in_design_order():
    runs = run_configs(scenario_trace(WALK))
    assert [r.name for r in runs] == [name for name, _ in CONFIGS]
    assert [r.label for r in runs] == list(LABELS.values())


def test_cumulative_series_baseline_and_page16():
    """Baseline: matched 0, 2,055, 512 of 2,151, 2,135, 2,624 -> hit rate 0, 2,055 / 4,286,
    2,567 / 6,910; prefilled 2,151, 2,151 + 80 = 2,231, 2,231 + 2,112 = 4,343.
    Page 16: R2 matches 128 pages = 2,048, prefills 87: 2,151, 2,238, 4,350."""
    runs = run_configs(scenario_trace(WALK))
    arrivals, rates, prefilled = cumulative(runs[0].rows)
    assert arrivals == [0.0, 1.0, 2.0]
    assert [round(x, 4) for x in rates] == [0.0, round(2_055 / 4_286, 4), round(2_567 / 6_910, 4)]
    assert prefilled == [2_151, 2_231, 4_343]
    assert cumulative(runs[2].rows)[2] == [2_151, 2_238, 4_350]


def test_table_and_figures():
    """Disabled: 6,910 / 22,036 tok/s = 0.314 s of prefill, derived; one line per config."""
    runs = run_configs(scenario_trace(WALK))
    table = config_table(runs)
    assert table["prefill s (derived)"][3] == "0.314" and table["hit rate (blocks)"][2] == "37.0%"
    assert len(table["configuration"]) == 4
    fig = hit_rate_figure(runs)
    assert [t.name for t in fig.data] == list(LABELS.values())
    assert list(prefilled_figure(runs).data[3].y) == [2_151, 4_286, 6_910]


def test_every_scenario_loads():
    for label in SCENARIOS:
        trace = scenario_trace(label)
        assert trace.format == "request" and len(trace.requests) >= 3
    assert len(scenario_trace("Mooncake excerpt").requests) == 200


def test_workload_trace_for_each_source():
    """The page's three sources: a scenario (the three-request walk: 3 requests), the Mooncake
    excerpt (its file), an upload's bytes (one request); a bad upload names line and field."""
    assert len(workload_trace(("scenario", "three-request walk (3)")).requests) == 3
    assert workload_trace(("mooncake",)).format == "mooncake"
    up = b'{"rid": "u", "arrival": 0, "tokens": [1, 2], "output_len": 1}\n'
    assert [r.rid for r in workload_trace(("upload", "d"), up).requests] == ["u"]
    with pytest.raises(TraceError, match='line 1, field "tokens"'):
        workload_trace(("upload", "d"), b'{"rid": "u", "arrival": 0, "tokens": 3}\n')
