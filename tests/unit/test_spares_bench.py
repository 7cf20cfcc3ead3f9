"""The spares benchmark's arithmetic: torchft's figures from its survivors' step records, the
three goodputs, and the per-kind targets with torchft and the checkpoint restarts beside them."""

import pytest

from clockfabric.bench.spares.command import goodputs, kind_targets
from clockfabric.bench.spares.faults import FROZEN, KILLED, inject
from clockfabric.bench.spares.restart import restart_run
from clockfabric.bench.spares.torchft import figures
from clockfabric.errors import ClockfabricError


def steps(rank: int, starts: list[tuple[int, float]], world: int = 3, took: float = 0.1) -> list[dict]:
    return [{"rank": rank, "step": s, "start": t, "duration_s": took, "world": world} for s, t in starts]


def test_torchft_figures_from_the_survivors_and_the_replacement():
    failed = 10.0
    a = steps(0, [(0, 9.0), (1, 9.5)]) + steps(0, [(2, 12.0)], world=2)  # step 2 redone after the failure
    b = steps(2, [(0, 9.0), (1, 9.5)]) + steps(2, [(2, 12.2)], world=2)
    replacement = steps(1, [(5, 15.0)])
    got = figures([a, b], replacement, failed)
    assert got["recovery_s"] == pytest.approx(2.3)  # b's step 2 ended at 12.3
    assert got["steps_lost"] == 0.0 and got["world_after"] == 2.0
    assert got["rejoined_s"] == pytest.approx(5.1)


def test_torchft_figures_count_completed_steps_done_again():
    a = steps(0, [(0, 1.0), (1, 2.0), (2, 3.0)]) + steps(0, [(1, 6.0)], world=2)  # rolled back to step 1
    got = figures([a], [], 4.0)
    assert got["steps_lost"] == 2.0 and got["rejoined_s"] == -1.0


def test_torchft_figures_need_a_step_after_the_failure():
    with pytest.raises(ClockfabricError, match="no step after"):
        figures([steps(0, [(0, 1.0)])], [], 5.0)


def test_goodputs_of_the_three():
    restarts = [{"recovery_s": 6.1, "checkpoint_s": 0.1, "steps_lost": 4}] * 3
    torchft = [{"recovery_s": 1.1, "rejoined_s": 4.1, "step_s": 0.2}] * 3
    gp = goodputs([1.1, 1.1], restarts, torchft, step=0.1, ratio=1.0, every=10)
    assert gp["ours"]["180"] == pytest.approx(1 - 1.0 / 180)
    assert gp["restart"]["180"] == pytest.approx((1 - 6.0 / 180) / 1.1)
    # torchft: 1 s lost, a rank short for 3 s (a third of it lost), and steps twice plain DDP's
    assert gp["torchft"]["180"] == pytest.approx((1 - 2.0 / 180) / 2.0)
    never = [{"recovery_s": 1.1, "rejoined_s": -1.0, "step_s": 0.1}]
    assert goodputs([1.1], restarts, never, 0.1, 1.0, 10)["torchft"]["30"] == pytest.approx(1 - (1 + 30 / 3) / 30)
    assert "torchft" not in goodputs([1.1], restarts, [], 0.1, 1.0, 10)


def test_kind_targets_carry_torchft_as_baseline_or_why_it_did_not_run():
    row = {"recovery_s": 1.0, "steps_lost": 0.0, "world_after": 3.0}
    theirs = {"recovery_s": 30.0, "steps_lost": 0.0, "world_after": 2.0}
    result = {"ours": {KILLED: [row] * 3, FROZEN: [row | {"recovery_s": 11.0}]}, "torchft": {KILLED: [theirs]},
              "torchft_not_run": None, "restart": {}}
    killed, frozen = kind_targets(result)
    assert killed.met and killed.bar == 5.0 and killed.baseline == pytest.approx(30.0)
    assert "world 2 after" in killed.note
    assert not frozen.met and frozen.bar == 10.0 and frozen.baseline is None
    result["torchft_not_run"] = "not run: torchft is not installed"
    assert "not run: torchft is not installed" in kind_targets(result)[1].note


def test_an_unknown_failure_kind_is_one_clear_line():
    with pytest.raises(ClockfabricError, match="no failure kind"):
        inject(None, "melted", "h1", 0, None)  # type: ignore[arg-type]


def test_a_failed_run_fails_its_kinds_target_and_says_why():
    row = {"recovery_s": 1.0, "steps_lost": 0.0, "world_after": 3.0}
    result = {"ours": {FROZEN: [row, {"error": "the elastic job did not complete"}]}, "torchft": {},
              "torchft_not_run": "not run: --no-torchft", "restart": {}}
    (frozen,) = kind_targets(result)
    assert frozen.value is None and not frozen.met
    assert "1 of 2 runs failed (the elastic job did not complete)" in frozen.note and "p50 1.00 s" in frozen.note


def test_every_kind_carries_its_checkpoint_restart_baseline():
    row = {"recovery_s": 3.0, "steps_lost": 0.0, "world_after": 3.0}
    restarted = {"recovery_s": 36.0, "steps_lost": 4.0, "world_after": 3.0, "exit_s": 30.2}
    result = {"ours": {KILLED: [row], FROZEN: [row]}, "torchft": {}, "torchft_not_run": "not run: --no-torchft",
              "restart": {FROZEN: [restarted, {"error": "the relaunched job did not complete"}]}}
    killed, frozen = kind_targets(result)
    assert "checkpoint restarts" not in killed.note
    assert "checkpoint restarts: p50 36.00 s" in frozen.note and "4 steps lost" in frozen.note
    assert "1 of 2 runs failed (the relaunched job did not complete)" in frozen.note


def test_a_restart_after_a_host_failure_needs_a_spare_to_relaunch_on(tmp_path):
    with pytest.raises(ClockfabricError, match="needs a spare host"):
        restart_run(None, ["h0", "h1", "h2"], tmp_path / "train.py", [], tmp_path,  # type: ignore[arg-type]
                    every=10, kill_at=5, kind=FROZEN)
