"""Which rank's failure an all-reduce reports first: a cause, not the closes it echoes."""

from clockfabric.collective.run import headline
from clockfabric.collective.wire import PEER_CLOSED

HOSTS = ["h0", "h1", "h2", "h3"]


def test_a_rank_whose_peer_closed_on_it_is_reported_after_the_rank_that_failed_first():
    failures = [(0, f"link to h3 failed (subflow 0, to 10.64.0.6): {PEER_CLOSED}"),
                (1, "link to h3 failed: [Errno 104] Connection reset by peer"),
                (3, "cannot connect to h2 at 10.64.0.4:7000 from 10.64.0.6 (subflow 0, path slot 0): timed out")]
    assert headline(failures, HOSTS) == ("h3 (rank 3): cannot connect to h2 at 10.64.0.4:7000 from 10.64.0.6 "
                                         "(subflow 0, path slot 0): timed out (also failed: h0, h1)")


def test_only_echoes_keep_their_order_and_one_failure_stands_alone():
    assert headline([(2, PEER_CLOSED), (0, PEER_CLOSED)], HOSTS) == f"h2 (rank 2): {PEER_CLOSED} (also failed: h0)"
    assert headline([(1, "killed")], HOSTS) == "h1 (rank 1): killed"
