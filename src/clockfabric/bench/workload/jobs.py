"""Jobs on a lab, as the workload benchmarks make them (their flows: clockfabric.lab.flows), and
the controller's verdict on a job and its alerts."""

from __future__ import annotations

import dataclasses
import subprocess
import time
from collections.abc import Iterator
from contextlib import contextmanager

from clockfabric.errors import ClockfabricError
from clockfabric.lab.flows import PACED, flow
from clockfabric.lab.monitoring import LabFleet
from clockfabric.probe.paths import spread
from clockfabric.topology import TrafficClasses, leafspine

COLLECTIVE = 26
FABRIC_BPS = 20_000_000


def why(fleet: LabFleet, jobid: str, since: str = "60s") -> dict | None:
    """The controller's verdict on the job now; None while it does not know the job."""
    try:
        return fleet.api(f"/api/v1/jobs/{jobid}/why", since=since)
    except ClockfabricError:  # 404 until the job's processes are pushed
        return None


def known(fleet: LabFleet, jobid: str, flows: int, timeout_s: float = 90.0) -> dict:
    """Wait until the controller judges `flows` flows of the job healthy, each with its traced
    path (4 links: host, leaf, spine, leaf, host) and its in-band delay: a loaded machine's
    agents may push a new flow's readings seconds late, and a fault injected before would be
    judged on nothing."""
    deadline = time.monotonic() + timeout_s
    w: dict = {}
    while time.monotonic() < deadline:
        w = why(fleet, jobid, "10s") or {}
        rows = w.get("flows", [])
        if w.get("verdict") == "healthy" and len(rows) == flows and all(
                len(r.get("links") or []) == 4 and r.get("delay_source") == "inband" for r in rows):
            return w
        time.sleep(1.0)
    raise ClockfabricError(f"job {jobid}'s {flows} flows were not all judged healthy, traced and measured in-band "
                           f"in {timeout_s:.0f} s; last verdict: {w.get('verdict')}, flows: {w.get('flows')}")


def alerts(fleet: LabFleet, kind: str, since_ns: int) -> list[dict]:
    """The controller's alerts of `kind` opened since `since_ns`."""
    found = fleet.api("/api/v1/alerts", since_ns=since_ns, limit=1000)
    return [a for a in found.get("items", []) if a.get("kind") == kind]


@dataclasses.dataclass
class TwoJobs:
    """A lab with agents, a controller and jobs A and B running (see `two_jobs`)."""

    fleet: LabFleet
    procs: list[subprocess.Popen]
    straggler: list[subprocess.Popen]  # A's h2 -> h1 flow: its receiver, then its sender


@contextmanager
def two_jobs(name: str, settle_s: float) -> Iterator[TwoJobs]:
    """Lab `name` (leaf-spine, 4 hosts, 2 spines, 20 Mbit/s fabric links, traffic classes), its
    agents and controller, and two jobs marking the collective class: A with three paced flows
    (h0 -> h2 on spine1, h0 -> h3 and h2 -> h1 on spine0), B with one (h1 -> h3 on spine0);
    yielded `settle_s` + 5 s after they start, and all of it stopped and removed on the way out."""
    from clockfabric.bench.harness import labs_removed
    from clockfabric.lab import build
    from clockfabric.lab.process import stop

    topo = dataclasses.replace(leafspine(4, 2, 2, host_rate="100mbit", fabric_rate=f"{FABRIC_BPS // 10**6}mbit"),
                               classes=TrafficClasses())
    with labs_removed(name):
        build.down(name)
        lab = build.up(topo, name)
        fleet = LabFleet(lab, peers=3)
        fleet.start()
        procs: list[subprocess.Popen] = []
        try:
            fleet.wait_pushing()
            logs = fleet.logs
            procs += flow(lab, logs, "A", "h0", "h2", 5401, spine="spine1", spread=spread, dscp=COLLECTIVE, **PACED)
            procs += flow(lab, logs, "A", "h0", "h3", 5402, spine="spine0", spread=spread, dscp=COLLECTIVE, **PACED)
            straggler = flow(lab, logs, "A", "h2", "h1", 5403, spine="spine0", spread=spread, dscp=COLLECTIVE,
                             **PACED)
            procs += straggler
            procs += flow(lab, logs, "B", "h1", "h3", 5404, spine="spine0", spread=spread, dscp=COLLECTIVE,
                          chunk=4096, pause_s=0.01)
            time.sleep(settle_s + 5)  # rates, paths and in-band delays for every flow
            known(fleet, "A", flows=3)
            yield TwoJobs(fleet, procs, straggler)
        finally:
            stop(procs, grace_s=2.0)
            fleet.stop()
