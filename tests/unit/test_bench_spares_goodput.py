"""The measured goodput's arithmetic: the schedule, the steps and checkpoint interval it sizes,
the plain-DDP reference step, goodput from made-up step records, the target with its
baselines beside it, and where the restarts relaunch after each failure."""

import pytest

from clockfabric.bench.spares.faults import FROZEN, ISOLATED, KILLED
from clockfabric.bench.spares.goodput import (
    checkpoint_steps,
    goodput,
    period,
    schedule,
    steps_for,
    targets,
    wall_per_step,
)
from clockfabric.bench.spares.restart import relaunch_hosts
from clockfabric.errors import ClockfabricError


def steps(rank: int, start: float, count: int, step_s: float = 0.1, first: int = 0, **extra) -> list[dict]:
    return [{"rank": rank, "step": first + i, "start": start + i * step_s, "duration_s": step_s, **extra}
            for i in range(count)]


def test_failures_land_every_period_after_the_first_step():
    assert schedule(180, 2) == [180, 360]
    assert schedule(40, 3) == [40, 80, 120]


def test_steps_make_a_failure_free_run_last_failures_and_a_half_periods():
    assert steps_for(0.1, 180, 2) == 4500  # 2.5 x 180 s at 0.1 s a step
    assert steps_for(0.05, 40, 2) == 2000
    assert steps_for(10.0, 5, 1) == 100  # never fewer than a plain-DDP reference run's steps
    with pytest.raises(ClockfabricError):
        steps_for(0.0, 180, 2)


def test_checkpoints_at_youngs_interval():
    # sqrt(2 x 0.05 s x 180 s) = 4.24 s, at 0.1 s a step: 42 steps
    assert checkpoint_steps(0.05, 180, 0.1) == 42
    assert checkpoint_steps(0.0, 180, 0.1) == 1  # a free checkpoint: after every step


def test_plain_ddp_step_is_its_wall_time_over_its_steps():
    # two ranks, 0.1 s steps with 0.02 s between them: 10 steps end 1.18 s after the first began
    recs = [r | {"start": r["start"] + 0.02 * r["step"]} for rank in (0, 1) for r in steps(rank, 100.0, 10)]
    assert wall_per_step(recs) == pytest.approx(0.118)
    # a checkpoint written within the run is not plain DDP's cost; one after its last step is outside it
    saves = [{"event": "checkpoint", "time": 100.5, "checkpoint_s": 0.05},
             {"event": "checkpoint", "time": 102.0, "checkpoint_s": 0.3}]
    assert wall_per_step(recs + saves) == pytest.approx(0.113)
    with pytest.raises(ClockfabricError, match="no step"):
        wall_per_step([{"event": "ready"}])


def test_a_failure_free_run_at_plain_speed_has_goodput_one():
    recs = steps(0, 100.0, 50) + steps(1, 100.0, 50)
    got = goodput(recs, 50, 0.1, 2, [])
    assert got["goodput"] == pytest.approx(1.0)
    assert got["wall_s"] == pytest.approx(5.0) and got["short_steps"] == 0
    assert got["step_s"] == pytest.approx(0.1)


def test_a_restart_charges_its_gap_and_the_steps_it_redid():
    # steps 0-29, a failure at 103.05 s, relaunched from the checkpoint at step 20 after 4 s
    before = steps(0, 100.0, 30)
    after = steps(0, 107.0, 30, first=20)  # steps 20-49, 20-29 a second time
    got = goodput(before + after, 50, 0.1, 1, [103.05])
    assert got["wall_s"] == pytest.approx(10.0)  # 100.0 to 110.0
    assert got["goodput"] == pytest.approx(0.5)  # 50 steps of 0.1 s in 10 s
    assert got["failures_at_s"] == [3.05]
    # its own pace is plain DDP's; what the failure cost is the 5 s beyond 50 steps of it
    assert got["step_s"] == pytest.approx(0.1) and got["lost_s"] == pytest.approx(5.0)


def test_torchft_steps_on_fewer_replicas_count_their_share():
    full = steps(0, 100.0, 10, world=3) + steps(2, 100.0, 10, world=3)
    shrunk = steps(0, 101.0, 10, first=10, world=2) + steps(2, 101.0, 10, first=10, world=2)
    got = goodput(full + shrunk, 20, 0.1, 3, [100.95])
    assert got["short_steps"] == 10
    assert got["useful_s"] == pytest.approx(0.1 * (10 + 10 * 2 / 3))
    assert got["goodput"] == pytest.approx(got["useful_s"] / 2.0)


def test_a_job_missing_a_step_has_no_goodput():
    recs = steps(0, 100.0, 10) + steps(0, 102.0, 5, first=11)
    with pytest.raises(ClockfabricError, match="15 of its 16 steps"):
        goodput(recs, 16, 0.1, 1, [])


def result(**methods) -> dict:
    return {"steps": 4500, "plain_step_s": 0.1, "plain_steps_s": [0.1, 0.09, 0.12], "failures": 2,
            "kind": "killed", "every_s": 180.0, "checkpoint_every": 42,
            "torchft_not_run": "not run: --no-torchft", "methods": methods}


def row(gp: float, **extra) -> dict:
    return {"goodput": gp, "wall_s": 450.0 / gp, "useful_s": 450.0, "step_s": 0.1, "lost_s": 3.0,
            "failures_at_s": [180.0, 360.0],
            "short_steps": 0, **extra}


def test_the_target_is_ours_against_the_restarts_with_torchft_beside():
    [t] = targets(result(ours=row(0.97), restarts=row(0.8), torchft=row(0.9, short_steps=12)))
    assert t.name == "goodput, measured, one killed rank every 3 minutes"
    assert t.value == 0.97 and t.baseline == 0.8 and t.met
    assert "torchft 0.900" in t.note and "12 steps short" in t.note
    assert "every 42 steps" in t.note and "median of 3 failure-free runs, 90-120 ms" in t.note


def test_a_failed_method_is_no_figure_and_says_why():
    [t] = targets(result(ours={"error": "ours: the elastic job did not complete"}, restarts=row(0.8)))
    assert t.value is None and not t.met
    assert "did not complete" in t.note and "torchft not run: --no-torchft" in t.note


def test_the_period_reads_as_the_options_gave_it():
    assert period(180) == "3 minutes"
    assert period(40) == "40 s"


def test_restarts_relaunch_on_the_same_hosts_after_a_kill_and_swap_in_the_spare_after_a_host_failure():
    assert relaunch_hosts(["h0", "h1", "h2"], KILLED, "h3") == (["h0", "h1", "h2"], "h3")
    # the failed host, mended, is the spare for the next failure: one spare serves every failure
    hosts, spare = relaunch_hosts(["h0", "h1", "h2"], FROZEN, "h3")
    assert (hosts, spare) == (["h0", "h3", "h2"], "h1")
    assert relaunch_hosts(hosts, ISOLATED, spare) == (["h0", "h1", "h2"], "h3")
    with pytest.raises(ClockfabricError, match="needs a spare host"):
        relaunch_hosts(["h0", "h1", "h2"], FROZEN, None)
