"""The controller's HTTP API in-process (FastAPI's test client, real SQLite storage, real detectors)."""

from __future__ import annotations

import json
import sqlite3

import pytest
from fastapi.testclient import TestClient

from clockfabric.audit.model import CheckResult, Finding, Report, Verdict
from clockfabric.controller.app import MAX_AUDIT_BYTES, create_app
from clockfabric.controller.fleet import Fleet
from clockfabric.controller.monitor import Monitor
from clockfabric.controller.storage.sqlite import SqliteStorage
from clockfabric.topology import leafspine
from tests.unit.credentials import as_host

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


def test_the_api_schema_needs_the_token_and_no_page_loads_a_cdn(env):
    client, *_ = env
    for path in ("/docs", "/redoc", "/openapi.json"):
        assert client.get(path).status_code == 404, path
    assert client.get("/api/v1/openapi.json").status_code == 401
    schema = client.get("/api/v1/openapi.json", headers=AUTH).json()
    assert "/api/v1/push" in schema["paths"] and "/api/v1/openapi.json" not in schema["paths"]


def push(client, host="h1", boot="b1", events=(), samples=(), **kw):
    return client.post("/api/v1/push", headers=as_host(TOKEN, host),
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
    r = client.post("/api/v1/push", headers=as_host(TOKEN, "h1"), json={"host": "h1", "boot": "b",
                                                                         "events": [{"seq": 0}]})
    assert r.status_code == 422 and "seq" in r.text
    r = client.post("/api/v1/push", headers=as_host(TOKEN, "h1"), content=b"{not json")
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


# ---- audits ------------------------------------------------------------------------------------------
def report(started_ns: int, *, fleet: str = "lab demo", failing: bool = True) -> Report:
    """A real report, as `clockfabric audit` builds it."""
    mtu = Finding(Verdict.FAIL, "MTU 9000, its plane has 1500", host="h2", device="eth0",
                  evidence={"mtu": 9000, "plane": 0, "expected": 1500})
    memory = Finding(Verdict.PASS, "23.5 GiB", host="h1", evidence={"dimms": None})
    results = [CheckResult("configuration.memory", "configuration", "Memory size and DIMM count match the fleet",
                           Verdict.PASS, "4 hosts, median 23.5 GiB", [memory], seconds=0.01),
               CheckResult("configuration.gpu", "configuration", "GPUs", Verdict.SKIP, "no GPUs on any host", []),
               CheckResult("frontend.mtu", "frontend", "MTU consistent per plane",
                           Verdict.FAIL if failing else Verdict.PASS, "1 NIC off its plane's MTU",
                           [mtu] if failing else [], fix="Set the MTU.", seconds=0.002)]
    return Report(fleet, ["h1", "h2", "h3", "h4"], results, started_ns, 1.234, expectations={"mtu": {"0": 1500}})


def post_audit(client, body, headers=AUTH):
    return client.post("/api/v1/audits", headers=headers, json=body)


def test_audit_reports_round_trip(env):
    client, _, clock, _ = env
    sent = report(clock.now).as_dict()
    r = post_audit(client, sent)
    assert r.status_code == 201
    stored = r.json()
    assert stored == {"id": stored["id"], "t_ns": clock.now, "fleet": "lab demo", "verdict": "fail", "exit_code": 2,
                      "counts": {"pass": 1, "skip": 1, "warn": 0, "unknown": 0, "fail": 1}}
    got = client.get(f"/api/v1/audits/{stored['id']}", headers=AUTH).json()
    assert got == {**stored, "report": sent}  # the whole report, evidence and all
    assert list(got["report"]) == list(sent)  # in its own order: fleet, hosts, verdict, ...
    assert client.get(f"/api/v1/audits/{stored['id'] + 1}", headers=AUTH).status_code == 404
    assert client.get("/api/v1/audits", headers=AUTH).json() == {"items": [stored], "next": None}


def test_audits_paged_and_filtered_by_time(env):
    client, _, clock, _ = env
    t = clock.now
    ids = [post_audit(client, report(t + i * 10**9, failing=i % 2 == 0).as_dict()).json()["id"] for i in range(5)]
    page1 = client.get("/api/v1/audits", headers=AUTH, params={"limit": 2}).json()
    assert [a["id"] for a in page1["items"]] == ids[:2] and page1["next"] == ids[1]
    page2 = client.get("/api/v1/audits", headers=AUTH, params={"limit": 3, "after_id": page1["next"]}).json()
    assert [a["id"] for a in page2["items"]] == ids[2:] and page2["next"] == ids[-1]
    last = client.get("/api/v1/audits", headers=AUTH, params={"after_id": ids[-1]}).json()
    assert last == {"items": [], "next": None}
    window = client.get("/api/v1/audits", headers=AUTH, params={"since_ns": t + 10**9, "until_ns": t + 3 * 10**9})
    assert [(a["id"], a["verdict"]) for a in window.json()["items"]] == [(ids[1], "pass"), (ids[2], "fail")]
    assert all("report" not in a for a in page1["items"])  # summaries only
    assert client.get("/api/v1/audits", headers=AUTH, params={"limit": 0}).status_code == 422


def test_audits_need_the_token(env):
    client, _, clock, _ = env
    body = report(clock.now).as_dict()
    assert post_audit(client, body, headers={}).status_code == 401
    assert post_audit(client, body, headers={"Authorization": "Bearer wrong"}).status_code == 401
    assert client.get("/api/v1/audits").status_code == 401
    assert client.get("/api/v1/audits/1").status_code == 401
    assert client.get("/api/v1/audits", headers=AUTH).json()["items"] == []  # nothing was stored


@pytest.mark.parametrize("change, reason", [
    ({"verdict": "great"}, "verdict"),
    ({"exit_code": 7}, "exit_code"),
    ({"exit_code": "2"}, "exit_code"),  # a string is not a number
    ({"exit_code": 1}, "does not go with verdict 'fail'"),
    ({"fleet": ""}, "fleet"),
    ({"fleet": "lab\x00demo"}, "fleet"),
    ({"started_ns": -1}, "started_ns"),
    ({"started_ns": 2**63}, "started_ns"),  # past what the databases store
    ({"started_ns": 1.8e18}, "started_ns"),
    ({"counts": {"pass": -1}}, "counts"),
    ({"counts": {"excellent": 1}}, "counts"),
    ({"checks": "all good"}, "checks"),
    ({"checks": [{"verdict": "pass"}]}, "id"),
    ({"checks": [{"id": "frontend.mtu", "verdict": "meh"}]}, "verdict"),
])
def test_malformed_audit_reports_get_422_with_a_reason(env, change, reason):
    client, _, clock, _ = env
    r = post_audit(client, {**report(clock.now).as_dict(), **change})
    assert r.status_code == 422 and reason in r.text, r.text
    assert client.get("/api/v1/audits", headers=AUTH).json()["items"] == []


def test_audit_bodies_not_json_or_missing_fields_get_422(env):
    client, _, clock, _ = env
    body = report(clock.now).as_dict()
    for content in (b"{not json", b"\xff\xfe", b"[]", b"null", json.dumps({**body, "seconds": float("nan")}).encode()):
        r = client.post("/api/v1/audits", headers=AUTH, content=content)
        assert r.status_code == 422 and r.json()["detail"][0]["msg"], content
    del body["verdict"]
    r = post_audit(client, body)
    assert r.status_code == 422 and r.json()["detail"][0]["loc"] == ["body", "verdict"]
    assert "input" not in r.json()["detail"][0]  # the report is not echoed back


def test_audit_bodies_too_big_get_413(env):
    client, _, clock, _ = env
    body = report(clock.now).as_dict()
    body["expectations"] = {"padding": "x" * MAX_AUDIT_BYTES}
    r = post_audit(client, body)
    assert r.status_code == 413 and "larger than" in r.json()["detail"]

    def chunks():  # no Content-Length: counted as it comes
        yield json.dumps(report(clock.now).as_dict())[:-1].encode() + b', "pad": "'
        for _ in range(MAX_AUDIT_BYTES // 2**16 + 1):
            yield b"x" * 2**16
        yield b'"}'

    r = client.post("/api/v1/audits", headers=AUTH, content=chunks())
    assert r.status_code == 413
    body["expectations"] = {"padding": "x" * (MAX_AUDIT_BYTES // 2)}  # big, but under the cap
    assert post_audit(client, body).status_code == 201


def test_audit_into_a_locked_database_gives_503(env, tmp_path):
    client, _, clock, _ = env
    locker = sqlite3.connect(tmp_path / "c.db", timeout=0.1)
    locker.execute("BEGIN EXCLUSIVE")
    try:
        r = post_audit(client, report(clock.now).as_dict())
        assert r.status_code == 503 and r.headers["Retry-After"] == "1"
    finally:
        locker.rollback()
        locker.close()
    assert post_audit(client, report(clock.now).as_dict()).status_code == 201
