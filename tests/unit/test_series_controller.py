"""The controller's series path on the real app with a real engine: a push answers where the host
writes its samples; the host writes there with its own credential; the engine away shows in
/readyz and opens an alert, and both clear when it answers again."""

from __future__ import annotations

import httpx
import pytest
from fastapi.testclient import TestClient

from clockfabric.agent.http_post import Poster
from clockfabric.agent.push import Pusher
from clockfabric.agent.series_write import SeriesWriter
from clockfabric.auth.credential import host_token
from clockfabric.controller.app import create_app
from clockfabric.controller.fleet import Fleet
from clockfabric.controller.monitor import Monitor
from clockfabric.controller.series.gate import IMPORT_PATH
from clockfabric.controller.series.path import SeriesPath
from clockfabric.controller.server import Listen, server, start_in_thread
from clockfabric.controller.storage.sqlite import SqliteStorage
from clockfabric.serieswire import body
from tests.series import until
from tests.unit.credentials import as_host
from tests.waiting import wait_for

TOKEN = "t" * 32


@pytest.fixture
def env(tmp_path, series_engine):
    storage = SqliteStorage(tmp_path / "c.db", quick_check_s=0)
    series = SeriesPath(data_dir=tmp_path / "series", fleet_token=TOKEN, url=series_engine.url)
    series.start()
    fleet = Fleet(storage, hosts=["h0"], stale_s=60, monitor=Monitor.create(storage), series=series)
    with TestClient(create_app(fleet, TOKEN, tick_s=0.05, check_s=0.05)) as client:
        yield client, fleet, series
    series.stop()
    storage.close()


def test_a_pushing_host_is_told_where_to_write_and_may(env, series_engine):
    client, _fleet, series = env
    def pushed() -> dict:
        r = client.post("/api/v1/push", headers=as_host(TOKEN, "h0"), json={"host": "h0", "boot": "b1", "events": []})
        assert r.status_code == 200, r.text
        return r.json()

    until(lambda: pushed().get("series_port") == series.write_port)
    lines = body([{"name": "owd_p50_ns", "value": 1500.0, "labels": {"src": "h0", "dst": "h9", "path": "p0"}}], 0)
    lines = lines.replace(b" 0\n", b"\n")  # no timestamp: the engine's now
    # told where to write only once the gate takes it: the first write gets through
    assert httpx.post(f"http://127.0.0.1:{series.write_port}{IMPORT_PATH}", content=lines,
                      headers=as_host(TOKEN, "h0")).status_code == 204
    assert series.series is not None
    until(lambda: [(s.host, s.value) for s in series.series.latest("owd_p50_ns", match={"dst": "h9"})]
          == [("h0", 1500.0)], series_engine.url)


def test_the_engine_down_is_not_ready_and_alerts_until_it_is_back(tmp_path):
    """The embedded engine stopped (its watchdog too), then started again on its port and data."""
    storage = SqliteStorage(tmp_path / "c.db", quick_check_s=0)
    series = SeriesPath(data_dir=tmp_path / "series", fleet_token=TOKEN)
    series.start(["h0"])
    monitor = Monitor.create(storage)
    fleet = Fleet(storage, hosts=["h0"], stale_s=60, monitor=monitor, series=series)
    engine = series.engine
    assert engine is not None and series.series is not None
    lines = b'clockfabric_link_up{device="eth0"} 1\n'
    assert httpx.post(series.write_url + IMPORT_PATH, content=lines, headers=as_host(TOKEN, "h0")).status_code == 204
    until(lambda: len(series.series.latest("link_up")) == 1, engine.url)
    with TestClient(create_app(fleet, TOKEN, tick_s=0.05, check_s=0.05)) as client:
        wait_for("ready", lambda: client.get("/readyz").status_code == 200, timeout_s=5)
        engine.stop()
        wait_for("readyz to name the engine", lambda: "engine" in client.get("/readyz").json()
                 .get("failing", {}).get("series", ""), timeout_s=5)
        wait_for("the alert", lambda: "series_engine" in monitor.alerts.open_by_kind(), timeout_s=5)
        engine.start()
        wait_for("ready again", lambda: client.get("/readyz").status_code == 200, timeout_s=10)
        wait_for("the alert resolved", lambda: "series_engine" not in monitor.alerts.open_by_kind(), timeout_s=5)
        # what the engine took before it stopped is still there
        assert [(s.host, s.value) for s in series.series.latest("link_up")] == [("h0", 1.0)]
    series.stop()
    storage.close()


def test_an_agent_writes_its_samples_to_the_gate_the_controller_names(tmp_path, series_engine):
    """The real Pusher against a real controller on loopback: its samples reach the engine through
    the gate, under its own host label."""
    storage = SqliteStorage(tmp_path / "c.db", quick_check_s=0)
    series = SeriesPath(data_dir=tmp_path / "series", fleet_token=TOKEN, url=series_engine.url)
    series.start()
    srv = server(Fleet(storage, hosts=["h1"], series=series), TOKEN, Listen(port=0))
    thread = start_in_thread(srv)
    url = f"http://127.0.0.1:{srv.servers[0].sockets[0].getsockname()[1]}"
    sample = {"name": "link_transitions_total", "value": 3.0, "labels": {"device": "eth7", "host": "h2"}}
    agent = Pusher(url, host_token(TOKEN, "h1"), "h1", snapshot=lambda: ([], [sample], {}))
    try:
        # the first push lets the host in at the gate; vmauth takes it on a reload of its own
        # (SIGHUP), and the agent is told where to write only then: not one write is refused
        until(lambda: agent.push_once() and agent.series.counters["series_writes"] >= 1)
        assert agent.series.counters["series_write_failures"] == 0
        assert series.series is not None
        until(lambda: [(s.host, s.labels) for s in series.series.latest("link_transitions_total",
                                                                        match={"device": "eth7"})]
              == [("h1", {"device": "eth7"})], series_engine.url)
    finally:
        srv.should_exit = True
        thread.join(5)
        series.stop()
        storage.close()


def test_an_engine_with_its_disk_full_is_not_ready_and_alerts(tmp_path):
    """A real engine below its free-space floor: it answers /health but refuses every write (503).
    The agent's write fails and is counted; /readyz and an alert say why."""
    storage = SqliteStorage(tmp_path / "c.db", quick_check_s=0)
    series = SeriesPath(data_dir=tmp_path / "series", fleet_token=TOKEN,
                        engine_flags=("-storage.minFreeDiskSpaceBytes=1000000000000000000",))
    series.start(["h0"])
    monitor = Monitor.create(storage)
    fleet = Fleet(storage, hosts=["h0"], stale_s=60, monitor=monitor, series=series)
    try:
        poster = Poster(as_host(TOKEN, "h0"), 10.0)
        writer = SeriesWriter(poster)
        assert not writer.write(series.write_url + IMPORT_PATH, [{"name": "link_up", "value": 1.0}])
        assert writer.counters["series_write_failures"] == 1
        poster.close()
        with TestClient(create_app(fleet, TOKEN, tick_s=0.05, check_s=0.05)) as client:
            wait_for("readyz to name the full disk", lambda: "disk is full" in client.get("/readyz").json()
                     .get("failing", {}).get("series", ""), timeout_s=5)
            wait_for("the alert", lambda: "series_engine" in monitor.alerts.open_by_kind(), timeout_s=5)
    finally:
        series.stop()
        storage.close()
