"""`clockfabric discover` on a real lab: agents and a controller run, the hosts and switches
hear each other by LLDP, and the fleet file discover writes loads and describes the lab's
own hosts (with their addresses), switches (with roles and planes) and cables. Twice, on one lab:
with the lab's own switch agents, and as on a real fleet's first day (no fleet file anywhere,
switches running lldpd and no agent of ours, the controller holding hosts for approval)."""

from __future__ import annotations

import subprocess
import sys

import pytest

from clockfabric.lab import lldpd
from clockfabric.lab.monitoring import LabFleet
from clockfabric.topology import load, multirail
from tests.waiting import wait_for

CLI = [sys.executable, "-m", "clockfabric.cli"]


def shape(topo):
    return ({h.name: (h.address, h.nics) for h in topo.hosts.values()}, topo.switches,
            {frozenset((lk.a, lk.b)) for lk in topo.links})


@pytest.fixture(scope="module")
def lab(make_module_lab):
    return make_module_lab(multirail(4, 2, 1, 1))


@pytest.fixture
def fleet(lab):
    fleet = LabFleet(lab, peers=3)
    fleet.start()
    try:
        nodes = len(lab.topology.hosts) + len(lab.topology.switches)
        assert fleet.wait_pushing() == nodes
        yield fleet
    finally:
        fleet.stop()


def test_discover_writes_the_labs_own_fleet_file(fleet, tmp_path):
    out = tmp_path / "fleet.yaml"

    def discovered():
        # until every NIC and port has heard its neighbour (switch agents announce every 2 s)
        run = subprocess.run([sys.executable, "-m", "clockfabric.cli", "discover", "--lab", fleet.lab.name,
                              "-o", str(out), "--name", "found"], capture_output=True, text=True, timeout=60)
        return run.returncode == 0 and shape(load(out)) == shape(fleet.lab.topology) and run

    run = wait_for("a discovered fleet file equal to the lab's", discovered, timeout_s=60, every_s=1.0)
    assert "4 hosts, 4 switches, 10 links on 2 planes: wrote" in run.stderr
    found = load(out)
    assert found.name == "found"
    assert {s.name: (s.role, s.plane) for s in found.switches.values()} == {
        "p0-leaf0": ("leaf", 0), "p0-spine0": ("spine", 0), "p1-leaf0": ("leaf", 1), "p1-spine0": ("spine", 1)}


def test_a_fleet_with_no_fleet_file_is_approved_and_discovered_with_its_switches_lldpd(lab, tmp_path):
    fleet = LabFleet(lab, discovering=True)
    fleet.start()
    try:
        held = {h["host"]: h for h in fleet.wait_pending()}
        assert set(held) == set(lab.topology.hosts)
        assert {h: (held[h]["state"], held[h]["address"]) for h in held} == {
            h: ("pending", str(node.address)) for h, node in lab.topology.hosts.items()}
        assert fleet.api("/api/v1/fleet")["hosts"] == 0  # held, not admitted
        wait_for("each host hearing its leaves' lldpd", lambda: all(
            h["neighbours"] == {"eth0": f"p0-leaf0:swp{i + 1}", "eth1": f"p1-leaf0:swp{i + 1}"}
            for i, h in enumerate(fleet.api("/api/v1/pending")["items"])), timeout_s=30, every_s=1.0)

        approve = subprocess.run([*CLI, "hosts", "approve", "--all", "--lab", lab.name], capture_output=True,
                                 text=True, timeout=60)
        assert approve.returncode == 0 and approve.stdout.split() == [
            word for h in sorted(lab.topology.hosts) for word in (f"{h}:", "approved")], approve.stderr
        out = tmp_path / "fleet.yaml"
        argv = [*CLI, "discover", "--lab", lab.name, "-o", str(out), "--lldpcli", lldpd.lldpcli(lab),
                "--switch", ",".join(sorted(lab.topology.switches))]

        def discovered():
            run = subprocess.run(argv, capture_output=True, text=True, timeout=60)
            return run.returncode == 0 and shape(load(out)) == shape(lab.topology) and run

        run = wait_for("a fleet file equal to the lab's, from the hosts and the switches' lldpd", discovered,
                       timeout_s=60, every_s=1.0)
        assert "4 hosts, 4 switches, 10 links on 2 planes: wrote" in run.stderr
        shown = subprocess.run([*CLI, "topology", "show", str(out)], capture_output=True, text=True, timeout=60)
        assert shown.returncode == 0, shown.stderr
    finally:
        fleet.stop()
