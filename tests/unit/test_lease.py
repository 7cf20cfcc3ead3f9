"""The leader lease between controller replicas on one PostgreSQL: one leader, handover when it
dies, and fencing of a leader that was paused past its lease."""

import time
import uuid

import pytest

from clockfabric.controller.fleet import Fleet
from clockfabric.controller.lease import Lease
from clockfabric.controller.monitor import Monitor
from clockfabric.controller.replica import Replica
from clockfabric.controller.storage.base import Alert, FenceLost
from clockfabric.controller.storage.postgres import PostgresStorage


@pytest.fixture
def dsn(postgres_server):
    return postgres_server.create_database(f"t_{uuid.uuid4().hex[:12]}")


def alert(key: str) -> Alert:
    return Alert(key=key, kind="test", severity="warning", message=key, opened_ns=1)


def test_one_of_two_replicas_leads(dsn):
    a, b = Lease(dsn, holder="a"), Lease(dsn, holder="b")
    assert a.hold() and a.generation == 1
    assert not b.hold() and b.generation == 0
    assert a.hold() and a.generation == 1  # renewed, same generation
    assert not b.hold()
    a.close(), b.close()


def test_lease_handed_over_when_the_leader_stops_renewing(dsn):
    a, b = Lease(dsn, holder="a", ttl_s=0.3), Lease(dsn, holder="b", ttl_s=0.3)
    assert a.hold()
    t0 = time.monotonic()
    while not b.hold():  # a "died": it renews no more
        assert time.monotonic() - t0 < 5, "the lease was never handed over"
        time.sleep(0.05)
    assert 0.2 < time.monotonic() - t0 < 2
    assert b.generation == 2
    assert not a.hold()  # a resumes: the lease is b's
    a.close(), b.close()


def test_a_clean_stop_hands_over_at_once(dsn):
    a, b = Lease(dsn, holder="a", ttl_s=60), Lease(dsn, holder="b", ttl_s=60)
    assert a.hold()
    a.close()
    assert b.hold() and b.generation == 2
    b.close()


def test_a_paused_leader_is_fenced_when_it_resumes(dsn):
    store = PostgresStorage(dsn)
    a, b = Lease(dsn, holder="a", ttl_s=0.3), Lease(dsn, holder="b", ttl_s=0.3)
    assert a.hold()
    with store.fenced(a.guard()):
        assert store.open_alert(alert("while-leading")) is not None
    time.sleep(0.4)  # a is paused past its lease; b takes it
    assert b.hold()
    # a resumes, believing it still leads, and writes without renewing first: the fence refuses it
    with store.fenced(a.guard()), pytest.raises(FenceLost):
        store.open_alert(alert("after-the-pause"))
    assert [x.key for x in store.alerts()] == ["while-leading"]
    with store.fenced(b.guard()):
        assert store.open_alert(alert("new-leader")) is not None
    store.add_events([])  # outside a fence, writes are the API's and go on
    a.close(), b.close(), store.close()


def test_an_expired_lease_fences_even_its_holder(dsn):
    store = PostgresStorage(dsn)
    a = Lease(dsn, holder="a", ttl_s=0.2)
    assert a.hold()
    time.sleep(0.3)
    with store.fenced(a.guard()), pytest.raises(FenceLost):
        store.resolve_alert("x", 2)
    assert a.hold() and a.generation == 1  # no one took it meanwhile: a keeps its generation
    a.close(), store.close()


def _replica(dsn: str, holder: str) -> tuple[Fleet, Replica, PostgresStorage]:
    store = PostgresStorage(dsn)
    replica = Replica(store, Lease(dsn, holder=holder, ttl_s=0.5), lambda: Monitor.create(store))
    return Fleet(store, hosts=["h1", "h2"], stale_s=0.2, replica=replica), replica, store


def test_only_the_leader_runs_the_detectors_and_it_sees_every_replicas_pushes(dsn):
    fleet_a, rep_a, store_a = _replica(dsn, "a")
    fleet_b, rep_b, store_b = _replica(dsn, "b")
    fleet_a.tick()
    fleet_b.tick()
    assert rep_a.leading and not rep_b.leading
    # a link goes down on h2, pushed to the follower: the leader reads it from the database
    fleet_b.push("h2", "boot", {}, [{"seq": 1, "t_ns": time.time_ns(), "kind": "link_down", "device": "eth0"}], 0)
    time.sleep(0.3)  # h1 never pushed; h2 goes stale too
    fleet_b.tick()
    fleet_a.tick()
    kinds = {a.kind for a in store_a.alerts(open_only=True)}
    assert "link_down" in kinds
    assert {r["host"]: r["state"] for r in fleet_b.host_rows()} == {"h1": "never seen", "h2": "stale"}
    rep_a.close(), rep_b.close(), store_a.close(), store_b.close()


def test_detectors_resume_on_the_other_replica_when_the_leader_dies(dsn):
    fleet_a, rep_a, store_a = _replica(dsn, "a")
    fleet_b, rep_b, store_b = _replica(dsn, "b")
    fleet_a.tick()
    assert rep_a.leading
    t0 = time.monotonic()  # a dies: it ticks no more
    while not rep_b.leading:
        fleet_b.tick()
        time.sleep(0.1)
        assert time.monotonic() - t0 < 10
    fleet_a.tick()  # a comes back: it renews no lease, and steps down
    assert not rep_a.leading and rep_b.leading
    rep_a.close(), rep_b.close(), store_a.close(), store_b.close()
