"""An agent given several controller replicas spreads over them by host name and moves to the
next when one fails, honouring Retry-After once every replica has failed. The real Pusher
against real controllers on loopback, two replicas sharing one database file."""

from __future__ import annotations

import random
import socket
import time
import zlib

import pytest

from clockfabric.agent.config import AgentConfig
from clockfabric.agent.push import Pusher
from clockfabric.auth.credential import host_token
from clockfabric.controller.fleet import Fleet
from clockfabric.controller.server import Listen, server, start_in_thread
from clockfabric.controller.storage.sqlite import SqliteStorage
from clockfabric.errors import ClockfabricError
from clockfabric.topology import leafspine

TOKEN = "t" * 32


@pytest.fixture
def replicas(tmp_path):
    """Two controllers on one file, their URLs, and the storage to read back."""
    storage = SqliteStorage(tmp_path / "c.db")
    started = []
    for _ in range(2):
        srv = server(Fleet(storage, hosts=[], enroll_unknown=True), TOKEN, Listen(port=0))
        started.append((srv, start_in_thread(srv)))
    urls = [f"http://127.0.0.1:{srv.servers[0].sockets[0].getsockname()[1]}" for srv, _ in started]
    yield urls, started, storage
    for srv, thread in started:
        srv.should_exit = True
        thread.join(5)
    storage.close()


def dead_url() -> str:
    with socket.socket() as s:  # a port nothing listens on
        s.bind(("127.0.0.1", 0))
        return f"http://127.0.0.1:{s.getsockname()[1]}"


def pusher(urls: str, host: str = "h1", interval_s: float = 0.05) -> Pusher:
    return Pusher(urls, host_token(TOKEN, host), host, interval_s=interval_s, rng=random.Random(0),
                  snapshot=lambda: ([{"t_ns": time.time_ns(), "kind": "tick"}], [], {}))


def test_hosts_spread_over_the_replicas_by_name(replicas):
    urls, _, _ = replicas
    chosen = {h: pusher(",".join(urls), h).url for h in (f"h{i}" for i in range(40))}
    assert set(chosen.values()) == {u + "/api/v1/push" for u in urls}
    assert pusher(",".join(urls), "h7").url == chosen["h7"]  # the same replica at every start
    assert chosen["h7"] == urls[zlib.crc32(b"h7") % 2] + "/api/v1/push"


def test_a_dead_replica_is_left_for_the_next_at_once(replicas):
    urls, _, storage = replicas
    host = next(h for h in (f"h{i}" for i in range(50)) if zlib.crc32(h.encode()) % 2 == 0)
    p = pusher(f"{dead_url()},{urls[0]}", host, interval_s=5.0)  # this host hashes to the dead one
    p.start()
    p.wake()  # push now, not after the first interval
    t0 = time.monotonic()
    while not storage.events(host=host) and time.monotonic() - t0 < 3:
        time.sleep(0.02)
    elapsed = time.monotonic() - t0
    p.stop(), p.join(5)
    assert storage.events(host=host), "the live replica never got the push"
    assert elapsed < 1.0  # the next replica was tried at once, not after a backoff of the 5 s interval
    assert p.url == urls[0] + "/api/v1/push" and p.counters["push_failures"] >= 1


def test_a_replica_that_dies_under_the_agent_loses_no_event(replicas):
    urls, started, storage = replicas
    p = pusher(",".join(urls), "h1")
    p.start()
    time.sleep(0.3)
    home = urls.index(p.url.removesuffix("/api/v1/push"))
    srv, thread = started[home]
    srv.should_exit = True  # the agent's replica goes away
    thread.join(5)
    time.sleep(0.5)
    p.stop(), p.join(5)
    assert p.url == urls[1 - home] + "/api/v1/push"
    seqs = [e.seq for e in storage.events(host="h1", limit=10_000)]
    assert seqs == list(range(1, p.seq + 1)) and not p.pending  # every event, once, in order


def test_every_replica_down_backs_off_after_a_round():
    p = pusher(f"{dead_url()},{dead_url()}", interval_s=0.01)
    p.start()
    time.sleep(0.5)
    p.stop(), p.join(12)
    # two at once, then a jittered backoff whose cap doubles from 0.02 s: a handful of tries, not hundreds
    assert 2 <= p.counters["push_failures"] <= 16


def test_a_controller_list_with_a_bad_url_is_one_clear_line(tmp_path):
    with pytest.raises(ClockfabricError, match="comma-separated"):
        AgentConfig("h0", leafspine(4, 2, 2), tmp_path,
                    controller="http://a:7400,b:7400")
    with pytest.raises(ClockfabricError, match="no controller URL"):
        pusher(" , ")
