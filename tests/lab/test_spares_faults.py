"""Spares under harder faults, on a real PyTorch job (gloo, CPU) on lab hosts: two ranks killed
in the same step, the spare killed while it joins, and a rank moved off a GPU that reported a
critical XID (the fake NVML injecting it) before it crashes."""

import os
import signal
import time

import pytest

from clockfabric.audit.checks.config_gpu import CRITICAL_XIDS
from clockfabric.telemetry.nvidia_gpu import NvidiaGpuCollector
from clockfabric.topology import multirail
from clockfabric.train import report
from tests.fakes.fake_nvml import FakeGpu, FakeNvml
from tests.lab.test_spares import ARGS, RANKS, STEPS, run

pytest.importorskip("torch", reason="torch is not installed (make setup installs the job extra)")

SPARES = ["h3", "h4"]


def check_carried_on(recs, reference: dict[int, str], injected_at: float, limit_s: float = 10.0) -> float:
    """No completed step lost or repeated, bit-equal to the failure-free run; the time to the next step."""
    assert report.job_steps(recs) == list(range(STEPS)), "a completed step was lost"
    for rank, steps in report.steps_by_rank(recs).items():
        assert steps == sorted(set(steps)), f"rank {rank} repeated a completed step: {steps}"
    assert report.digests(recs) == reference
    took, learned = report.recovery_s(recs, injected_at), report.failed_s(recs, injected_at)
    assert took is not None and (not learned or learned[0] < limit_s), (took, learned)
    # from the last survivor learning: one caught sending to a lost rank waits out gloo's timeout
    assert took - (learned[-1] if learned else 0.0) < limit_s, (took, learned)
    return took


def test_two_ranks_killed_in_the_same_step_are_both_replaced(make_lab, tmp_path, failure_free):
    lab = make_lab(multirail(5, 2, 2, 2))
    reference = failure_free(ARGS)

    def kill_two(job):
        for rank in (0, 2):
            os.kill(job.ranks[rank].proc.pid, signal.SIGKILL)

    job, recs, killed_at = run(lab, tmp_path / "two", SPARES, kill_two)
    took = check_carried_on(recs, reference, killed_at)
    detected = [e for e in job.events if e["event"] == "detected"]
    assert sorted(e["rank"] for e in detected) == [0, 2] and all("exited" in e["why"] for e in detected)
    assert sorted([job.ranks[0].host, job.ranks[2].host]) == SPARES and job.ranks[1].host == "h1"
    last = max(r["generation"] for r in recs if r.get("event") == "joined")
    assert {r["rank"] for r in recs if r.get("event") == "joined" and r["generation"] == last} == {0, 1, 2}
    print(f"two ranks killed: next step {took:.2f} s after, generation {last}")


def forming(job, number: int) -> bool:
    with job.lock:
        gen = job.gen
    return gen is not None and gen.number == number and job.board.all_ready(gen)


def test_the_spare_killed_while_it_joins_is_replaced_by_the_next_spare(make_lab, tmp_path, failure_free):
    lab = make_lab(multirail(5, 2, 2, 2))
    args = [*ARGS[:-1], "512"]  # a larger state: the spare is killed with the transfer under way
    reference = failure_free(args)
    folder = tmp_path / "spare-killed"
    spare_killed = {}

    def kill_rank_then_the_spare(job):
        os.kill(job.ranks[1].proc.pid, signal.SIGKILL)
        deadline = time.monotonic() + 30
        while not forming(job, 1):  # every member of generation 1 is ready: the group forms
            assert time.monotonic() < deadline, job.events
            time.sleep(0.005)
        time.sleep(0.1)  # gloo connecting the group, or the state (0.4 s on a 100 Mbit/s link) on its way
        spare_killed["at"] = time.time()
        os.kill(job.ranks[1].proc.pid, signal.SIGKILL)

    job, recs, killed_at = run(lab, folder, SPARES, kill_rank_then_the_spare, args=args)
    # killed in the transfer: the survivors abandon it once the next generation names the spare
    # lost (group.Superseded), and form that generation; killed while gloo connects the group,
    # their join fails within group.FORM_S (docs/spares.md)
    took = check_carried_on(recs, reference, killed_at, limit_s=15.0)
    after_spare = report.recovery_s(recs, spare_killed["at"])
    assert after_spare is not None
    broke = [r["error"] for r in recs if r.get("event") == "join failed"]
    if broke and all("abandoned" in error for error in broke):  # killed in the transfer, not in gloo's connect
        assert after_spare < 5.0, f"{after_spare:.2f} s from the spare's kill to the next step: {broke}"
    detected = [e["host"] for e in job.events if e["event"] == "detected"]
    assert detected == ["h1", "h3"] and job.ranks[1].host == "h4"
    assert not [r for r in recs if r.get("event") == "joined" and r.get("host") == "h3"], \
        "the spare completed its join before it was killed"
    print(f"spare killed while joining: next step {after_spare:.2f} s after its kill, {took:.2f} s after the "
          f"first; survivors' errors: {broke}")


def test_a_critical_xid_moves_the_rank_to_a_spare_before_it_crashes(make_lab, tmp_path, failure_free):
    lab = make_lab(multirail(4, 2, 2, 2))
    reference = failure_free(ARGS)
    nvml = {host: FakeNvml([FakeGpu()]) for host in RANKS}
    gpus = {host: NvidiaGpuCollector(fake) for host, fake in nvml.items()}

    def gpu_fault(host: str) -> str | None:
        critical = [xid for _, xid in gpus[host].new_xids() if xid in CRITICAL_XIDS] if host in gpus else []
        return f"XID {critical[0]} ({CRITICAL_XIDS[critical[0]]})" if critical else None

    for collector in gpus.values():
        collector.absent()  # registered for XID events before any is reported
    job, recs, xid_at = run(lab, tmp_path / "xid", ["h3"], lambda job: nvml["h1"].xid(0, 79), gpu_fault=gpu_fault)
    took = check_carried_on(recs, reference, xid_at, limit_s=5.0)
    kinds = [e["event"] for e in job.events]
    assert kinds.index("detected") < kinds.index("spare chosen") < kinds.index("resumed") < kinds.index("drained")
    detected = next(e for e in job.events if e["event"] == "detected")
    assert detected["rank"] == 1 and "XID 79" in detected["why"] and job.ranks[1].host == "h3"
    assert any(r.get("event") == "drained" and r.get("host") == "h1" for r in recs), \
        "the faulty rank was not drained at a step boundary"
    failed = [r for r in recs if r.get("event") == "step failed"]
    print(f"XID 79: next step {took:.2f} s after; {len(failed)} step(s) redone by a member a step behind")
