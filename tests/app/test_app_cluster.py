"""AppTest for the Cluster page: the classroom under cache-aware and round robin."""

from __future__ import annotations

from apphelp import page, plain, plotly_specs


def test_classroom_cache_aware_falls_back_and_beats_round_robin():
    """Default: cache-aware on the classroom. Three replica trees and the router's approximate
    tree are drawn (4 graphviz charts); the last request (A-t8, the burst's fifth) is an
    imbalance fallback; the comparison table puts cache-aware's hit rate above round
    robin's (55.4% against 29.5%: scenarios/routing.py's run, one test in test_cluster_sim
    holds the ordering on its own trace)."""
    at = page("cluster").run()
    assert not at.exception and not at.error
    assert len(at.get("graphviz_chart")) == 4
    sentence = " ".join(plain(m.value) for m in at.markdown)
    assert "A-t8" in sentence and "imbalanced" in sentence
    table = at.dataframe[-1].value
    rates = dict(zip(table["router"], table["hit_rate"], strict=True))
    assert float(rates["cache-aware"].rstrip("%")) > float(rates["round-robin"].rstrip("%"))
    at.selectbox(key="cluster.router").set_value("round-robin").run()
    assert not at.exception and len(at.get("graphviz_chart")) == 3  # no router view to draw
    assert "round robin: replica" in " ".join(plain(m.value) for m in at.markdown)
    at.selectbox(key="cluster.router").set_value("kv-overlap").run()  # its view: block counts
    assert not at.exception and len(at.get("graphviz_chart")) == 3
    assert "blocks each replica reported storing: replica 0:" in " ".join(
        plain(m.value) for m in at.markdown)


def test_step_deep_link_and_bad_upload():
    at = page("cluster")
    at.query_params["step"] = "1"
    at.run()
    assert "A-t1" in " ".join(plain(m.value) for m in at.markdown)
    at.radio(key="cluster.source").set_value("an uploaded trace").run()
    assert not at.exception and at.info  # asks for a file


def test_sweep_button_draws_hit_rate_and_p99_against_replicas():
    at = page("cluster").run()
    at.button(key="cluster.sweep_button").click().run()
    assert not at.exception
    specs = plotly_specs(at)  # the routing chart is an ECharts one
    assert len(specs) == 2 and len(specs[0]["data"]) == 8  # a line per router
    assert specs[0]["data"][0]["x"] == [1, 2, 3, 4]


def _dots(at) -> list[str]:
    return [c.proto.spec for c in at.get("graphviz_chart")]


def test_slider_shows_the_trees_right_after_that_request():
    """Round robin: after request 1 (A-t1, to replica 0) only replica 0's tree holds anything,
    on the yellow ground with A-t1's path bold; after request 2 (B-t1) replica 1 holds it too
    and is the one highlighted; the arrow line names the router's choice."""
    at = page("cluster")
    at.query_params["router"] = "round-robin"
    at.query_params["step"] = "1"
    at.run()
    dots = _dots(at)
    assert "#fff4c2" in dots[0] and "penwidth=3" in dots[0] and "n1 " in dots[0]
    assert "n1 " not in dots[1] and "#fff4c2" not in dots[1]
    assert "router → **replica 0**" in " ".join(plain(m.value) for m in at.markdown)
    at.slider(key="cluster.step").set_value(2).run()
    dots = _dots(at)
    assert not at.exception and "n1 " in dots[1] and "#fff4c2" in dots[1]
    assert "#fff4c2" not in dots[0] and "n1 " not in dots[2]
    assert "router → **replica 1**" in " ".join(plain(m.value) for m in at.markdown)


def test_routing_chart_is_keyed_and_rings_the_slider_request():
    """The routing picture is a keyed ECharts chart (its element id is the key's, so the slider
    redraws it in place: a plotly figure was re-mounted blank for a frame, #24). Round robin,
    request 2 (B-t1, to replica 1): a dot per request in its replica's row, the ring on
    (2, "replica 1"), the dotted path from the router's row to it; moving the slider keeps the
    id and moves the ring."""
    import json

    at = page("cluster")
    at.query_params["router"] = "round-robin"
    at.query_params["step"] = "2"
    at.run()
    (chart,) = at.get("echarts_chart")
    option = json.loads(chart.proto.spec)
    assert option["yAxis"]["data"][:2] == ["router", "replica 0"]
    ring = next(s for s in option["series"] if s["name"] == "this request")
    path = next(s for s in option["series"] if s["name"] == "path")
    assert ring["data"] == [[2, "replica 1"]] and path["data"] == [[2, "router"], [2, "replica 1"]]
    dots = [d["value"] for s in option["series"] if s["type"] == "scatter"
            and s["name"] != "this request" for d in s["data"]]
    assert [1, "replica 0"] in dots and [2, "replica 1"] in dots
    first = chart.proto.id
    at.slider(key="cluster.step").set_value(3).run()
    (chart,) = at.get("echarts_chart")
    ring = next(s for s in json.loads(chart.proto.spec)["series"] if s["name"] == "this request")
    assert chart.proto.id == first and ring["data"][0][0] == 3
