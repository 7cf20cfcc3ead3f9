"""The dashboards in deploy/grafana and the PromQL of every panel, with Grafana's variables
given the values that select everything (as the dashboards' "All" does)."""

from __future__ import annotations

import json
from pathlib import Path

DASHBOARDS = sorted((Path(__file__).resolve().parents[1] / "deploy" / "grafana").glob("*.json"))
VARIABLES = {"$__rate_interval": "1m", "$host": ".*", "$jobid": ".*"}


def load(path: Path) -> dict:
    return json.loads(path.read_text())


def panel_queries(dashboard: dict) -> list[tuple[str, str]]:
    """(panel title, PromQL) for every query of every panel, variables filled in."""
    out = []
    for panel in dashboard["panels"]:
        for target in panel["targets"]:
            expr = target["expr"]
            for name, value in VARIABLES.items():
                expr = expr.replace(name, value)
            out.append((panel["title"], expr))
    return out
