"""Which rank's failure an all-reduce reports first: a cause, not the closes it echoes."""

from clockfabric.collective.run import lead_with_a_cause
from clockfabric.collective.wire import PEER_CLOSED


def test_a_rank_whose_peer_closed_on_it_is_reported_after_the_rank_that_failed_first():
    failures = [(0, f"link to h3 failed (subflow 0, to 10.64.0.6): {PEER_CLOSED}"),
                (3, "cannot connect to h2 at 10.64.0.4:7000 from 10.64.0.6 (subflow 0, path slot 0): timed out"),
                (1, "link to h3 failed: [Errno 104] Connection reset by peer"),
                (2, "no connection from h3 within 3 s")]
    assert [rank for rank, _ in lead_with_a_cause(failures)] == [3, 2, 0, 1]


def test_only_echoes_keep_their_order():
    failures = [(2, PEER_CLOSED), (0, PEER_CLOSED)]
    assert lead_with_a_cause(failures) == failures
