"""The series an agent writes for a job stay as many however many processes it starts and however
many connections it makes: real processes read from the real /proc, and real loopback connections
read through sock_diag, by the workload monitor."""

from __future__ import annotations

import os
import subprocess
import sys
import uuid

from clockfabric.agent.metrics import workload_metrics
from clockfabric.workload import samples
from clockfabric.workload.monitor import WorkloadMonitor
from clockfabric.workload.procfs import ProcFs
from clockfabric.workload.sockets import KernelSockets

# a job process that opens N connections to its own listener on loopback, says so, and holds them
CONNECT = """
import socket, sys, time
n = int(sys.argv[1])
server = socket.create_server(("127.0.0.1", 0), backlog=n)
ends = []
for _ in range(n):
    ends.append(socket.create_connection(server.getsockname()))
    ends.append(server.accept()[0])
    ends[-2].sendall(b"x" * 1000)
print(flush=True)
time.sleep(60)
"""


def series_of(jobid: str, n: int) -> tuple[set[tuple[str, tuple]], dict, list[int]]:
    """Start `n` processes of job `jobid` (all rank 0 of one run); what the agent would write for
    it: the set of (name, labels), the job_processes values, and the pids its push info names."""
    env = {**os.environ, "CLOCKFABRIC_JOB": jobid, "CLOCKFABRIC_JOB_RUN": "r1", "RANK": "0"}
    procs = [subprocess.Popen([sys.executable, "-c", "import time; print(flush=True); time.sleep(60)"],  # noqa: S603
                              env=env, stdout=subprocess.PIPE) for _ in range(n)]
    try:
        for p in procs:  # each has exec'd with the job's environment before the monitor reads it
            assert p.stdout is not None and p.stdout.readline() == b"\n"
        view = WorkloadMonitor(ProcFs(), None).update()
        written = [s for s in samples.push_samples(view) if s["labels"].get("jobid") == jobid]
        info = [p["pid"] for p in samples.summary(view)["processes"] if p["jobid"] == jobid]
    finally:
        for p in procs:
            p.kill()
        for p in procs:
            p.wait()
            p.stdout.close()
    keys = {(s["name"], tuple(sorted(s["labels"].items()))) for s in written}
    counts = {s["labels"]["rank"]: s["value"] for s in written if s["name"] == samples.PROCESSES}
    return keys, counts, sorted(info)


def test_a_job_starting_more_processes_writes_no_more_series():
    jobid = f"bounded-{uuid.uuid4().hex[:8]}"
    few, few_counts, few_pids = series_of(jobid, 3)
    many, many_counts, many_pids = series_of(jobid, 40)
    assert few == many and len(many) == 2  # job_processes and job_start_seconds, for rank 0 of run r1
    assert all("pid" not in dict(labels) for _, labels in many)
    assert few_counts == {"0": 3} and many_counts == {"0": 40}  # the count follows the processes
    assert len(few_pids) == 3 and len(many_pids) == 40  # each pid is in the push's info instead


def flow_series_of(jobid: str, connections: int) -> tuple[set[tuple[str, tuple]], int, dict]:
    """What the agent writes for job `jobid` while one of its processes holds `connections` loopback
    connections (both ends its own): the set of (name, labels) over two updates, its /metrics'
    among them, how many flows the push's info names, and the group's pushed values."""
    env = {**os.environ, "CLOCKFABRIC_JOB": jobid, "CLOCKFABRIC_JOB_RUN": "r1", "RANK": "0"}
    proc = subprocess.Popen([sys.executable, "-c", CONNECT, str(connections)], env=env,  # noqa: S603
                            stdout=subprocess.PIPE)
    sockets = KernelSockets()
    try:
        assert proc.stdout is not None and proc.stdout.readline() == b"\n"
        monitor = WorkloadMonitor(ProcFs(), sockets)
        keys: set[tuple[str, tuple]] = set()
        for _ in range(2):  # a rate needs two readings
            view = monitor.update()
            written = [s for s in samples.push_samples(view) if s["labels"].get("jobid") == jobid]
            keys |= {(s["name"], tuple(sorted(s["labels"].items()))) for s in written}
        named = [f for f in samples.summary(view)["flows"] if f["jobid"] == jobid]
        exported = workload_metrics({"workload": {**samples.state(view), "cpu_seconds": 0.0}})
        keys |= {("/metrics " + m.name, tuple(sorted(m.labels.items())))
                 for m in exported if m.labels.get("jobid") == jobid}
        values = {s["name"]: s["value"] for s in written}
    finally:
        sockets.close()
        proc.kill()
        proc.wait()
        proc.stdout.close()
    return keys, len(named), values


def test_a_job_making_more_connections_writes_no_more_series():
    jobid = f"bounded-{uuid.uuid4().hex[:8]}"
    few, few_named, _ = flow_series_of(jobid, 10)
    many, many_named, values = flow_series_of(jobid, 200)
    assert few == many  # the same (name, labels), each flow stat once for the one group
    assert {dict(labels).get("flow") for name, labels in many if name.startswith("job_flow_")} == {
        "127.0.0.1->127.0.0.1"}
    assert all(":" not in dict(labels).get("flow", "") and "pid" not in dict(labels) for _, labels in many)
    assert {"job_flow_rtt_us", "job_flow_cwnd", "job_flow_tx_bps", "/metrics clockfabric_job_flow_rtt_seconds"} <= {
        name for name, _ in many}
    assert few_named == 2 * 10 and many_named == 2 * 200  # every connection's two ends, by 5-tuple, in the info
    assert values["job_flow_tx_bps"] == 0.0  # nothing sent between the two readings: summed, not a spike
