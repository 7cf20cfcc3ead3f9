"""The workload monitor on real processes with real sockets on loopback, read through /proc and
sock_diag as the agent reads them: every job found, every flow of it attributed. (What it costs
is `clockfabric bench workload-cost`'s to measure, not a test's.)"""

from __future__ import annotations

import pytest

from clockfabric.bench.workload.cost import jobs_running
from clockfabric.workload.monitor import WorkloadMonitor
from clockfabric.workload.procfs import ProcFs

JOBS, CONNECTIONS = 4, 8  # each connection is two sockets of the job's process: 16 flows a job


@pytest.fixture
def sockets():
    try:
        from clockfabric.workload.sockets import KernelSockets
        reader = KernelSockets()
    except Exception as e:  # noqa: BLE001 - a sandbox without sock_diag
        pytest.skip(f"no sock_diag here: {e}")
    yield reader
    reader.close()


def test_4_jobs_of_16_flows_are_all_found(sockets):
    with jobs_running(JOBS, CONNECTIONS, prefix="costtest") as names:
        view = WorkloadMonitor(ProcFs(), sockets).update()
    mine = {j for j in view.jobs if j in names}
    assert mine == set(names)
    flows = [f for f in view.flows if f.jobid in names]
    assert len(flows) == JOBS * 2 * CONNECTIONS
    assert {f.jobid for f in flows} == set(names)


def test_paired_runs_give_each_pairs_ratio_and_an_interval_around_their_median():
    from clockfabric.bench.workload.cost_ddp import Pairs

    pairs = Pairs(with_workload=[0.404, 0.396, 0.410, 0.400], without=[0.400, 0.400, 0.400, 0.400],
                  order=["A", "B", "A", "B"])
    assert pairs.ratios == pytest.approx([1.01, 0.99, 1.025, 1.0])
    low, high = pairs.interval()
    assert 0.99 <= low <= 1.005 <= high <= 1.025  # the median (1.005) inside, within the pairs' range
    assert pairs.as_dict()["ratio"] == pairs.ratios and pairs.as_dict()["first"] == ["A", "B", "A", "B"]
