"""No spare left and a job that may shrink (`min_ranks`): a real PyTorch job (gloo, CPU) on lab
hosts loses a rank and goes on with the survivors, renumbered, no completed step lost; under
ZeRO-1 too, its optimizer partitioned again over the survivors. A spare added once it has shrunk
grows it back. One run sees both: the spare is not ready when the loss is judged (it imports
torch), so the job shrinks first, then grows."""

import os
import signal

import pytest

from clockfabric.topology import multirail
from clockfabric.train import report
from tests.lab.test_spares import ARGS, run

pytest.importorskip("torch", reason="torch is not installed (make setup installs the job extra)")


def joined_in(recs: list[dict], generation: int) -> list[dict]:
    return [r for r in recs if r.get("event") == "joined" and r["generation"] == generation]


@pytest.mark.parametrize("zero", [False, True], ids=["ddp", "zero1"])
def test_a_killed_rank_with_no_spare_shrinks_the_job_and_a_spare_added_grows_it_back(make_lab, tmp_path, zero):
    lab = make_lab(multirail(4, 2, 2, 2))
    steps = 150  # long enough for the spare to start (it imports torch) before the job ends
    args = [*ARGS[:ARGS.index("--steps")], "--steps", str(steps), *ARGS[ARGS.index("--steps") + 2:]]

    def kill_then_add(job):
        os.kill(job.ranks[1].proc.pid, signal.SIGKILL)
        job.add_spare("h3")

    job, recs, killed_at = run(lab, tmp_path / "grown", [], kill_then_add,
                               args=[*args, "--zero"] if zero else args, min_ranks=2)
    kinds = [e["event"] for e in job.events]
    assert kinds.index("detected") < kinds.index("shrunk") < kinds.index("grown") < kinds.index("completed")
    assert "paused" not in kinds
    assert report.job_steps(recs) == list(range(steps)), "a completed step was lost"
    generations = sorted({r["generation"] for r in recs if r.get("event") == "joined"})

    # shrunk: h2 renumbered, rank 1 of 2; ZeRO-1 gathered every shard of the 3-rank partition,
    # rank 1's from rank 2's mirror
    pairs = [joined_in(recs, g) for g in generations
             if sorted((r["rank"], r["host"]) for r in joined_in(recs, g)) == [(0, "h0"), (1, "h2")]]
    assert pairs, [(r["generation"], r["rank"], r["host"]) for r in recs if r.get("event") == "joined"]
    shrunk = pairs[0]
    if zero:
        assert all(r["resharded_from"] == 3 for r in shrunk)
    grown_at = next(e["time"] for e in job.events if e["event"] == "grown")
    between = [r for r in recs if "duration_s" in r and r["start"] > killed_at
               and r["generation"] == shrunk[0]["generation"]]
    assert between and {r["rank"] for r in between} == {0, 1}  # no rank 2 while shrunk
    took = report.recovery_s([r for r in recs if r.get("rank") in (0, 1)], killed_at)
    assert took is not None and took < 10, took

    # grown: h3 at the next index; ZeRO-1 gathered the 2-rank partition's shards, made again over 3
    assert [m.host for m in job.ranks] == ["h0", "h2", "h3"]
    grown = joined_in(recs, generations[-1])
    assert sorted((r["rank"], r["host"]) for r in grown) == [(0, "h0"), (1, "h2"), (2, "h3")]
    if zero:
        assert all(r["resharded_from"] == 2 for r in grown)
    digests = report.digests(recs)
    assert sorted(digests) == [0, 1, 2] and len(set(digests.values())) == 1  # the replicas agree
    print(f"shrunk to 2 ranks: next step {took:.2f} s after the kill; grown to 3 {grown_at - killed_at:.2f} s after")
