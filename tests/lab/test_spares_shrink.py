"""No spare left and a job that may shrink (`min_ranks`): a real PyTorch job (gloo, CPU) on lab
hosts loses a rank and goes on with the survivors, renumbered, no completed step lost; under
ZeRO-1 too, its optimizer partitioned again over the survivors."""

import os
import signal

import pytest

from clockfabric.topology import multirail
from clockfabric.train import report
from tests.lab.test_spares import ARGS, RANKS, STEPS, run

pytest.importorskip("torch", reason="torch is not installed (make setup installs the job extra)")


@pytest.mark.parametrize("zero", [False, True], ids=["ddp", "zero1"])
def test_a_killed_rank_with_no_spare_shrinks_the_job_and_it_completes(make_lab, tmp_path, zero):
    lab = make_lab(multirail(4, 2, 2, 2))
    job, recs, killed_at = run(lab, tmp_path / "shrunk", [], lambda job: os.kill(job.ranks[1].proc.pid,
                                                                              signal.SIGKILL),
                               args=[*ARGS, "--zero"] if zero else ARGS, min_ranks=2)
    kinds = [e["event"] for e in job.events]
    assert kinds.index("detected") < kinds.index("shrunk") < kinds.index("completed") and "paused" not in kinds
    assert [m.host for m in job.ranks] == ["h0", "h2"]  # h2 renumbered: rank 1 of 2
    assert report.job_steps(recs) == list(range(STEPS)), "a completed step was lost"
    last = max(r["generation"] for r in recs if r.get("event") == "joined")
    joined = [r for r in recs if r.get("event") == "joined" and r["generation"] == last]
    assert sorted((r["rank"], r["host"]) for r in joined) == [(0, "h0"), (1, "h2")]
    if zero:  # every shard of the 3-rank partition gathered, rank 1's from rank 2's mirror
        assert all(r["resharded_from"] == 3 for r in joined)
    after = [r for r in recs if "duration_s" in r and r["start"] > killed_at]
    assert after and {r["rank"] for r in after} == {0, 1}  # no rank 2 once shrunk
    digests = report.digests(recs)
    assert sorted(digests) == [0, 1] and len(set(digests.values())) == 1  # the replicas agree
    took = report.recovery_s([r for r in recs if r.get("rank") in (0, 1)], killed_at)
    assert took is not None and took < 10, took
    print(f"shrunk to {len(RANKS) - 1} ranks: next step {took:.2f} s after the kill")


@pytest.mark.parametrize("zero", [False, True], ids=["ddp", "zero1"])
def test_a_shrunk_job_grows_back_when_a_spare_is_added(make_lab, tmp_path, zero):
    lab = make_lab(multirail(4, 2, 2, 2))
    steps = 150  # long enough for the spare to start (it imports torch) before the job ends
    args = [*ARGS[:ARGS.index("--steps")], "--steps", str(steps), *ARGS[ARGS.index("--steps") + 2:]]

    def kill_then_add(job):
        os.kill(job.ranks[1].proc.pid, signal.SIGKILL)
        job.add_spare("h3")

    job, recs, killed_at = run(lab, tmp_path / "grown", [], kill_then_add,
                               args=[*args, "--zero"] if zero else args, min_ranks=2)
    kinds = [e["event"] for e in job.events]
    # the spare is not ready when the loss is judged (it imports torch): the job shrinks, then grows
    assert kinds.index("shrunk") < kinds.index("grown") < kinds.index("completed")
    assert [m.host for m in job.ranks] == ["h0", "h2", "h3"]  # h3 at the next index
    assert report.job_steps(recs) == list(range(steps)), "a completed step was lost"
    last = max(r["generation"] for r in recs if r.get("event") == "joined")
    joined = [r for r in recs if r.get("event") == "joined" and r["generation"] == last]
    assert sorted((r["rank"], r["host"]) for r in joined) == [(0, "h0"), (1, "h2"), (2, "h3")]
    if zero:  # the 2-rank partition's shards gathered, ZeRO made again over 3
        assert all(r["resharded_from"] == 2 for r in joined)
    digests = report.digests(recs)
    assert sorted(digests) == [0, 1, 2] and len(set(digests.values())) == 1  # the replicas agree
    grown_at = next(e["time"] for e in job.events if e["event"] == "grown")
    print(f"grown back to 3 ranks {grown_at - killed_at:.2f} s after the kill")
