"""A ZeRO-1 rank lost together with its buddy: its optimizer shard is in no member's memory.
With a disk checkpoint every rank resumes from it (the steps since redone, the result still
bit-equal to a failure-free run); without one the job stops with a clear event, never hangs."""

import os
import signal
import time

import pytest

from clockfabric.lab.training import train_job
from clockfabric.topology import multirail
from clockfabric.train import report
from tests.lab.test_spares import ARGS, RANKS, STEPS, run

pytest.importorskip("torch", reason="torch is not installed (make setup installs the job extra)")

SPARES = ["h3", "h4"]
EVERY = 5


def kill_rank_and_buddy(job):
    for rank in (1, 2):  # rank 2 holds rank 1's shard
        os.kill(job.ranks[rank].proc.pid, signal.SIGKILL)


def test_a_rank_lost_with_its_buddy_resumes_from_the_last_checkpoint(make_lab, tmp_path, failure_free):
    lab = make_lab(multirail(5, 2, 2, 2))
    args = [*ARGS, "--zero", "--checkpoint-every", str(EVERY)]
    reference = failure_free([*args, "--checkpoint-dir", str(tmp_path / "ref.ckpt")])
    job, recs, killed_at = run(lab, tmp_path / "killed", SPARES, kill_rank_and_buddy,
                               args=[*args, "--checkpoint-dir", str(tmp_path / "ckpt")])
    assert report.job_steps(recs) == list(range(STEPS))
    assert report.digests(recs) == reference  # the redone steps take the same path, bit for bit
    resumed = next(e for e in job.events if e["event"] == "resumed from checkpoint")
    reached = max(r["step"] for r in recs if "duration_s" in r and r["start"] < killed_at) + 1
    assert resumed["step"] % EVERY == 0 and 0 < resumed["step"] <= reached
    assert resumed["redone"] >= reached - resumed["step"] - 1  # a rank may have completed one more step
    assert f"resumed from checkpoint at step {resumed['step']}, {resumed['redone']} steps redone" in resumed["why"]
    assert "both lost" in resumed["why"]
    kinds = [e["event"] for e in job.events]
    assert kinds.index("detected") < kinds.index("resumed from checkpoint") < kinds.index("completed")
    took = report.recovery_s(recs, killed_at)
    print(f"resumed from step {resumed['step']}, {resumed['redone']} redone; next step {took:.2f} s after")


def test_a_rank_lost_with_its_buddy_and_no_checkpoint_stops_the_job(make_lab, tmp_path):
    lab = make_lab(multirail(5, 2, 2, 2))
    folder = tmp_path / "stopped"
    job = train_job(lab, RANKS, SPARES, [*ARGS, "--zero"], folder).start()
    try:
        deadline = time.monotonic() + 90
        while min((max(s) for s in report.steps_by_rank(report.records(folder)).values()), default=-1) < 8 \
                or len(report.steps_by_rank(report.records(folder))) < len(RANKS):
            assert time.monotonic() < deadline, "the job never reached the step to fail at"
            time.sleep(0.05)
        killed = time.monotonic()
        kill_rank_and_buddy(job)
        assert not job.wait(90)  # False at once when the ranks stop, not at the timeout
        waited = time.monotonic() - killed
        assert waited < 60, waited
        stopped = next(e for e in job.events if e["event"] == "stopped")
        assert "rank 1 and its buddy rank 2 were both lost" in stopped["why"]
        assert "no disk checkpoint" in stopped["why"]
        assert job.stopped == stopped["why"]
        deadline = time.monotonic() + 20
        while any(m.proc.poll() is None for m in job.ranks):  # the members exit on their own
            assert time.monotonic() < deadline, "a member hung after the stop"
            time.sleep(0.1)
    finally:
        job.stop()
    assert not report.digests(report.records(folder))
    print(f"stopped {waited:.2f} s after the kill: {stopped['why']}")
