"""PostgreSQL restarted under load: the controller answers 503 while the server is away, stays up,
and every event the agents pushed is stored once, in order, after it is back. Real agents' Pushers
against a real controller on loopback, on a throwaway PostgreSQL server stopped and started again
with pg_ctl."""

from __future__ import annotations

import random
import time

import pytest

from clockfabric.agent.push import Pusher
from clockfabric.auth.credential import host_token
from clockfabric.controller.fleet import Fleet
from clockfabric.controller.server import Listen, server, start_in_thread
from tests.series import until

TOKEN = "t" * 32
AGENTS = 6


@pytest.fixture
def own_postgres():
    """A server of this test's own: restarting the session's would break the other tests' connections."""
    from tests.pg import missing, throwaway_postgres

    why = missing()
    if why:
        pytest.skip(why)
    with throwaway_postgres(fsync=False) as pg:
        yield pg


def test_a_postgres_restart_under_load_loses_no_event(own_postgres):
    from clockfabric.controller.storage.postgres import PostgresStorage

    store = PostgresStorage(own_postgres.create_database("fleet"))
    hosts = [f"h{i}" for i in range(AGENTS)]
    srv = server(Fleet(store, hosts=hosts), TOKEN, Listen(port=0))
    thread = start_in_thread(srv)
    url = f"http://127.0.0.1:{srv.servers[0].sockets[0].getsockname()[1]}"
    agents = [Pusher(url, host_token(TOKEN, h), h, interval_s=0.05, rng=random.Random(i),
                     snapshot=lambda: ([{"t_ns": time.time_ns(), "kind": "tick"}], [], {}))
              for i, h in enumerate(hosts)]
    try:
        for a in agents:
            a.start()
        until(lambda: sum(a.counters["pushes"] for a in agents) > 0, timeout_s=20.0)  # loaded: not a fixed second
        time.sleep(0.5)
        before = sum(a.counters["pushes"] for a in agents)
        own_postgres.stop()  # a fast stop drops every connection mid-load
        try:  # away until a push was refused: a restart quicker than the pushes' turn would show nothing
            until(lambda: sum(a.counters["push_failures"] for a in agents) >= 1, timeout_s=20.0)
        finally:
            own_postgres.start()
        until(lambda: sum(a.counters["pushes"] for a in agents) > before, timeout_s=20.0)
        time.sleep(0.5)
        for a in agents:
            a.stop()
        for a in agents:
            a.join(10)
        assert thread.is_alive()  # the controller rode it out
        assert before > 0 and sum(a.counters["pushes"] for a in agents) > before  # pushes went on after
        assert sum(a.counters["push_failures"] for a in agents) >= 1  # the restart was seen, as 503s
        for a in agents:
            seqs = [e.seq for e in store.events(host=a.host, limit=100_000)]
            assert seqs == list(range(1, a.seq + 1)) and not a.pending, a.host  # every event once, in order
    finally:
        srv.should_exit = True
        thread.join(5)
        store.close()
