"""Judging a training job from its ranks' JSON-line logs (clockfabric.lab.job.parse)."""

import json

import pytest

from clockfabric.errors import ClockfabricError
from clockfabric.lab.job import parse

T0 = 1_700_000_000.0


def rank_log(rank, durations, *, start=T0 + 5, gap=0.0, outcome="completed", error=None, stall_at=None,
             stall_s=0.0):
    """Records as examples/ddp_train.py writes them: ready, one per step, then the outcome."""
    recs = [{"rank": rank, "event": "ready", "time": start, "launched": T0, "init_s": start - T0}]
    t = start
    for step, d in enumerate(durations):
        if step == stall_at:
            t += stall_s
        recs.append({"rank": rank, "step": step, "start": t, "duration_s": d, "loss": 2.3})
        t += d + gap
    if outcome == "completed":
        recs.append({"rank": rank, "outcome": "completed", "steps": len(durations), "time": t, "total_s": t - T0})
    elif outcome == "crashed":
        recs.append({"rank": rank, "outcome": "crashed", "error": error, "time": t + 30, "total_s": t + 30 - T0})
    return recs


def write(tmp_path, ranks):
    paths = []
    for i, recs in enumerate(ranks):
        p = tmp_path / f"rank{i}.jsonl"
        p.write_text("".join(json.dumps(r) + "\n" for r in recs))
        paths.append(p)
    return paths


def test_completed(tmp_path):
    paths = write(tmp_path, [rank_log(0, [0.3, 0.4, 0.3]), rank_log(1, [0.35, 0.3, 0.5])])
    r = parse(paths, launched_at=T0)
    assert r.outcome == "completed" and r.ranks == 2 and r.steps == 3
    assert r.step_s == pytest.approx([0.35, 0.4, 0.5])  # the slowest rank's time, per step
    assert r.median_step_s == pytest.approx(0.4)
    assert r.startup_s == pytest.approx(5.0)
    assert r.total_s == pytest.approx(5 + 1.15)  # launch to the last rank's end
    assert r.longest_stall_s == pytest.approx(0.45)  # step 2: from 5.7 to 6.15 s
    assert r.error is None and r.missing == {}
    assert r.as_dict()["median_step_s"] == pytest.approx(0.4)


def test_completed_with_a_stall_reports_the_gap(tmp_path):
    # the job lived through a 12 s hang (a link down, then failover) and finished
    ranks = [rank_log(i, [0.3] * 10, stall_at=5, stall_s=12.0) for i in range(4)]
    r = parse(write(tmp_path, ranks), launched_at=T0)
    assert r.outcome == "completed" and r.steps == 10
    assert r.longest_stall_s == pytest.approx(12.3)


def test_crashed_names_the_first_error(tmp_path):
    ranks = [rank_log(0, [0.3] * 4, outcome="crashed", error="RuntimeError: [gloo] Timed out waiting 30000ms"),
             rank_log(1, [0.3] * 3, outcome="crashed", error="RuntimeError: Connection closed by peer"),
             rank_log(2, [0.3] * 4)]
    r = parse(write(tmp_path, ranks), launched_at=T0)
    assert r.outcome == "crashed"
    assert r.error == "RuntimeError: Connection closed by peer"  # rank 1 failed first
    assert r.steps == 3  # steps every rank finished
    assert r.missing == {1: [3]}


def test_stalled_when_ranks_never_finish(tmp_path):
    # killed after hanging: no outcome line; a torn last line from the kill is ignored
    ranks = [rank_log(i, [0.3] * 6, outcome=None) for i in range(2)]
    paths = write(tmp_path, ranks)
    with paths[1].open("a") as f:
        f.write('{"rank": 1, "step": 6, "sta')
    last_end = T0 + 5 + 6 * 0.3
    r = parse(paths, launched_at=T0, ended_at=last_end + 60)
    assert r.outcome == "stalled" and r.steps == 6
    assert r.longest_stall_s == pytest.approx(60.0)
    assert r.total_s == pytest.approx(5 + 1.8 + 60)


def test_stalled_before_the_first_step(tmp_path):
    paths = write(tmp_path, [[{"rank": 0, "event": "ready", "time": T0 + 4, "launched": T0}], []])
    r = parse(paths, launched_at=T0, ended_at=T0 + 100)
    assert r.outcome == "stalled" and r.steps == 0 and r.step_s == [] and r.median_step_s is None
    assert r.startup_s is None
    assert r.longest_stall_s == pytest.approx(100.0)  # from launch: nothing ever happened


def test_completed_but_a_rank_lost_steps_is_reported(tmp_path):
    ranks = [rank_log(0, [0.3] * 3), rank_log(1, [0.3] * 3)]
    del ranks[1][2]  # rank 1's step 1 line is missing
    r = parse(write(tmp_path, ranks))
    assert r.outcome == "completed"
    assert r.missing == {1: [1]} and r.steps == 1


def test_parse_takes_records_too_and_needs_a_log():
    r = parse([rank_log(0, [0.2, 0.2])])
    assert r.outcome == "completed" and r.steps == 2
    with pytest.raises(ClockfabricError):
        parse([])


class FakeProc:
    def __init__(self, code):
        self.code = code

    def poll(self):
        return self.code


def test_a_rank_that_died_without_a_word_crashed_the_job(tmp_path):
    from clockfabric.lab.job import Job

    paths = write(tmp_path, [rank_log(0, [0.3] * 3, outcome=None), rank_log(1, [0.3] * 2, outcome=None)])
    outs = [tmp_path / "rank0.out", tmp_path / "rank1.out"]
    # rank 1 was SIGKILLed (the OOM killer?) and rank 0 hung until stop() ended it
    job = Job(None, ["h0", "h1"], paths, outs, [FakeProc(-15), FakeProc(-9)], T0, 29500,
              ended_at=T0 + 60, killed=True, exited_before_stop=[None, -9])
    r = job.result()
    assert r.outcome == "crashed" and r.steps == 2
    assert r.error.startswith("rank 1 exited with signal 9")
    # the same logs, every rank stopped by us: the job hung
    job.exited_before_stop = [None, None]
    assert job.result().outcome == "stalled"
