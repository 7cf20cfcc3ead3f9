"""Slurm for real on a lab: slurmctld in h0's namespace, one slurmd per host in its own, the
shipped prolog auditing each node. A host with a planted MTU mismatch is drained with the
audit's reason before any step runs on it, and the job is requeued and runs on healthy hosts,
whose processes carry the Slurm job id that workload monitoring names jobs by."""

from __future__ import annotations

import re
import statistics
import time
from pathlib import Path

import pytest

from clockfabric.lab import netns
from clockfabric.lab.lldp import speaker
from clockfabric.lab.slurm import Cluster, no_slurm
from clockfabric.topology import multirail
from clockfabric.workload.jobs import identify, parse_environ

pytestmark = pytest.mark.skipif(bool(no_slurm), reason=no_slurm)
HOSTS = ("h0", "h1", "h2")
FAULTY = "h1"  # the lowest hosts are allocated first: h0 and h1 get the job before the fault is found
# The target is 2 s a healthy prolog, judged by `bench slurm-prolog`; here two prologs run at once
# beside slurmctld, the slurmds and whatever else loads the machine (1.4-1.7 s measured), so the
# test prints the figures and bounds them only against a prolog that waits out a timeout.
PROLOG_BOUND_S = 10.0
ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture
def cluster(make_lab):
    lab = make_lab(multirail(hosts=len(HOSTS), planes=1, leaves=1, spines=1))
    found = Cluster(lab, HOSTS, ROOT)
    lldp = speaker(lab)  # the lab's switches announce themselves, as real ones do
    lldp.start()
    try:
        found.start()
        yield found
    finally:
        found.stop()
        lldp.stop()


def prolog_seconds(log: str) -> dict[str, list[float]]:
    """Each healthy prolog's own measure of itself, by host."""
    out: dict[str, list[float]] = {}
    for host, seconds in re.findall(r"prolog on (\w+) \(job \d+\): passes.*\[([\d.]+) s\]", log):
        out.setdefault(host, []).append(float(seconds))
    return out


def test_a_faulty_node_is_drained_and_the_job_runs_on_healthy_ones(cluster):
    with netns.ipr(cluster.lab.ns(FAULTY)) as ipr:
        ipr.link("set", index=ipr.link_lookup(ifname="eth0")[0], mtu=9000)  # the fabric runs 1500
    out = cluster.dir / "job"
    out.mkdir()
    script = cluster.dir / "job.sh"
    script.write_text(f"#!/bin/sh\nsrun sh -c 'cat /proc/$$/environ > {out}/environ-$SLURMD_NODENAME'\n")
    started = time.monotonic()
    jobid = cluster.run("sbatch", "--parsable", "-N2", "-o", str(out / "slurm-%j.out"), str(script)).strip()
    cluster.wait(lambda: cluster.job(jobid).get("JobState") == "COMPLETED", f"job {jobid} completed", 120)
    job = cluster.job(jobid)
    log = (cluster.dir / "log" / "node-audit.log").read_text()
    assert job["NodeList"] == "h[0,2]" and job["Restarts"] == "1", (job, log)
    reason = cluster.run("sinfo", "-N", "-h", "-n", FAULTY, "-o", "%T|%E").strip()
    assert reason == "drained|clockfabric audit: frontend.mtu eth0: MTU 9000; plane 0 uses 1500", log
    assert cluster.states() == {"h0": "idle", FAULTY: "drained", "h2": "idle"}
    # no step ever ran on the faulty node; each step on a healthy one carries the job id
    assert sorted(p.name for p in out.glob("environ-*")) == ["environ-h0", "environ-h2"]
    for path in out.glob("environ-*"):
        tag = identify(parse_environ(path.read_bytes()))
        assert tag is not None and (tag.jobid, tag.source) == (f"slurm:{jobid}", "slurm")
    seconds = prolog_seconds(log)
    healthy = [s for host in ("h0", "h2") for s in seconds.get(host, [])]
    print(f"\njob {jobid} done in {time.monotonic() - started:.1f} s; healthy prologs took {healthy} s")
    assert len(healthy) >= 3  # h0 before and after the requeue, h2 after
    assert statistics.median(healthy) <= PROLOG_BOUND_S, log
