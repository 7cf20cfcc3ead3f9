"""The coordinator's moves on harder faults: two ranks lost in one tick, a spare lost while it
joins, too few spares, and a rank replaced on a critical GPU fault before it fails."""

import json
import threading
import time

import pytest

from clockfabric.train import control
from tests.fakes.train_job import kinds, lose, stand_in

HOSTS = ["h0", "h1", "h2", "h3", "h4", "h5"]


@pytest.fixture
def job(make_coordinator):
    return make_coordinator(HOSTS, HOSTS[:3], HOSTS[3:])


def test_two_ranks_lost_in_one_tick_get_two_spares_in_one_generation(job):
    lost = [job.ranks[0], job.ranks[2]]
    for m in lost:
        lose(m)
    job.tick()
    gen = job.board.generation()
    assert gen.number == 1 and gen.state == control.RUNNING
    assert gen.hosts == ["h3", "h1", "h4"] and set(gen.lost) == {m.beat for m in lost}
    assert kinds(job) == ["detected", "drained", "detected", "drained", "spare chosen", "spare chosen", "generation"]
    assert job.awaiting == 1 and [m.host for m in job.spares] == ["h5"]


def test_a_spare_lost_while_it_joins_is_replaced_by_the_next(job):
    lose(job.ranks[1])
    job.tick()
    assert job.board.generation().hosts == ["h0", "h3", "h2"]
    lose(job.ranks[1])  # the spare, before every member joined generation 1
    job.tick()
    gen = job.board.generation()
    assert gen.number == 2 and gen.hosts == ["h0", "h4", "h2"] and len(gen.lost) == 2
    assert kinds(job)[-4:] == ["detected", "drained", "spare chosen", "generation"] and job.events[-4]["host"] == "h3"
    assert job.awaiting == 2


def test_two_lost_with_one_spare_pause_without_taking_it_until_a_second_is_ready(job):
    lose(job.spares.pop())
    lose(job.spares.pop())
    assert [m.host for m in job.spares] == ["h3"]
    lose(job.ranks[0])
    lose(job.ranks[1])
    job.tick()
    gen = job.board.generation()
    assert gen.state == control.PAUSED and gen.hosts == HOSTS[:3] and "spare chosen" not in kinds(job)
    assert [m.host for m in job.spares] == ["h3"] and job.events[-1]["ranks"] == [0, 1]
    job.tick()  # still one spare for two ranks: nothing moves
    assert job.board.generation().number == 1
    stand_in(job, "h5", None)
    job.tick()
    gen = job.board.generation()
    assert gen.state == control.RUNNING and gen.number == 2 and gen.hosts == ["h3", "h5", "h2"]


def test_a_gpu_fault_moves_the_rank_at_a_step_boundary_and_fences_it_once_the_spare_joined(job):
    faults = {"h1": ["XID 79 (GPU has fallen off the bus)"]}
    job.gpu_fault = lambda host: faults.get(host, []).pop() if faults.get(host) else None
    faulty = job.ranks[1]
    job.tick()
    gen = job.board.generation()
    assert gen.number == 1 and gen.hosts == ["h0", "h3", "h2"] and gen.lost == []  # no fencing mid-step
    assert "XID 79" in job.events[0]["why"] and faulty.proc.poll() is None
    job.tick()  # not every member has joined: the faulty rank runs on
    assert faulty.proc.poll() is None
    for rank in range(3):
        job.board.post({"event": "joined", "generation": 1, "rank": rank, "step": 7, "bytes": 10,
                        "transfer_s": 0.1, "time": time.time()})
    job.tick()
    assert faulty.proc.wait(5) is not None and faulty in job.retired and not job.draining
    assert kinds(job)[-3:] == ["state transferred", "resumed", "drained"]


def test_a_gpu_fault_with_no_spare_left_is_said_and_the_rank_runs_on(job):
    for m in job.spares:
        lose(m)
    job.gpu_fault = lambda host: "XID 48 (double-bit ECC error)" if host == "h2" else None
    job.tick()
    assert job.board.generation().number == 0 and job.ranks[2].proc.poll() is None
    assert job.events[-1]["event"] == "no spare" and job.events[-1]["rank"] == 2


def test_a_generation_not_joined_by_every_member_in_time_is_issued_again(job):
    lose(job.ranks[1])
    job.tick()
    job.tick()
    assert job.board.generation().number == 1  # not joined yet, but not overdue
    job.issued -= 60
    job.tick()
    gen = job.board.generation()
    assert gen.number == 2 and gen.hosts == ["h0", "h3", "h2"]
    assert kinds(job)[-2:] == ["not joined", "generation"] and job.awaiting == 2


def test_a_rendezvous_that_failed_with_every_member_alive_is_issued_again_at_once(job):
    lose(job.ranks[1])
    job.tick()
    assert job.board.generation().number == 1
    job.board.post({"event": "join failed", "generation": 1, "rank": 0, "error": "Connect timeout",
                              "time": time.time()})  # gloo timed out connecting: no one was lost
    job.tick()
    gen = job.board.generation()
    assert gen.number == 2 and gen.hosts == ["h0", "h3", "h2"] and job.awaiting == 2
    assert kinds(job)[-2:] == ["not joined", "generation"] and "Connect timeout" in job.events[-2]["why"]
    job.tick()  # the failure was generation 1's: generation 2 is awaited, not issued again
    assert job.board.generation().number == 2


def test_a_loss_while_a_generation_forms_with_no_spare_left_pauses_once(job):
    for m in job.spares[1:]:
        lose(m)
    lose(job.ranks[1])
    job.tick()  # h3 takes rank 1
    lose(job.ranks[0])  # and rank 0 is lost before generation 1 formed: no spare left
    job.tick()
    job.issued -= 60
    for _ in range(3):
        job.tick()
    assert kinds(job).count("paused") == 1 and "not joined" not in kinds(job) and job.awaiting is None
    assert job.board.generation().state == control.PAUSED


def test_a_spare_with_another_torch_is_refused_in_one_line_and_fenced(job):
    other = stand_in(job, "h5", None, torch="0.0.1")  # the job's members run another
    job.tick()
    refused = [e for e in job.events if e["event"] == "spare refused"]
    assert len(refused) == 1 and "torch 0.0.1" in refused[0]["why"] and "install the job's version" in refused[0]["why"]
    assert other.proc.wait(5) is not None


def test_a_board_that_stops_answering_stops_the_job_with_the_reason_not_a_hung_watcher(job):
    released = threading.Event()

    class Hung:
        """A store whose every operation waits, as a c10d store's does on a wedged server."""

        def __getattr__(self, name):
            return lambda *args: released.wait()

    job.board.store, job.board._reopen, job.board.answer_s = Hung(), None, 0.2
    try:
        job.start()
        job.watcher.join(5)
        assert not job.watcher.is_alive() and "does not answer (no answer within 0.2 s)" in job.stopped
        assert kinds(job) == ["board gone"] and job.events[0]["why"] == job.stopped
        assert job.wait(60) is False  # at once: the job stopped
    finally:
        released.set()
        job.stop()
