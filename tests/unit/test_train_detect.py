"""The coordinator's judgement of a rank: its exit, its own heartbeat report, its peers' reports."""

from clockfabric.train.detect import verdict

BEAT = "10.0.0.2:24000"
NOW = 1000.0


def report(rank, age, heard=None):
    return {"rank": rank, "time": NOW - age, "heard": heard or {}}


def test_an_exit_is_a_loss_at_once_but_a_clean_exit_is_done():
    assert "status -9" in verdict(1, -9, report(1, 0.1), [], BEAT, NOW, 2.0)
    assert verdict(1, 0, report(1, 5.0), [], BEAT, NOW, 2.0) is None


def test_a_stale_report_is_a_frozen_rank_and_a_missing_one_is_still_starting():
    assert "frozen" in verdict(1, None, report(1, 2.5), [], BEAT, NOW, 2.0, stopped=True)
    assert verdict(1, None, report(1, 1.5), [], BEAT, NOW, 2.0, stopped=True) is None
    assert verdict(1, None, None, [], BEAT, NOW, 2.0) is None
    assert verdict(1, None, report(None, 9.0), [], BEAT, NOW, 2.0) is None  # a spare's report, before its rank


def test_a_rank_most_peers_cannot_hear_is_cut_off():
    deaf, hears = report(0, 0.1, {BEAT: 3.0}), report(2, 0.1, {BEAT: 0.2})
    assert "2 of 2 peers" in verdict(1, None, report(1, 0.1), [deaf, report(2, 0.1, {BEAT: 2.5})], BEAT, NOW, 2.0)
    assert verdict(1, None, report(1, 0.1), [deaf, hears], BEAT, NOW, 2.0) is None  # one of two: not most
    assert verdict(1, None, report(1, 0.1), [deaf, hears, report(3, 0.1, {})], BEAT, NOW, 2.0) is None
    # a frozen peer's stale view counts for nothing
    assert verdict(1, None, report(1, 0.1), [report(0, 5.0, {BEAT: 9.0}), hears], BEAT, NOW, 2.0) is None


def test_a_rank_through_its_loop_is_not_lost_while_it_exits():
    assert verdict(1, None, report(1, 9.0) | {"done": True}, [], BEAT, NOW, 2.0) is None


def test_a_running_rank_silent_for_a_while_is_busy_and_silent_for_long_is_hung():
    # its heartbeat thread waiting for Python's lock (a garbage collection on a loaded machine)
    assert verdict(1, None, report(1, 2.5), [], BEAT, NOW, 2.0) is None
    assert verdict(1, None, report(1, 5.9), [], BEAT, NOW, 2.0) is None
    assert "hung" in verdict(1, None, report(1, 6.1), [], BEAT, NOW, 2.0)


def test_stopped_reads_the_process_state():
    import os
    import signal
    import subprocess
    import time

    from clockfabric.train.heartbeat import stopped

    child = subprocess.Popen(["sleep", "30"])
    try:
        assert not stopped(child.pid)
        os.kill(child.pid, signal.SIGSTOP)
        deadline = time.monotonic() + 5
        while not stopped(child.pid):
            assert time.monotonic() < deadline
            time.sleep(0.01)
        assert not stopped(os.getpid())
    finally:
        child.kill()
        child.wait()
    assert not stopped(child.pid)  # gone: not stopped
