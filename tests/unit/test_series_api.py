"""The API's sample routes (/api/v1/owd, /links, /samples) over a real engine, written as agents
write: through the gate with each host's credential."""

from __future__ import annotations

import time

import pytest
from fastapi.testclient import TestClient

from clockfabric.controller.app import create_app
from clockfabric.controller.fleet import Fleet
from clockfabric.controller.storage.sqlite import SqliteStorage
from tests.series import FLEET_TOKEN, series_path, write

AUTH = {"Authorization": f"Bearer {FLEET_TOKEN}"}


@pytest.fixture
def env(tmp_path):
    storage = SqliteStorage(tmp_path / "c.db")
    with series_path(tmp_path) as series:
        fleet = Fleet(storage, hosts=["h1", "h2"], stale_s=60, series=series)
        with TestClient(create_app(fleet, FLEET_TOKEN, tick_s=3600)) as client:
            yield client, series
    storage.close()


def test_owd_matrix_links_and_ranges_from_the_engine(env):
    client, series = env
    t0 = time.time_ns() - 2 * 10**9
    owd = [{"name": "owd_p50_ns", "value": v, "labels": {"src": "h1", "dst": "h2", "path": "eth0:7300"}}
           for v in (21_000.0, 22_000.0)]
    write(series, "h1", owd[:1] + [{"name": "link_up", "value": 1, "labels": {"device": "eth0"}}], t0, wait=False)
    write(series, "h1", owd[1:] + [{"name": "link_up", "value": 0, "labels": {"device": "eth0"}},
                                   {"name": "link_transitions_total", "value": 3, "labels": {"device": "eth0"}}],
          t0 + 10**9)
    rows = client.get("/api/v1/owd", headers=AUTH).json()["items"]
    assert [(r["src"], r["dst"], r["path"], r["owd_ns"], r["reported_by"]) for r in rows] == [
        ("h1", "h2", "eth0:7300", 22_000.0, "h1")]
    links = client.get("/api/v1/links", headers=AUTH).json()["items"]
    assert links == [{"host": "h1", "device": "eth0", "up": False, "t_ns": t0 // 10**6 * 10**6 + 10**9,
                      "transitions": 3}]
    assert client.get("/api/v1/owd", headers=AUTH, params={"stat": "p42"}).status_code == 422
    got = client.get("/api/v1/samples", headers=AUTH, params={"name": "owd_p50_ns", "host": "h1",
                                                              "since_ns": t0 - 10**9}).json()["items"]
    assert {s["value"] for s in got} == {21_000.0, 22_000.0} and all(s["host"] == "h1" for s in got)
    assert client.get("/api/v1/samples", headers=AUTH, params={"name": "x{y}"}).status_code == 422


def test_a_reader_without_an_engine_is_told_so(tmp_path):
    storage = SqliteStorage(tmp_path / "c.db")
    fleet = Fleet(storage, hosts=["h1"], stale_s=60)
    with TestClient(create_app(fleet, FLEET_TOKEN, tick_s=3600)) as client:
        r = client.get("/api/v1/links", headers=AUTH)
        assert r.status_code == 503 and "without a series engine" in r.json()["detail"]
    storage.close()
