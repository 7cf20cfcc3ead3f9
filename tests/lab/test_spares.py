"""A spare takes a lost rank's place, its state from a peer's memory: a real PyTorch job
(gloo, CPU) on lab hosts, with a rank killed, frozen or cut off, and with no spare left."""

import os
import signal
import time
from pathlib import Path

import pytest

from clockfabric.lab import impair
from clockfabric.lab.training import train_job
from clockfabric.topology import multirail
from clockfabric.train import report

pytest.importorskip("torch", reason="torch is not installed (make setup installs the job extra)")

SCRIPT = Path(__file__).resolve().parents[2] / "examples" / "ddp_spares.py"
STEPS = 30
ARGS = [str(SCRIPT), "--steps", str(STEPS), "--timeout", "30", "--width", "256"]
RANKS, SPARE = ["h0", "h1", "h2"], ["h3"]


def run(lab, folder: Path, spares: list[str], inject=None, at_step: int = 8, args=ARGS, **options):
    """Run the job (TrainJob's options passed on); inject(job) once every rank has completed at_step
    and every spare is ready (it imports torch first: tens of seconds on a loaded machine).
    Returns (job, records, injected_at)."""
    job = train_job(lab, RANKS, spares, args, folder, **options).start()
    injected = None
    try:
        if inject:
            deadline = time.monotonic() + 90
            while min((max(s) for s in report.steps_by_rank(report.records(folder)).values()), default=-1) < at_step \
                    or len(report.steps_by_rank(report.records(folder))) < len(RANKS) \
                    or not set(spares) <= set(job.ready_spares()):  # spares ready
                assert time.monotonic() < deadline, "the job never reached the step to fail at"
                time.sleep(0.05)
            injected = time.time()
            inject(job)
        completed = job.wait(120)
    finally:
        job.stop()
    assert completed, (job.events, [p.read_text()[-1500:] for p in folder.glob("*.out")])
    return job, report.records(folder), injected


def check_carried_on(job, recs, reference: dict[int, str], min_bytes: float = 1e6, redone: int = 0):
    """redone: completed steps a rank may do again (ZeRO-1: survivors that ended a step apart
    next to the lost rank go one step back, bit-equal all the same: docs/spares.md)."""
    assert report.job_steps(recs) == list(range(STEPS)), "a completed step was lost"
    for rank, steps in report.steps_by_rank(recs).items():
        assert len(steps) - len(set(steps)) <= redone, f"rank {rank} repeated a completed step: {steps}"
    assert report.digests(recs) == reference  # bit-equal to the failure-free run
    kinds = [e["event"] for e in job.events]
    assert kinds.index("detected") < kinds.index("spare chosen") < kinds.index("completed")
    transferred = next(e for e in job.events if e["event"] == "state transferred")
    resumed = next(e for e in job.events if e["event"] == "resumed")
    # the generation that formed: the first issued, or the next where a rendezvous failed (a loaded machine)
    joined = [r for r in recs if r.get("event") == "joined" and r["generation"] == resumed["generation"]]
    assert len(joined) == len(RANKS) and {r["rank"] for r in joined} == {0, 1, 2}
    assert max(r["bytes"] for r in joined) > min_bytes  # parameters and momentum, from a peer's memory
    assert transferred["bytes"] == max(r["bytes"] for r in joined) and transferred["seconds"] < 5
    assert resumed["step"] == max(r["step"] for r in joined) and 8 <= resumed["step"] < STEPS
    assert kinds.index("spare chosen") < kinds.index("state transferred") < kinds.index("resumed")


def check_recovered(recs, failed_at: float, limit_s: float = 10.0) -> float:
    """The survivors learned within seconds and the job went on within limit_s of the last one
    learning (a survivor caught sending to the lost rank waits out gloo's timeout: report.failed_s)."""
    took, learned = report.recovery_s(recs, failed_at), report.failed_s(recs, failed_at)
    assert took is not None and learned and learned[0] < limit_s, (took, learned)
    assert took - learned[-1] < limit_s, (took, learned)
    if learned[-1] > limit_s:
        print(f"a survivor learned only {learned[-1]:.1f} s after the failure: gloo's timeout on a send in flight")
    return took


@pytest.fixture
def reference(failure_free) -> dict[int, str]:
    """The failure-free run's parameters with ARGS (conftest.failure_free)."""
    return failure_free(ARGS)


def test_killed_rank_is_replaced_with_no_step_lost_and_bit_equal_parameters(make_lab, tmp_path, reference):
    lab = make_lab(multirail(4, 2, 2, 2))
    victim = {}

    def kill(job):
        victim["pid"] = job.ranks[1].proc.pid
        os.kill(victim["pid"], signal.SIGKILL)

    job, recs, killed_at = run(lab, tmp_path / "killed", SPARE, kill)
    check_carried_on(job, recs, reference)
    detected = next(e for e in job.events if e["event"] == "detected")  # a late spare's "spare added" may come first
    assert job.ranks[1].host == "h3" and detected["rank"] == 1 and detected["why"].startswith("its process exited")
    check_recovered(recs, killed_at)


def test_frozen_rank_is_replaced_within_seconds(make_lab, tmp_path, reference):
    lab = make_lab(multirail(4, 2, 2, 2))
    job, recs, frozen_at = run(lab, tmp_path / "frozen", SPARE,
                               lambda job: os.kill(job.ranks[2].proc.pid, signal.SIGSTOP))
    check_carried_on(job, recs, reference)
    detected = next(e for e in job.events if e["event"] == "detected")
    assert detected["rank"] == 2 and "frozen" in detected["why"]
    assert detected["time"] - frozen_at < 2.0 + 1.5  # the detection time, and a loaded machine's slack
    check_recovered(recs, frozen_at)


def test_cut_off_host_is_replaced(make_lab, tmp_path, reference):
    lab = make_lab(multirail(4, 2, 2, 2))

    def isolate(job):
        for link in lab.topology.links:
            if "h1" in (link.a.node, link.b.node):
                impair.set_link(lab, link, False)

    job, recs, cut_at = run(lab, tmp_path / "cut", SPARE, isolate)
    check_carried_on(job, recs, reference)
    detected = next(e for e in job.events if e["event"] == "detected")
    assert detected["rank"] == 1 and "cut off" in detected["why"], detected
    took = check_recovered(recs, cut_at)  # detection (2 s) and re-forming, not the 30 s collective timeout
    print(f"cut off: next step {took:.2f} s after the cut")


def test_no_spare_pauses_the_job_until_one_is_added(make_lab, tmp_path):
    lab = make_lab(multirail(4, 2, 2, 2))
    folder = tmp_path / "paused"
    job = train_job(lab, RANKS, [], ARGS, folder).start()
    try:
        deadline = time.monotonic() + 90
        while len(report.steps_by_rank(report.records(folder))) < len(RANKS):
            assert time.monotonic() < deadline, "the job never took a step"
            time.sleep(0.05)
        os.kill(job.ranks[0].proc.pid, signal.SIGKILL)
        while not any(e["event"] == "paused" for e in job.events):
            assert time.monotonic() < deadline, job.events
            time.sleep(0.05)
        time.sleep(3)  # paused, not crashed: the survivors wait
        assert all(job.ranks[r].proc.poll() is None for r in (1, 2)), job.events
        assert not report.digests(report.records(folder))
        job.add_spare("h3")
        assert job.wait(120), (job.events, [p.read_text()[-1500:] for p in folder.glob("*.out")])
    finally:
        job.stop()
    recs = report.records(folder)
    assert report.job_steps(recs) == list(range(STEPS))
    digests = report.digests(recs)
    assert sorted(digests) == [0, 1, 2] and len(set(digests.values())) == 1
    kinds = [e["event"] for e in job.events]
    assert kinds.index("paused") < kinds.index("spare added") < kinds.index("spare chosen")
    assert job.ranks[0].host == "h3"


def test_zero1_rank_killed_gets_its_optimizer_shard_from_its_buddy(make_lab, tmp_path, failure_free):
    lab = make_lab(multirail(4, 2, 2, 2))
    args = [*ARGS, "--zero"]
    reference = failure_free(args)
    job, recs, killed_at = run(lab, tmp_path / "killed", SPARE,
                               lambda job: os.kill(job.ranks[1].proc.pid, signal.SIGKILL), args=args)
    # the parameters from the most advanced rank, rank 1's momentum shard from rank 2's mirror
    check_carried_on(job, recs, reference, min_bytes=8e5, redone=1)
    spare = [r for r in recs if r.get("event") == "joined" and r.get("host") == "h3"]
    assert len(spare) == 1 and spare[0]["rank"] == 1
    steps = [r for r in recs if "duration_s" in r]
    assert all(r["buddy_bytes"] > 1e5 for r in steps)  # a third of the parameters and of the momentum
    cost = sum(r["buddy_s"] for r in steps) / sum(r["duration_s"] for r in steps)
    redone = max(len(s) - len(set(s)) for s in report.steps_by_rank(recs).values())
    print(f"buddy mirror: {cost:.1%} of step time, {steps[-1]['buddy_bytes']} bytes held per rank; "
          f"{redone} step redone")
    check_recovered(recs, killed_at)
