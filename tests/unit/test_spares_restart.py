"""The checkpoint-restart baseline's figures and goodput, from step records."""

import pytest

from clockfabric.bench.spares.restart import goodput, restart_figures, step_ends
from clockfabric.errors import ClockfabricError


def test_step_ends_keep_only_steps_every_rank_completed():
    ranks = [[{"step": 0, "start": 1.0, "duration_s": 0.5}, {"step": 1, "start": 1.5, "duration_s": 0.5}],
             [{"step": 0, "start": 1.0, "duration_s": 0.7}, {"event": "checkpoint", "step": 1}]]
    assert step_ends(ranks) == {0: 1.7}


def test_restart_figures_count_the_steps_after_the_checkpoint_as_lost():
    before = {s: 10.0 + s for s in range(14)}  # step s done at 10 + s; killed at 23.5, after step 13
    after = {s: 30.0 + s for s in range(10, 20)}  # resumed from the checkpoint at step 10
    got = restart_figures(before, after, failed=23.5, resumed_at=10)
    assert got == {"recovery_s": 30.0 + 14 - 23.5, "steps_lost": 4.0, "restart_s": 30.0 + 10 - 23.5}


def test_restart_figures_refuse_a_relaunch_that_never_got_past_the_failure():
    with pytest.raises(ClockfabricError, match="never completed step 4"):
        restart_figures({s: float(s) for s in range(4)}, {0: 9.0}, failed=3.5, resumed_at=0)


def test_goodput_charges_each_failure_and_the_per_step_overhead():
    assert goodput(0.0, 180, 1.0) == 1.0
    assert goodput(18.0, 180, 1.0) == pytest.approx(0.9)
    assert goodput(18.0, 180, 1.25) == pytest.approx(0.72)
    assert goodput(400.0, 180, 1.0) == 0.0  # a failure that costs more than the period: nothing done
