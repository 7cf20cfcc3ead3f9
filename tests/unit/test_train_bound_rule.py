"""The all-reduce's bound: the job's timeout until a group has run a few steps, then FACTOR times
the slowest recent step, never under the floor nor over the job's timeout; slower steps raise it."""

from clockfabric.train.bound import FACTOR, FLOOR_S, WARMUP, WINDOW, StepBound


def test_a_new_group_runs_under_the_jobs_timeout_until_it_has_completed_warmup_steps():
    bound = StepBound(30.0)
    assert bound.joined() == 30.0
    changes = [bound.completed(0.2) for _ in range(WARMUP)]
    assert changes[:-1] == [None] * (WARMUP - 1) and changes[-1] == FLOOR_S  # lowered once, to the floor
    assert bound.completed(0.3) is None and bound.applied == FLOOR_S  # unchanged: nothing to set
    assert bound.joined() == 30.0 and bound.value() == 30.0  # each group warms up again, its history kept


def test_slower_steps_raise_the_bound_up_to_the_jobs_timeout_and_it_falls_once_they_leave_the_window():
    bound = StepBound(30.0)
    for _ in range(WARMUP):
        bound.completed(0.5)
    assert bound.completed(2.0) == FACTOR * 2.0
    assert bound.completed(10.0) == 30.0  # never above the job's own timeout
    for _ in range(WINDOW - 1):
        bound.completed(0.5)
    assert bound.applied == 30.0  # the 10 s step is still among the last WINDOW
    assert bound.completed(0.5) == FLOOR_S


def test_a_step_counts_as_cut_by_the_bound_only_once_it_lasted_the_bound():
    bound = StepBound(30.0)
    assert not bound.fired(40.0)  # no bound yet: the job's own timeout failed it
    for _ in range(WARMUP):
        bound.completed(0.2)
    assert bound.fired(FLOOR_S + 0.1) and not bound.fired(FLOOR_S - 0.5)


def test_a_slow_step_the_bound_cut_with_no_member_lost_raises_the_bound():
    bound = StepBound(30.0)
    for _ in range(WARMUP):
        bound.completed(0.2)
    bound.slow(FLOOR_S + 0.2)
    bound.joined()
    for _ in range(WARMUP):
        bound.completed(0.2)
    assert bound.applied == FACTOR * (FLOOR_S + 0.2)  # the same slowness does not fire it again
