"""The chaos soak, short: a lab fleet under a minute of random faults (bench/monitoring/chaos.py) keeps every
event it acknowledged, every agent and controller loop alive, every clock within its bound, and
sees every fault. `clockfabric bench chaos --minutes N` is the long run."""

from __future__ import annotations

from clockfabric.bench.monitoring.chaos import soak, verdict
from clockfabric.lab.monitoring import LabFleet
from clockfabric.topology import leafspine


def test_a_minute_of_chaos_loses_nothing_acknowledged_and_every_fault_is_seen(make_lab):
    lab = make_lab(leafspine(4, 2, 2, host_rate="200mbit"))
    fleet = LabFleet(lab, peers=3)
    fleet.start()
    try:
        fleet.wait_pushing()
        report = soak(lab, fleet, minutes=1.0, seed=7, log=print)
    finally:
        fleet.stop()
    print({k: report[k] for k in ("faults", "by_kind", "acknowledged", "served", "lost", "clocks")})
    assert report["faults"] >= 8, report["by_kind"]
    assert report["acknowledged"] > 100
    assert verdict(report) == []
