"""Hosts held for approval (`controller --enroll pending`): over HTTP, with the controller's auth,
in-process (FastAPI's test client, real SQLite storage)."""

from __future__ import annotations

import pytest
from fastapi.testclient import TestClient

from clockfabric.controller.app import create_app
from clockfabric.controller.dashboard.routes import allow_viewer
from clockfabric.controller.fleet import MAX_HELD_NEIGHBOURS, Fleet
from clockfabric.controller.storage import pending
from clockfabric.controller.storage.sqlite import SqliteStorage
from tests.unit.credentials import as_host
from tests.unit.test_controller_app import AUTH, TOKEN, Clock

VIEWER = "v" * 32


@pytest.fixture
def env(tmp_path):
    storage = SqliteStorage(tmp_path / "c.db")
    clock = Clock()
    fleet = Fleet(storage, hosts=["h0"], enroll="pending", clock=clock)
    app = create_app(fleet, TOKEN, tick_s=3600)
    allow_viewer(app, VIEWER)
    with TestClient(app) as client:
        yield client, fleet, clock
    storage.close()


def neighbours(pairs: dict[str, str]) -> list[dict]:
    return [{"name": "lldp_neighbour", "value": 1.0, "labels": {"device": d, "neighbour": n}} for d, n in pairs.items()]


def push(client, host, *, address="10.0.0.7", heard=None, events=()):
    return client.post("/api/v1/push", headers=as_host(TOKEN, host), json={
        "host": host, "boot": "b1", "info": {"address": address, "role": "host", "pid": 7},
        "events": list(events), "samples": neighbours(heard or {"eth0": "leaf0:swp7", "eth1": "leaf1:swp7"})})


def decide(client, verb, hosts, headers=AUTH):
    return client.post(f"/api/v1/pending/{verb}", headers=headers, json={"hosts": hosts})


def listed(client):
    return {h["host"]: h for h in client.get("/api/v1/pending", headers=AUTH).json()["items"]}


def test_an_unknown_host_waits_with_its_neighbours_and_is_admitted_once_approved(env):
    client, *_ = env
    event = {"seq": 1, "t_ns": 5, "kind": "agent_start"}
    r = push(client, "gpu-7", events=[event])
    assert r.status_code == 202 and r.headers["retry-after"] == "2"
    assert r.json()["pending"] is True and "clockfabric hosts approve gpu-7" in r.json()["detail"]
    held = listed(client)["gpu-7"]
    assert (held["state"], held["address"], held["neighbours"]) == (
        "pending", "10.0.0.7", {"eth0": "leaf0:swp7", "eth1": "leaf1:swp7"})
    # neither admitted nor stored: not a host of the fleet, and its events stay with its agent
    assert "gpu-7" not in {h["host"] for h in client.get("/api/v1/hosts", headers=AUTH).json()["items"]}
    assert client.get("/api/v1/events", headers=AUTH).json()["items"] == []
    who = client.get("/api/v1/whoami", headers=as_host(TOKEN, "gpu-7")).json()
    assert (who["enrolled"], who["pending"]) == (False, "pending")

    assert decide(client, "approve", ["gpu-7"]).json() == {"approved": ["gpu-7"]}
    assert listed(client) == {}
    r = push(client, "gpu-7", events=[event])
    assert r.status_code == 200 and r.json()["events_new"] == 1
    rows = {h["host"]: h for h in client.get("/api/v1/hosts", headers=AUTH).json()["items"]}
    assert rows["gpu-7"]["state"] == "ok" and rows["gpu-7"]["info"]["address"] == "10.0.0.7"


def test_a_hosts_credential_and_the_viewer_token_cannot_approve(env):
    client, *_ = env
    push(client, "gpu-7")
    assert decide(client, "approve", ["gpu-7"], headers=as_host(TOKEN, "gpu-7")).status_code == 401
    assert decide(client, "approve", ["gpu-7"], headers=as_host(TOKEN, "h0")).status_code == 401
    assert decide(client, "approve", ["gpu-7"], headers={"Authorization": f"Bearer {VIEWER}"}).status_code == 403
    assert decide(client, "approve", ["gpu-7"], headers={}).status_code == 401
    # the viewer reads the list; a host's credential does not
    assert client.get("/api/v1/pending", headers={"Authorization": f"Bearer {VIEWER}"}).status_code == 200
    assert client.get("/api/v1/pending", headers=as_host(TOKEN, "gpu-7")).status_code == 401
    assert listed(client)["gpu-7"]["state"] == "pending"
    assert push(client, "gpu-7").status_code == 202


def test_a_rejected_host_is_refused_until_approved(env):
    client, *_ = env
    push(client, "gpu-7")
    assert decide(client, "reject", ["gpu-7"]).json() == {"rejected": ["gpu-7"]}
    r = push(client, "gpu-7")
    assert r.status_code == 403 and "rejected by an operator" in r.json()["detail"]
    assert listed(client)["gpu-7"]["state"] == "rejected"
    assert client.get("/api/v1/whoami", headers=as_host(TOKEN, "gpu-7")).json()["pending"] == "rejected"
    assert decide(client, "approve", ["gpu-7"]).status_code == 200
    assert push(client, "gpu-7").status_code == 200
    who = client.get("/api/v1/whoami", headers=as_host(TOKEN, "gpu-7")).json()
    assert (who["enrolled"], who["pending"]) == (True, None)


@pytest.mark.parametrize("body, status, says", [
    ({"hosts": ["nobody"]}, 404, "host 'nobody' does not wait for approval"),
    ({"hosts": ["gpu-7", "nobody"]}, 404, "host 'nobody' does not wait for approval"),
    ({"hosts": []}, 400, '{"hosts": [NAME, ...]}'),
    ({"hosts": ["a b"]}, 400, "'a b' is not a host name"),
    ({"hosts": [7]}, 400, "'7' is not a host name"),
    (["gpu-7"], 400, '{"hosts": [NAME, ...]}'),
])
def test_bad_decisions_are_one_line_and_change_nothing(env, body, status, says):
    client, *_ = env
    push(client, "gpu-7")
    r = client.post("/api/v1/pending/approve", headers=AUTH, json=body)
    assert r.status_code == status and says in r.json()["detail"], r.text
    assert listed(client)["gpu-7"]["state"] == "pending"


def test_what_a_held_host_sends_is_bounded(env):
    client, *_ = env
    many = {f"eth{i}": f"leaf0:swp{i}" for i in range(MAX_HELD_NEIGHBOURS + 40)}
    assert push(client, "gpu-7", heard=many, address="not-an-address").status_code == 202
    held = listed(client)["gpu-7"]
    assert len(held["neighbours"]) == MAX_HELD_NEIGHBOURS and held["address"] is None


def test_the_held_hosts_are_bounded(env, monkeypatch):
    client, *_ = env
    monkeypatch.setattr(pending, "MAX_HELD", 2)
    assert [push(client, h).status_code for h in ("a1", "a2", "a3")] == [202, 202, 503]
    assert set(listed(client)) == {"a1", "a2"}
    assert push(client, "a1").status_code == 202  # one held already is refreshed still


def test_a_held_host_is_written_again_only_when_it_changes_or_now_and_then(env, monkeypatch):
    client, fleet, clock = env
    writes = []
    real = fleet.storage.hold
    monkeypatch.setattr(fleet.storage, "hold", lambda *a: writes.append(a) or real(*a))
    for _ in range(3):
        push(client, "gpu-7")
    assert len(writes) == 1
    push(client, "gpu-7", heard={"eth0": "leaf0:swp9"})  # moved: written at once
    clock.now += 31 * 10**9
    push(client, "gpu-7", heard={"eth0": "leaf0:swp9"})  # the same, later: last seen refreshed
    assert len(writes) == 3 and listed(client)["gpu-7"]["neighbours"] == {"eth0": "leaf0:swp9"}


def test_without_pending_an_unknown_host_is_refused_as_before(tmp_path):
    storage = SqliteStorage(tmp_path / "c.db")
    with TestClient(create_app(Fleet(storage, hosts=["h0"]), TOKEN, tick_s=3600)) as client:
        r = push(client, "gpu-7")
        assert r.status_code == 403 and "not enrolled" in r.json()["detail"]
        assert client.get("/api/v1/pending", headers=AUTH).json()["items"] == []
    storage.close()
