"""The controller's HTTP API in-process (FastAPI's test client, real SQLite storage, real detectors)."""

from __future__ import annotations

import sqlite3

import pytest
from fastapi.testclient import TestClient

from clockfabric.controller.app import create_app
from clockfabric.controller.fleet import Fleet
from clockfabric.controller.monitor import Monitor
from clockfabric.controller.storage.sqlite import SqliteStorage
from clockfabric.topology import leafspine

TOKEN = "t" * 32
AUTH = {"Authorization": f"Bearer {TOKEN}"}


class Clock:
    def __init__(self):
        self.now = 1_800_000_000 * 10**9

    def __call__(self):
        return self.now


@pytest.fixture
def env(tmp_path):
    topo = leafspine(4, 2, 2)
    storage = SqliteStorage(tmp_path / "c.db")
    clock = Clock()
    monitor = Monitor.create(storage, topology=topo)
    monitor.alerts.clock = clock
    fleet = Fleet(storage, hosts=sorted(topo.hosts) + sorted(topo.switches), stale_s=5, monitor=monitor, clock=clock)
    with TestClient(create_app(fleet, TOKEN, tick_s=3600)) as client:
        yield client, fleet, clock, topo
    storage.close()


def push(client, host="h1", boot="b1", events=(), samples=(), **kw):
    return client.post("/api/v1/push", headers=AUTH,
                       json={"host": host, "boot": boot, "events": list(events), "samples": list(samples), **kw})


def link_event(seq, t_ns, kind, device="eth0"):
    return {"seq": seq, "t_ns": t_ns, "kind": kind, "device": device}


def test_writes_and_reads_need_the_token(env):
    client, *_ = env
    assert client.get("/healthz").status_code == 200
    r = client.post("/api/v1/push", json={"host": "h1", "boot": "b"})
    assert r.status_code == 401 and "token" in r.json()["detail"]
    assert client.get("/api/v1/events", headers={"Authorization": "Bearer wrong"}).status_code == 401
    assert push(client).status_code == 200


def test_malformed_and_unknown_pushes_get_4xx_with_a_reason(env):
    client, *_ = env
    r = client.post("/api/v1/push", headers=AUTH, json={"host": "h1", "boot": "b", "events": [{"seq": 0}]})
    assert r.status_code == 422 and "seq" in r.text
    r = client.post("/api/v1/push", headers=AUTH, content=b"{not json")
    assert r.status_code == 422
    r = push(client, host="intruder")
    assert r.status_code == 403 and "not enrolled" in r.json()["detail"]


def test_events_are_stored_once_paged_and_filtered(env):
    client, _, clock, _ = env
    t = clock.now
    evs = [link_event(i + 1, t + i * 10**9, "link_down" if i % 2 == 0 else "link_up") for i in range(5)]
    assert push(client, events=evs).json()["events_new"] == 5
    assert push(client, events=evs).json()["events_new"] == 0  # a re-sent push stores nothing twice
    page1 = client.get("/api/v1/events", headers=AUTH, params={"limit": 3}).json()
    assert [e["seq"] for e in page1["items"]] == [1, 2, 3] and page1["next"] is not None
    page2 = client.get("/api/v1/events", headers=AUTH, params={"limit": 3, "after_id": page1["next"]}).json()
    assert [e["seq"] for e in page2["items"]] == [4, 5] and page2["next"] is None
    downs = client.get("/api/v1/events", headers=AUTH, params={"kind": "link_down", "since_ns": t + 1}).json()
    assert [e["seq"] for e in downs["items"]] == [3, 5]


def test_link_flaps_open_an_alert_that_resolves_when_quiet(env):
    client, fleet, clock, topo = env
    t = clock.now
    evs = [link_event(i + 1, t + i * 10**8, "link_down" if i % 2 == 0 else "link_up") for i in range(6)]
    push(client, events=evs)
    fleet.tick()
    alerts = client.get("/api/v1/alerts", headers=AUTH, params={"open_only": True}).json()["items"]
    link = topo.links_of("h1")[0].name
    assert [a["kind"] for a in alerts] == ["flapping"] and link in alerts[0]["key"]
    clock.now += 120 * 10**9  # a quiet window later (hosts went stale meanwhile: push to stay fresh)
    for h in topo.hosts:
        push(client, host=h)
    for s in topo.switches:
        push(client, host=s)
    fleet.tick()
    assert client.get("/api/v1/alerts", headers=AUTH, params={"open_only": True}).json()["items"] == []
    assert client.get("/api/v1/alerts", headers=AUTH).json()["items"][0]["resolved_ns"] is not None


def test_stale_hosts_and_the_fleet_summary(env):
    client, fleet, clock, topo = env
    push(client, host="h1")
    push(client, host="h2")
    clock.now += 10 * 10**9
    push(client, host="h2")
    fleet.tick()
    summary = client.get("/api/v1/fleet", headers=AUTH).json()
    assert summary["stale"] == ["h1"] and summary["ok"] == 1
    assert len(summary["never_seen"]) == len(topo.hosts) + len(topo.switches) - 2
    assert [a["key"] for a in client.get("/api/v1/alerts", headers=AUTH).json()["items"]] == ["stale:h1"]
    push(client, host="h1")
    fleet.tick()
    assert client.get("/api/v1/fleet", headers=AUTH).json()["stale"] == []


def test_owd_matrix_and_links_from_the_latest_samples(env):
    client, _, clock, _ = env
    owd = [{"name": "owd_p50_ns", "value": v, "labels": {"src": "h1", "dst": "h2", "path": "eth0:7300"}}
           for v in (21_000.0, 22_000.0)]
    push(client, samples=owd[:1] + [{"name": "link_up", "value": 1, "labels": {"device": "eth0"}}])
    clock.now += 10**9
    push(client, samples=owd[1:] + [{"name": "link_up", "value": 0, "labels": {"device": "eth0"}},
                                     {"name": "link_transitions_total", "value": 3, "labels": {"device": "eth0"}}])
    rows = client.get("/api/v1/owd", headers=AUTH).json()["items"]
    assert [(r["src"], r["dst"], r["path"], r["owd_ns"]) for r in rows] == [("h1", "h2", "eth0:7300", 22_000.0)]
    links = client.get("/api/v1/links", headers=AUTH).json()["items"]
    assert links == [{"host": "h1", "device": "eth0", "up": False, "t_ns": clock.now, "transitions": 3}]
    assert client.get("/api/v1/owd", headers=AUTH, params={"stat": "p42"}).status_code == 422


def test_a_locked_database_gives_503_and_an_alert_not_a_crash(env, tmp_path):
    client, fleet, *_ = env
    locker = sqlite3.connect(tmp_path / "c.db", timeout=0.1)
    locker.execute("BEGIN EXCLUSIVE")
    try:
        r = push(client, events=[link_event(1, 1, "link_down")])
        assert r.status_code == 503 and r.headers["Retry-After"] == "1"
    finally:
        locker.rollback()
        locker.close()
    assert fleet.monitor.alerts.storage_alert is not None
    assert push(client, events=[link_event(1, 1, "link_down")]).status_code == 200  # the agent's retry lands
