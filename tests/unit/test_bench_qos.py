"""`bench qos`'s reaction figure (bench/qos/command.py): from the bulk job's onset to the end of
the DDP steps it slowed, from the one running at the onset up to the first that is not."""

from __future__ import annotations

import pytest

from clockfabric.bench.qos.command import onset_target, reaction_s

ALONE = 0.7


def steps(durations: list[float], t0: float = 100.0) -> list[tuple[float, float]]:
    out, t = [], t0
    for d in durations:
        out.append((t, d))
        t += d
    return out


def test_the_slowed_steps_after_the_onset_set_the_reaction():
    run = steps([ALONE] * 8 + [1.2, 0.9, ALONE, ALONE, ALONE])
    onset = 100.0 + 8 * ALONE + 0.1  # in step 8
    took, slowed = reaction_s(run, onset, ALONE)
    assert (slowed, took) == (2, pytest.approx(1.2 + 0.9 - 0.1))


def test_no_slowed_step_is_no_wait_and_steps_before_the_onset_do_not_count():
    run = steps([2.0] + [ALONE] * 10)  # a slow first step, long before the onset
    assert reaction_s(run, 100.0 + 2.0 + 3 * ALONE, ALONE) == (0.0, 0)


def test_a_slow_step_after_the_job_is_back_is_its_own_spread():
    run = steps([ALONE] * 4 + [1.1, ALONE, 0.76, ALONE, 1.5])
    onset = 100.0 + 4 * ALONE + 0.2
    assert reaction_s(run, onset, ALONE) == (pytest.approx(1.1 - 0.2), 1)


def test_the_target_is_only_for_a_fabric_with_an_onset_run():
    paced = {"h0": {"pacing": {"joined_between_updates": 5}}, "h1": {"pacing": None}, "h3": {}}
    runs = {"alone": {"median_step_s": ALONE},
            "onset": {"steps": steps([ALONE, 1.0, ALONE]), "onset_at": 100.8, "qos_state": paced}}
    (target,) = onset_target("fifo", runs)
    assert target.value == pytest.approx(100.0 + ALONE + 1.0 - 100.8, abs=0.01) and target.bar == 1.0
    assert "5 of its sockets paced before a workload update listed them" in target.note
    assert onset_target("classes", {"alone": runs["alone"]}) == []
