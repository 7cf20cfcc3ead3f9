"""What a job's logs say about a failure: when each survivor learned of it, and when the job went on."""

from clockfabric.train import report


def test_each_survivor_learns_in_its_own_time_and_recovery_counts_from_the_failure():
    recs = [{"rank": 0, "step": 8, "start": 99.0, "duration_s": 0.5},
            {"rank": 2, "step": 8, "start": 99.0, "duration_s": 0.5},
            {"rank": 2, "event": "step failed", "step": 9, "time": 102.0},  # its socket shut by the fence
            {"rank": 0, "event": "step failed", "step": 9, "time": 130.0},  # a send in flight: gloo's timeout
            {"rank": 0, "event": "step failed", "step": 3, "time": 50.0},  # an earlier failure: not this one's
            {"rank": 0, "step": 9, "start": 130.5, "duration_s": 0.5},
            {"rank": 2, "step": 9, "start": 130.5, "duration_s": 0.4}]
    assert report.failed_s(recs, 100.0) == [2.0, 30.0]
    assert report.recovery_s(recs, 100.0) == 31.0
    assert report.failed_s(recs[:2], 100.0) == []  # replaced before it failed (a GPU fault): none learned
