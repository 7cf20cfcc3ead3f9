"""The coordinator with no spare left and a job that may shrink (min_ranks): a generation of
the survivors, renumbered in rank order; below min_ranks it pauses as before; once spares are
ready again the job grows back to its first size."""

import pytest

from clockfabric.errors import ClockfabricError
from clockfabric.train import control
from tests.fakes.train_job import coordinator, kinds, lose, stand_in

HOSTS = ["h0", "h1", "h2", "h3"]


@pytest.fixture
def make(make_coordinator):
    return lambda ranks, min_ranks: make_coordinator([*HOSTS, "h4", "h5"], ranks, [], min_ranks=min_ranks)


def test_a_lost_rank_with_no_spare_shrinks_the_world_and_renumbers_the_survivors(make):
    job = make(HOSTS, 2)
    lose(job.ranks[1])
    job.tick()
    gen = job.board.generation()
    assert gen is not None and gen.number == 1 and gen.state == control.RUNNING
    assert gen.hosts == ["h0", "h2", "h3"] and gen.world == 3  # h2 is rank 1 now, h3 rank 2
    assert gen.lost == ["10.0.0.2:9"]
    assert [m.host for m in job.ranks] == gen.hosts and not job.vacant
    assert [e["event"] for e in job.events] == ["detected", "drained", "shrunk", "generation"]
    shrunk = job.events[2]
    assert shrunk["ranks"] == [1] and shrunk["world"] == 3

    lose(job.ranks[0])  # a second loss, judged on the renumbered ranks
    job.tick()
    gen = job.board.generation()
    assert gen is not None and gen.hosts == ["h2", "h3"] and gen.number == 2
    assert job.events[-4]["rank"] == 0 and job.events[-4]["host"] == "h0"


def test_below_min_ranks_the_job_pauses_instead(make):
    job = make(HOSTS[:3], 3)
    lose(job.ranks[2])
    job.tick()
    gen = job.board.generation()
    assert gen is not None and gen.state == control.PAUSED and gen.hosts == HOSTS[:3]
    assert "shrunk" not in [e["event"] for e in job.events] and job.vacant == [2]


def test_two_lost_at_once_shrink_together_when_enough_survive(make):
    job = make(HOSTS, 2)
    lose(job.ranks[0])
    lose(job.ranks[3])
    job.tick()
    gen = job.board.generation()
    assert gen is not None and gen.hosts == ["h1", "h2"] and gen.state == control.RUNNING


@pytest.mark.parametrize("min_ranks", [0, 4])
def test_min_ranks_outside_the_job_is_one_clear_line(tmp_path, min_ranks):
    with pytest.raises(ClockfabricError, match="--min-ranks"):
        coordinator(tmp_path, HOSTS, HOSTS[:3], [], min_ranks=min_ranks)


def test_a_shrunk_job_grows_back_to_its_first_size_once_spares_are_ready(make):
    job = make(HOSTS[:3], 2)
    lose(job.ranks[1])
    job.tick()
    assert job.board.generation().hosts == ["h0", "h2"]
    stand_in(job, "h4", None)
    stand_in(job, "h5", None)
    job.tick()  # both admitted as spares; generation 1 not joined by every member yet: nothing moves
    assert job.board.generation().number == 1
    job.awaiting = None  # every member joined it
    job.tick()
    gen = job.board.generation()
    assert gen is not None and gen.number == 2 and gen.state == control.RUNNING
    assert gen.hosts == ["h0", "h2", "h4"] and gen.world == 3  # h4 at the next index, h5 left a spare
    assert [m.host for m in job.ranks] == gen.hosts and [m.host for m in job.spares] == ["h5"]
    assert kinds(job)[-2:] == ["grown", "generation"] and job.events[-2]["hosts"] == ["h4"]
    job.awaiting = None
    job.tick()  # back at its first size: h5 stays a spare
    assert job.board.generation().number == 2
