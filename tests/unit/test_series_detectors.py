"""The detectors read their samples from the series engine at each tick (series.feed): written as
agents write them, through the gate, they open the alerts they did when they came in pushes."""

from __future__ import annotations

import json
import socket
import time

import pytest
from fastapi.testclient import TestClient
from prometheus_client.parser import text_string_to_metric_families

from clockfabric.agent import digest
from clockfabric.controller.app import create_app
from clockfabric.controller.config import parse_config
from clockfabric.controller.detectors import DetectorSet
from clockfabric.controller.fleet import Fleet
from clockfabric.controller.monitor import FEED_PAUSE_S, Monitor
from clockfabric.controller.series import feed as feed_module
from clockfabric.controller.series import read
from clockfabric.controller.series.feed import FIRST_NS, SampleFeed
from clockfabric.controller.series.read import Series, _newest_ms
from clockfabric.controller.storage.sqlite import SqliteStorage
from clockfabric.topology import leafspine
from tests.series import FLEET_TOKEN, series_path, write
from tests.unit.credentials import as_host

AUTH = {"Authorization": f"Bearer {FLEET_TOKEN}"}


@pytest.fixture
def env(tmp_path):
    topo = leafspine(4, 2, 2)
    storage = SqliteStorage(tmp_path / "c.db")
    with series_path(tmp_path) as series:
        monitor = Monitor.create(storage, topology=topo, series=series.series)
        fleet = Fleet(storage, hosts=sorted(topo.hosts) + sorted(topo.switches), stale_s=60, monitor=monitor,
                      series=series)
        with TestClient(create_app(fleet, FLEET_TOKEN, tick_s=3600)) as client:
            yield client, fleet, series, topo
    storage.close()


def test_path_maps_let_a_congestion_alert_name_the_links(env):
    client, fleet, series, topo = env
    # h0's probe paths as its agent traced them: two over spine0, one over spine1; h2's back over spine0
    maps = {"h0": [["h2", "eth0:7300", 0, "spine0"], ["h2", "eth0:7301", 0, "spine1"],
                   ["h3", "eth0:7300", 0, "spine0"]],
            "h2": [["h0", "eth0:7300", 0, "spine0"]]}
    congested = {("h0", "h2", "eth0:7300"), ("h0", "h3", "eth0:7300")}
    t0 = time.time_ns() - 3 * 10**9
    for window in range(2):  # two bad windows open it: each read at a tick
        for host, rows in maps.items():
            samples = [{"name": f"owd_{stat}_ns", "value": value, "labels": {"src": host, "dst": dst, "path": path}}
                       for dst, path, *_ in rows
                       for stat, value in (("floor", 20_000), ("p50", 900_000 if (host, dst, path) in congested
                                                                   else 21_000))]
            r = client.post("/api/v1/push", headers=as_host(FLEET_TOKEN, host),
                            json={"host": host, "boot": "b", "paths": rows})
            assert r.status_code == 200
            # and what the agent works out of them as the answer asks (agent.digest)
            samples += digest.queueing(samples, host, [(dst, path) for dst, path, *_ in rows],
                                       digest.Ask.heard(r.json()))
            write(series, host, samples, t0 + window * 10**9)
        fleet.tick()
    (alert,) = client.get("/api/v1/alerts", headers=AUTH, params={"open_only": True}).json()["items"]
    up, down = topo.find_link("leaf0", "spine0").name, topo.find_link("spine0", "leaf1").name
    # h0's own cable and h2's are cleared by the quiet path over spine1; with two leaves, leaf0 -> spine0
    # and spine0 -> leaf1 carry the same paths: one of the two
    assert alert["detail"]["links"] == [{"link": up, "direction": "leaf0->spine0"},
                                        {"link": down, "direction": "spine0->leaf1"}], alert
    assert sorted((p["src"], p["dst"]) for p in alert["detail"]["paths"]) == [("h0", "h2"), ("h0", "h3")]
    rows = client.get("/api/v1/paths", headers=AUTH, params={"host": "h0"}).json()["items"]
    assert [(r["dst"], r["via"]) for r in rows] == [("h2", "spine0"), ("h2", "spine1"), ("h3", "spine0")]
    assert rows[1]["links"] == [topo.find_link("h0", "leaf0").name, topo.find_link("leaf0", "spine1").name,
                                topo.find_link("spine1", "leaf1").name, topo.find_link("leaf1", "h2").name]
    bad = client.post("/api/v1/push", headers=as_host(FLEET_TOKEN, "h0"),
                      json={"host": "h0", "boot": "b", "paths": [["h2", "eth0:7300", -1, "spine0"]]})
    assert bad.status_code == 422 and "paths" in bad.text


def test_the_feed_gives_each_sample_once(tmp_path):
    with series_path(tmp_path) as series:
        assert series.series is not None
        feed = SampleFeed(series.series, names=("link_up",))
        now = time.time_ns()
        write(series, "h1", [{"name": "link_up", "value": 1.0, "labels": {"device": "eth0"}}], now - 10**9)
        assert [(s.host, s.value) for s in feed.new(now)] == [("h1", 1.0)]
        assert feed.new(now + 10**8) == []  # read again within the overlap: not fed twice
        write(series, "h1", [{"name": "link_up", "value": 0.0, "labels": {"device": "eth0"}}], now)
        assert [s.value for s in feed.new(time.time_ns())] == [0.0]


def test_an_export_lines_series_and_newest_time_are_read_without_parsing_it():
    """What the engine writes, labels holding quotes, commas and the very text that ends a metric:
    the series is the metric's JSON text, and the newest time the timestamps' last."""
    hard = 'a"b,"values":[1,2]'  # a label value with a quote, a comma and `,"values":[` in it
    metric = {"__name__": "clockfabric_link_up", "device": hard, "host": "h1"}
    for times in ([1700000000000], [1700000000000, 1700000001000, 1700000002000]):
        line = json.dumps({"metric": metric, "values": [1.5] * len(times), "timestamps": times},
                          separators=(",", ":"))
        key, newest = _newest_ms(line)
        assert json.loads(key[len('{"metric":'):]) == metric and newest == times[-1]
    assert _newest_ms('{"metric":{},"timestamps":[1],"values":[2]}') is None  # not the engine's shape: parsed
    assert _newest_ms('{"metric":{},"values":[2],"timestamps":[]}') is None


def test_the_feed_reads_a_series_that_was_just_made(tmp_path):
    """A flow that just started: its first sample reaches the detectors at the first read a flush
    is due, not when the engine's index buffers get round to it (about ten seconds, past the
    overlap)."""
    with series_path(tmp_path) as series:
        assert series.series is not None
        feed = SampleFeed(series.series, names=("job_flow_tx_bps",))
        now = time.time_ns()
        assert feed.new(now) == []
        labels = {"jobid": "B", "peer": "h5", "plane": "0", "direction": "out"}
        write(series, "h6", [{"name": "job_flow_tx_bps", "value": 9e7, "labels": labels}], now, wait=False)
        time.sleep(read.FLUSH_EVERY_S)
        assert [(s.host, s.value) for s in feed.new(time.time_ns())] == [("h6", 9e7)]


def test_a_series_the_feed_has_fed_is_not_parsed_again(tmp_path, monkeypatch):
    """Of a read's series, only those with a sample newer than the feed fed are parsed."""
    with series_path(tmp_path) as series:
        assert series.series is not None
        feed = SampleFeed(series.series, names=("link_up",))
        now = time.time_ns()
        for host in ("h1", "h2"):
            write(series, host, [{"name": "link_up", "value": 1.0, "labels": {"device": "eth0"}}], now - 10**9)
        assert sorted(s.host for s in feed.new(now)) == ["h1", "h2"]
        write(series, "h2", [{"name": "link_up", "value": 0.0, "labels": {"device": "eth0"}}], now)
        parsed: list[str] = []
        loads = read.json.loads
        monkeypatch.setattr(read.json, "loads", lambda text: parsed.append(text) or loads(text))
        assert [(s.host, s.value) for s in feed.new(time.time_ns())] == [("h2", 0.0)]
        assert len(parsed) == 1 and '"h2"' in parsed[0]  # h1's line, all of it fed, was skipped unread


def test_a_feed_behind_for_long_reads_no_further_back_than_a_restarted_one(tmp_path):
    """Reads refused for an hour (the engine overloaded): the next reaches back FIRST_NS, as a
    restarted controller's first read does, not the whole hour it missed."""
    with series_path(tmp_path) as series:
        now = time.time_ns()
        feed = SampleFeed(series.series, names=("link_up",), since_ns=now - 3600 * 10**9)
        labels = {"device": "eth0"}
        write(series, "h1", [{"name": "link_up", "value": 0.0, "labels": labels}], now - FIRST_NS - 60 * 10**9)
        write(series, "h1", [{"name": "link_up", "value": 1.0, "labels": labels}], now - 10**9)
        assert [s.value for s in feed.new(now)] == [1.0]


def test_every_sample_between_two_reads_is_fed_in_time_order(tmp_path):
    """Two windows of one path's delay written between two ticks: both reach the detectors (a
    streak of bad windows counts each), the older first, and other names are not read."""
    with series_path(tmp_path) as series:
        feed = SampleFeed(series.series, names=("owd_p50_ns", "link_up"))
        now = time.time_ns()
        labels = {"src": "h1", "dst": "h2", "path": "eth0:7300"}
        write(series, "h1", [{"name": "owd_p50_ns", "value": 30_000.0, "labels": labels}], now - 3 * 10**9)
        assert [s.value for s in feed.new(now - 2 * 10**9)] == [30_000.0]
        for age_s, value in ((2, 900_000.0), (1, 950_000.0)):
            write(series, "h1", [{"name": "owd_p50_ns", "value": value, "labels": labels},
                                 {"name": "owd_p99_ns", "value": 1e6, "labels": labels}], now - age_s * 10**9)
        fed = feed.new(now)
        assert [(s.name, s.host, s.value, s.labels) for s in fed] == [
            ("owd_p50_ns", "h1", 900_000.0, labels), ("owd_p50_ns", "h1", 950_000.0, labels)]
        assert fed[1].t_ns - fed[0].t_ns == 10**9
        assert feed.new(now + 10**8) == []


def test_a_wrong_lldp_neighbour_read_from_the_engine_raises_topology_drift(env):
    _client, fleet, series, topo = env
    link = next(lk for lk in topo.links_of("leaf0") if lk.other("leaf0").node in topo.hosts)
    port, expected = link.port("leaf0"), str(link.other("leaf0"))
    wrong = next(f"{h}:eth0" for h in sorted(topo.hosts) if f"{h}:eth0" != expected)
    write(series, "leaf0", [{"name": "lldp_neighbour", "value": 1.0,
                             "labels": {"device": port.iface, "neighbour": wrong}}])
    fleet.tick()
    drifts = [a for a in fleet.storage.alerts(open_only=True) if a.kind == "topology_drift"]
    assert [(a.detail["port"], a.detail["seen"]) for a in drifts] == [(str(port), wrong)], drifts


def test_fresh_makes_a_new_series_searchable_at_once(tmp_path):
    """A new series (a flow that just started) is searchable about ten seconds after its first
    sample; `fresh()` flushes the embedded engine's buffers, so the next read has it."""
    with series_path(tmp_path) as series:
        reader = series.series
        assert reader is not None and reader.flushes
        now = time.time_ns()
        labels = {"jobid": "B", "flow": "10.0.0.6->10.0.0.5", "peer": "h5"}
        write(series, "h6", [{"name": "job_flow_tx_bps", "value": 9e7, "labels": labels}], now, wait=False)
        reader.fresh()
        got = reader.export(("job_flow_tx_bps",), since_ns=now - 10**9, until_ns=now + 10**9)
        assert [(s.host, s.values, s.labels["jobid"]) for s in got] == [("h6", [9e7], "B")]


def test_the_feed_reads_what_the_detectors_that_are_on_use():
    """No detector reads a probe path's delays: each host works out what they need of them
    (agent.digest), as each push's answer asks, and writes a few series beside them. A detector
    that is off has its names left unread, and asks the hosts nothing."""
    default = DetectorSet().reads()
    assert {"link_up", "lldp_neighbour", "owd_report", "owd_queueing_ns", "owd_unmeasured",
            "job_flow_probe_floor_ns", "job_flow_probe_ns", "job_flow_tx_bps", "job_flow_rtt_us",
            "job_flow_owd_out_p50_ns", "job_flow_owd_out_fallback", "job_flow_send_queue_bytes",
            "job_flow_retransmits_total"} == set(default)
    assert DetectorSet().asks() == {"congestion": {"margin_ns": 50_000, "stat": "p50"}}
    assert DetectorSet(parse_config({"congestion": {"stat": "min", "margin": "20us"}})).asks() == {
        "congestion": {"margin_ns": 20_000, "stat": "min"}}
    off = DetectorSet(parse_config({"link_down": {"enabled": False}, "congestion": {"enabled": False}}))
    assert "link_up" not in off.reads() and "owd_report" not in off.reads() and off.asks() == {}


def test_each_ticks_read_of_the_feed_is_timed_and_counted_on_metrics(env):
    client, fleet, series, _ = env
    write(series, "h0", [{"name": "link_up", "value": 1.0, "labels": {"device": "eth0"}}])
    fleet.tick()
    fleet.tick()
    m = {(s.name, tuple(sorted(s.labels.items()))): s.value
         for family in text_string_to_metric_families(client.get("/metrics", headers=AUTH).text)
         for s in family.samples}
    p = "clockfabric_controller_"
    assert m[(p + "feed_duration_seconds_count", ())] == 2
    assert m[(p + "feed_samples_total", ())] == 1  # fed once, though both reads' windows hold it
    assert m[(p + "feed_failures_total", ())] == 0
    # how far behind the detectors were: only the read that fed a sample says, its age at the read's end
    assert m[(p + "feed_behind_seconds_count", ())] == 1
    assert 0 <= m[(p + "feed_behind_seconds_sum", ())] < 30


def test_the_feed_learns_the_fleets_cadence_from_its_series(tmp_path):
    """Hosts writing every 10 s: the feed's cadence is 10 s, and a read that is not cheap is
    followed by the next half a cadence after it began, with half a cadence to answer in. A
    cadence longer than the reads' windows is learnt too: each read sees one sample a series."""
    with series_path(tmp_path) as series:
        feed = SampleFeed(series.series, names=("link_up",))
        base = time.time_ns() - 60 * 10**9
        assert feed.cadence_s is None and feed.spacing_s(5.0) == 0  # nothing seen: each tick
        up = [{"name": "link_up", "value": 1.0, "labels": {"device": "eth0"}}]
        for i, host in enumerate(("h1", "h2", "h3")):
            for k in range(3):
                write(series, host, up, base - (30 - 10 * k + i) * 10**9)
        assert len(feed.new(base)) == 9
        assert feed.cadence_s == 10.0
        assert feed.spacing_s(feed_module.CHEAP_S / 2) == 0  # a cheap read: each tick
        assert feed.spacing_s(0.5) == 5.0 and feed.budget_s == 5.0
        assert feed.spacing_s(4.0) == 8.0  # a read past half a cadence: never more than half the time
        assert feed.new(base + 6 * 10**9) == []  # a read past the overlap: what was fed is forgotten
        # the next read's one sample a series, against each one's last: 12, 13 and 14 s before
        for host in ("h1", "h2", "h3"):
            write(series, host, up, base + 2 * 10**9)
        assert len(feed.new(base + 8 * 10**9)) == 3
        assert feed.cadence_s == 13.0


def test_a_dear_read_is_followed_by_the_next_half_a_cadence_after_it_began(tmp_path, monkeypatch):
    """A fleet writing every 6 s whose reads are not cheap: a tick soon after a read does not
    read again; one half a cadence after it began does, and feeds what came meanwhile."""
    monkeypatch.setattr(feed_module, "CHEAP_S", -1.0)  # every read counts as dear
    storage = SqliteStorage(tmp_path / "c.db")
    with series_path(tmp_path) as series:
        monitor = Monitor.create(storage, series=series.series)
        reads: list[int | None] = []
        monitor.fed = lambda _s, n, _behind: reads.append(n)
        now = time.time_ns()
        labels = {"device": "eth0"}
        for k in range(3):
            write(series, "h1", [{"name": "link_up", "value": 1.0, "labels": labels}], now - (18 - 6 * k) * 10**9)
        began = time.monotonic()
        monitor.tick(time.time_ns())
        assert reads == [3]
        write(series, "h1", [{"name": "link_up", "value": 0.0, "labels": labels}], time.time_ns())
        monitor.tick(time.time_ns())
        assert reads == [3] and time.monotonic() - began < 3  # not yet: few series have news so soon
        time.sleep(max(0.0, began + 3.05 - time.monotonic()))
        monitor.tick(time.time_ns())
        assert reads == [3, 1]
    storage.close()


def test_a_refused_read_is_not_asked_again_at_once_and_each_refusal_in_a_row_doubles_the_pause(tmp_path):
    """An engine that cannot answer the detectors' reads is not asked again at the next tick:
    reads it cannot answer take what its writers need."""
    with socket.socket() as held:  # a port nothing listens on: each read refused
        held.bind(("127.0.0.1", 0))
        url = "http://127.0.0.1:%d" % held.getsockname()[1]
    storage = SqliteStorage(tmp_path / "c.db")
    series = Series(url, budget_s=0.2)
    monitor = Monitor.create(storage, series=series)
    reads: list[int | None] = []
    monitor.fed = lambda _s, n, _behind: reads.append(n)
    try:
        monitor.tick(time.time_ns())
        monitor.tick(time.time_ns())
        assert reads == [None]  # the tick right after did not ask
        time.sleep(FEED_PAUSE_S + 0.1)
        monitor.tick(time.time_ns())
        assert reads == [None, None]
        time.sleep(FEED_PAUSE_S + 0.1)  # the pause is two now
        monitor.tick(time.time_ns())
        assert reads == [None, None]
        time.sleep(FEED_PAUSE_S)
        monitor.tick(time.time_ns())
        assert reads == [None, None, None]
    finally:
        series.close()
        storage.close()
