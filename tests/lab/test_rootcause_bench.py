"""`bench rootcause`'s case runner on a real lab: a drawn healthy case (a small fabric, one job of
three paced flows) ends with a verdict, healthy, and a record with every field that replays it."""

from __future__ import annotations

from clockfabric.bench.rootcause.case import RECORD_FIELDS, run_case
from clockfabric.bench.rootcause.draw import HEALTHY, draw
from tests.lab.conftest import PREFIX

SEED = 46  # its first case: 5 hosts, 3 leaves, 2 spines, FIFO ports, one job of 3 paced flows, healthy


def test_a_drawn_healthy_case_gets_a_healthy_verdict_and_a_full_record():
    case = draw(SEED, 0)
    assert case.fault.kind == HEALTHY and case.hosts == 5 and len(case.jobs[0].flows) == 3
    row = run_case(case, f"{PREFIX}rc", watch_s=8.0)
    assert row.get("error") is None, row.get("error")
    assert set(RECORD_FIELDS) <= set(row), set(RECORD_FIELDS) - set(row)
    assert row["verdict"] == HEALTHY and row["right"], row
    assert row["polls"] >= 3 and row["cost_s"] > 0
    assert draw(row["case"]["seed"], row["case"]["index"]).row() == row["case"]
