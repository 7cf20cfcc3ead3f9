"""A step that failed with no member lost (it ran into the all-reduce's bound: a slow step) gets a
new generation of the same members once the coordinator's detection time has passed; a member
judged lost meanwhile gets a spare instead, as any loss does."""

import time

import pytest

from clockfabric.train import control
from clockfabric.train.detect import slow_step
from tests.fakes.train_job import file_board, kinds, lose

HOSTS = ["h0", "h1", "h2", "h3"]


@pytest.fixture
def job(make_coordinator):
    """Three ranks and a spare, in generation 4 (the counts are the generation's, whatever came before)."""
    j = make_coordinator(HOSTS, HOSTS[:3], HOSTS[3:])
    j.gen = control.Generation(4, control.RUNNING, HOSTS[:3], [m.beat for m in j.ranks])
    j.board.write_generation(j.gen)
    return j


def test_a_slow_step_is_redone_by_the_same_members_once_no_loss_was_found_in_the_detection_time(job):
    job.board.mark_failed(4, 1, bound_s=3.0)
    job.board.mark_failed(4, 0, bound_s=None)  # failed as its peer left the group
    job.tick()
    assert job.board.generation().number == 4  # a loss may yet be found: nothing issued
    marks = job.board.failed_steps(4)  # the marks as the coordinator read them off the board
    assert sorted(m["rank"] for m in marks) == [0, 1]
    for mark in marks:
        mark["time"] -= job.detect_s
    job.tick()
    gen = job.board.generation()
    assert gen.number == 5 and gen.state == control.RUNNING and gen.hosts == HOSTS[:3] and gen.lost == []
    assert job.awaiting == 5
    slow = next(e for e in job.events if e["event"] == "slow step")
    assert slow["generation"] == 4 and "rank 1" in slow["why"] and "(3.0 s)" in slow["why"]
    assert [m.host for m in job.spares] == ["h3"]  # no spare taken, no host drained
    job.tick()
    assert job.board.generation().number == 5  # the old generation's marks move nothing more


def test_a_rank_lost_while_its_peers_steps_failed_gets_a_spare_not_a_redo(job):
    job.board.mark_failed(4, 0, bound_s=3.0)
    lose(job.ranks[2])
    job.tick()
    gen = job.board.generation()
    assert gen.number == 5 and gen.hosts == ["h0", "h1", "h3"] and "slow step" not in kinds(job)


def test_only_marks_of_the_generation_asked_about_count(tmp_path):
    board = file_board(tmp_path)
    board.mark_failed(3, 2, bound_s=None)
    later = time.time() + 10
    assert slow_step(board, 4, later, 2.0) is None
    assert "rank 2's step failed" in slow_step(board, 3, later, 2.0)
    assert slow_step(board, 3, time.time(), 2.0) is None
