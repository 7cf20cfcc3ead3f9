"""`clockfabric discover` on a real lab: agents and a controller run, the hosts and switches
hear each other by LLDP, and the fleet file discover writes loads and describes the lab's
own hosts (with their addresses), switches (with roles and planes) and cables."""

from __future__ import annotations

import subprocess
import sys

import pytest

from clockfabric.lab.monitoring import LabFleet
from clockfabric.topology import load, multirail
from tests.waiting import wait_for


def shape(topo):
    return ({h.name: (h.address, h.nics) for h in topo.hosts.values()}, topo.switches,
            {frozenset((lk.a, lk.b)) for lk in topo.links})


@pytest.fixture
def fleet(make_lab):
    lab = make_lab(multirail(4, 2, 1, 1))
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
