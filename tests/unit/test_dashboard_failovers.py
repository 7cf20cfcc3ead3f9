"""Failover decisions in the events view (controller.dashboard.failovers and its route): each
decision newest first, a move with the job flows its host sends to that peer since, a steer with
its flow; other events and flows that ended before the move left out."""

from __future__ import annotations

import time

import pytest
from fastapi.testclient import TestClient

from clockfabric.controller.app import create_app
from clockfabric.controller.dashboard.failovers import decisions
from clockfabric.controller.fleet import Fleet
from clockfabric.controller.storage.base import Event
from clockfabric.controller.storage.sqlite import SqliteStorage
from tests.series import series_path, write

TOKEN = "f" * 32
AUTH = {"Authorization": f"Bearer {TOKEN}"}
S = 10**9
NOW = time.time_ns() // S * S  # the engine takes samples of now, not of 1970
TO_B, TO_C, B_TO_A = "10.0.0.1->10.0.0.2", "10.0.0.1->10.0.0.3", "10.0.0.2->10.0.0.1"


def flow(host, label, jobid, t_ns, f=None):
    return {"host": host, "flow": label, "jobid": jobid, "peer": f, "tx_bps": 1e9, "t_ns": t_ns}


def event(kind, t_ns, host="a", peer="b", seq=0, **detail):
    return Event(host, seq, "boot", t_ns, kind, peer, detail)


def test_a_move_lists_the_flows_from_its_host_to_its_peer_that_were_still_running():
    flows = [flow("a", TO_B, "J", NOW, "b"), flow("a", TO_C, "J", NOW, "c"), flow("b", B_TO_A, "J", NOW, "a"),
             flow("a", "10.0.0.1->10.0.0.2", "old", NOW - 500 * S, "b")]
    found = decisions([event("failover_detected", NOW - 30 * S, planes=[0], reason="no heartbeats"),
                       event("failover_moved", NOW - 29 * S, seq=1, planes=[1], reason="plane 0 down"),
                       event("link_down", NOW - 31 * S, seq=2),
                       event("failover_steered", NOW - 10 * S, seq=3, planes=[1], flow=TO_B)], flows)
    assert [d["decision"] for d in found] == ["steered", "moved", "detected"]  # newest first; link_down is no decision
    steered, moved, detected = found
    assert [(f["jobid"], f["flow"]) for f in moved["flows"]] == [("J", TO_B)]  # not to c, not b's, not the ended one
    assert (moved["planes"], moved["reason"], moved["peer"]) == ([1], "plane 0 down", "b")
    assert steered["steered"] == TO_B and steered["flows"] == [] and detected["flows"] == []


@pytest.fixture
def client(tmp_path):
    storage = SqliteStorage(tmp_path / "c.db")
    for host, address in (("a", "10.0.0.1"), ("b", "10.0.0.2")):
        storage.enroll(host, 0)
        storage.seen(host, NOW, {"address": address})
    storage.add_events([event("failover_moved", NOW - 20 * S, planes=[1], reason="plane 0 down"),
                        event("failover_moved", NOW - 7200 * S, seq=1, reason="two hours ago"),
                        event("link_down", NOW - 10 * S, seq=2)])
    with series_path(tmp_path, token=TOKEN) as series:
        write(series, "a", [{"name": "job_flow_tx_bps", "value": 2e9, "labels": {"jobid": "J", "flow": TO_B}},
                            {"name": "job_processes", "value": 1.0, "labels": {"jobid": "J"}}], NOW - S)
        with TestClient(create_app(Fleet(storage, hosts=["a", "b"], clock=lambda: NOW, series=series), TOKEN,
                                   tick_s=3600)) as c:
            yield c
    storage.close()


def test_the_route_gives_the_windows_decisions_with_the_flows_they_moved(client):
    assert client.get("/api/v1/dashboard/failovers").status_code == 401
    found = client.get("/api/v1/dashboard/failovers", headers=AUTH).json()
    assert found["complete"] and [d["reason"] for d in found["items"]] == ["plane 0 down"]  # the last hour's
    assert [(f["jobid"], f["flow"], f["tx_bps"]) for f in found["items"][0]["flows"]] == [("J", TO_B, 2e9)]
    assert client.get("/api/v1/dashboard/failovers", headers=AUTH, params={"since": "3h"}).status_code == 422
