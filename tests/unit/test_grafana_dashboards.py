"""The Grafana dashboards are importable JSON: each panel lists its PromQL, on the dashboard's
Prometheus variable, with no variable left that the query test cannot fill."""

from __future__ import annotations

import re

from tests.grafana import DASHBOARDS, load, panel_queries


def test_there_are_fleet_fabric_clock_and_jobs_dashboards():
    assert [p.stem for p in DASHBOARDS] == ["clockfabric-clock", "clockfabric-fabric", "clockfabric-fleet",
                                            "clockfabric-jobs"]
    uids = [load(p)["uid"] for p in DASHBOARDS]
    assert len(set(uids)) == len(uids)


def test_every_panel_has_a_query_on_the_prometheus_variable():
    for path in DASHBOARDS:
        dashboard = load(path)
        assert {"datasource", "host"} <= {v["name"] for v in dashboard["templating"]["list"]}
        ids = [p["id"] for p in dashboard["panels"]]
        assert len(set(ids)) == len(ids), path.name
        for panel in dashboard["panels"]:
            assert panel["targets"], f"{path.name}: {panel['title']} has no query"
            assert panel["datasource"]["uid"] == "${datasource}"
            for target in panel["targets"]:
                assert target["expr"].strip() and target["datasource"]["uid"] == "${datasource}"


def test_no_variable_is_left_unfilled():
    for path in DASHBOARDS:
        for title, expr in panel_queries(load(path)):
            assert not re.search(r"\$\w", expr), f"{path.name}: {title}: {expr}"
