"""The series an agent writes for a job stay as many however many processes the job starts: real
processes, read from the real /proc by the workload monitor, counted into bounded series."""

from __future__ import annotations

import os
import subprocess
import sys
import uuid

from clockfabric.workload import samples
from clockfabric.workload.monitor import WorkloadMonitor
from clockfabric.workload.procfs import ProcFs


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
