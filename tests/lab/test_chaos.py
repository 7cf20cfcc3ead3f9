"""The chaos soak, short: a lab fleet under one round of faults, every kind once and the agent kills
twice, in a random order (bench/monitoring/chaos.py), keeps every event it acknowledged and every
event an agent held when it was killed, every agent and controller loop alive, every clock within
its bound, and sees every fault. `clockfabric bench chaos --minutes N` is the long run."""

from __future__ import annotations

from clockfabric.bench.monitoring.chaos import small_disk, soak, verdict
from clockfabric.bench.monitoring.chaos_agents import AllFaults
from clockfabric.lab.monitoring import LabFleet
from clockfabric.topology import leafspine


def test_a_round_of_chaos_loses_nothing_acknowledged_or_held_and_every_fault_is_seen(make_lab):
    lab = make_lab(leafspine(4, 2, 2, host_rate="200mbit"))
    with small_disk(lab.dir / "db") as disk:
        fleet = LabFleet(lab, peers=3, db=disk / "controller.db")
        fleet.start()
        try:
            fleet.wait_pushing()
            report = soak(lab, fleet, minutes=0, seed=7, log=print)
        finally:
            fleet.stop()
    print({k: report[k] for k in ("faults", "by_kind", "acknowledged", "served", "lost", "clocks")})
    assert set(report["by_kind"]) == set(AllFaults.KINDS), report["by_kind"]
    assert report["by_kind"]["agent_kill"] == report["by_kind"]["agent_kill_held"] == 2, report["by_kind"]
    assert report["acknowledged"] > 100
    assert verdict(report) == []
