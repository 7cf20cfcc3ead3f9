"""Samples through a real victoria-metrics and its vmauth gate on loopback: written with a host's
credential, read back by `Series`; a forged host label overridden; queries held to their budget."""

from __future__ import annotations

import logging
import os
import socket
import threading
import time
import uuid

import httpx
import pytest

from clockfabric.agent.http_post import Poster
from clockfabric.agent.series_write import SeriesWriter
from clockfabric.auth.credential import host_token
from clockfabric.controller.series.gate import COALESCE_S, IMPORT_PATH, Gate
from clockfabric.controller.series import promql, read
from clockfabric.controller.series.read import Series, SeriesError
from clockfabric.serieswire import body, line
from tests.series import until

FLEET = "fleet-token-for-tests"


@pytest.fixture(scope="module")
def gate(series_engine, tmp_path_factory):
    g = Gate(series_engine.url, FLEET, tmp_path_factory.mktemp("gate"))
    g.allow(["h1", "h2"])
    g.start()
    yield g
    g.stop()


@pytest.fixture
def series(series_engine):
    s = Series(series_engine.url, budget_s=2.0)
    yield s
    s.close()


def push(gate: Gate, host: str, lines: str | bytes, *, token: str | None = None, params: str = "") -> httpx.Response:
    return httpx.post(gate.url + IMPORT_PATH + params, content=lines,
                      headers={"Authorization": f"Bearer {token or host_token(FLEET, host)}"}, timeout=5.0)


def test_line_escapes_values_and_drops_the_host_label():
    got = line("rtt_us", 5, {"peer": 'a"b\\c', "host": "other", "path": "", "1x": "y"}, 1234)
    assert got == 'clockfabric_rtt_us{_1x="y",peer="a\\"b\\\\c"} 5.0 1234'
    assert body([{"name": "x", "value": float("nan")}, {"name": "y", "value": 1.0}], 7) == b"clockfabric_y{} 1.0 7\n"


def test_a_host_writes_and_the_controller_reads_its_latest(gate, series, series_engine):
    name = f"t_{uuid.uuid4().hex[:8]}"
    now_ms = time.time_ns() // 1_000_000
    lines = body([{"name": name, "value": 1.0, "labels": {"peer": "p1"}}], now_ms - 2000)
    lines += body([{"name": name, "value": 2.0, "labels": {"peer": "p1"}},
                   {"name": name, "value": 7.0, "labels": {"peer": "p2"}}], now_ms - 1000)
    assert push(gate, "h1", lines).status_code == 204
    until(lambda: len(series.latest(name)) == 2 and series.latest(name)[0].value == 2.0, series_engine.url)
    got = series.latest(name)
    assert [(s.host, s.labels, s.value, s.t_ns // 1_000_000) for s in got] == [
        ("h1", {"peer": "p1"}, 2.0, now_ms - 1000), ("h1", {"peer": "p2"}, 7.0, now_ms - 1000)]
    assert series.latest(name, hosts=["h2"]) == []
    assert [s.value for s in series.latest(name, match={"peer": "p2"})] == [7.0]
    # written before `since`: not the latest any more
    assert series.latest(name, since_ns=(now_ms - 500) * 1_000_000) == []
    ranged = series.range(name, since_ns=(now_ms - 3000) * 1_000_000, until_ns=now_ms * 1_000_000,
                          match={"peer": "p1"})
    assert [s.value for s in ranged][-1] == 2.0 and 1.0 in [s.value for s in ranged]
    # raw, at the instants written, and of the hosts asked for only
    assert push(gate, "h2", body([{"name": name, "value": 9.0, "labels": {"peer": "p1"}}], now_ms - 1500)).status_code == 204
    until(lambda: len(series.latest(name)) == 3, series_engine.url)
    window = {"since_ns": (now_ms - 3000) * 1_000_000, "until_ns": now_ms * 1_000_000}
    assert sorted((r.host, r.labels["peer"], r.timestamps_ms, r.values) for r in series.export((name,), **window,
                                                                                                 hosts=["h1"])) == [
        ("h1", "p1", [now_ms - 2000, now_ms - 1000], [1.0, 2.0]), ("h1", "p2", [now_ms - 1000], [7.0])]
    assert {r.host for r in series.export((name,), **window)} == {"h1", "h2"}
    assert list(series.export((name,), **window, hosts=[])) == []


def test_a_delay_is_held_under_its_metrics_name_and_read_back_as_written(gate, series, series_engine):
    """A probe path's delay goes to the engine as /metrics serves it (the rules and dashboards read
    it there, no copy made), and comes back to the controller under the product's own name."""
    peer = f"p{uuid.uuid4().hex[:8]}"
    now_ms = time.time_ns() // 1_000_000
    labels = {"src": "h1", "dst": peer, "path": "s2"}
    lines = body([{"name": "owd_p50_ns", "value": 52_300, "labels": labels},
                  {"name": "owd_floor_ns", "value": 50_047.5, "labels": labels}], now_ms - 1000)
    assert b'clockfabric_owd_p50_seconds{direction="out",path="s2",peer="' + peer.encode() + b'"} 5.23e-05' in lines
    assert push(gate, "h1", lines).status_code == 204
    until(lambda: series.latest("owd_floor_ns", match={"dst": peer}) != [], series_engine.url)
    (got,) = series.latest("owd_p50_ns", match={"dst": peer})
    assert (got.host, got.labels, got.value) == ("h1", labels | {"src": "h1"}, 52_300)
    assert [s.value for s in series.latest("owd_floor_ns", match={"src": "h1", "dst": peer})] == [50_047.5]
    assert series.latest("owd_p50_ns", match={"src": "h2", "dst": peer}) == []
    assert [d for d in series.delays("owd_floor_ns") if d[1] == peer] == [("h1", peer, "s2", 50_047.5)]
    with pytest.raises(ValueError, match="not a probe path's delay"):
        series.delays("rx_bytes")
    window = {"since_ns": (now_ms - 3000) * 1_000_000, "until_ns": now_ms * 1_000_000}
    exported = [r for r in series.export(("owd_p50_ns", "owd_floor_ns"), **window) if r.labels["dst"] == peer]
    assert sorted((r.name, r.host, r.labels, r.values) for r in exported) == [
        ("owd_floor_ns", "h1", {"dst": peer, "path": "s2", "src": "h1"}, [50_047.5]),
        ("owd_p50_ns", "h1", {"dst": peer, "path": "s2", "src": "h1"}, [52_300])]
    # the rules' own reading of it: seconds, by peer, the probes' direction
    r = httpx.get(series_engine.url + "/api/v1/query",
                  params={"query": f'clockfabric_owd_p50_seconds{{peer="{peer}",direction="out"}}'}).json()
    assert [(m["metric"]["host"], float(m["value"][1])) for m in r["data"]["result"]] == [("h1", 5.23e-05)]


def test_a_fleet_wide_read_of_delays_comes_in_slices_of_hosts_and_misses_none(series, series_engine, monkeypatch):
    """Each slice is about SLICE_SERIES series and SLICE_NAMES_BYTES of escaped host names."""
    tag = uuid.uuid4().hex[:8]
    hosts = [f"n{i}.rack-{tag}.example" for i in range(7)]  # dots and dashes: escaped in the query
    now_ms = time.time_ns() // 1_000_000
    lines = "\n".join(line("owd_p99_ns", 1000.0 * i + p, {"dst": f"peer-{tag}", "path": str(p)}, now_ms - 1000, host=h)
                      for i, h in enumerate(hosts) for p in range(3))
    httpx.post(series_engine.url + "/api/v1/import/prometheus", content=lines, timeout=5.0).raise_for_status()
    expected = sorted((h, f"peer-{tag}", str(p), 1000.0 * i + p) for i, h in enumerate(hosts) for p in range(3))
    until(lambda: len([d for d in series.delays("owd_p99_ns") if tag in d[1]]) == 21, series_engine.url)
    queries = []
    real = series.query
    monkeypatch.setattr(series, "query", lambda *a, **k: queries.append(a[1]["query"]) or real(*a, **k))
    monkeypatch.setattr(read, "FIRST_SLICE_HOSTS", 1)
    monkeypatch.setattr(read, "SLICE_SERIES", 6)  # two hosts of three paths each, after the first
    assert sorted(d for d in series.delays("owd_p99_ns") if tag in d[1]) == expected
    assert len(queries) >= 4
    queries.clear()
    monkeypatch.setattr(read, "SLICE_SERIES", 10**6)
    monkeypatch.setattr(promql, "SLICE_NAMES_BYTES", len(promql.quote(promql.re.escape(hosts[0]))) + 1)  # one name
    assert sorted(d for d in series.delays("owd_p99_ns") if tag in d[1]) == expected
    assert all(q.count("|") == 0 for q in queries) and len(queries) >= len(hosts)
    queries.clear()
    assert sorted(series.delays("owd_p99_ns", hosts=hosts[:2])) == expected[:6]  # of the hosts asked only
    assert len(queries) == 2  # a slice a host


def test_each_pairs_worst_path_is_worked_out_by_the_engine_and_a_pages_pairs_read_alone(series, series_engine):
    """The heatmap's overview of a large fleet: each pair's worst path (of a path or a plane; less
    each path's floor), read as one row a pair; a page's pairs read path by path, those alone."""
    tag = uuid.uuid4().hex[:8]
    a, b, x, y = (f"{n}-{tag}" for n in "abxy")
    now_ms = time.time_ns() // 1_000_000
    rows = [(a, x, "p0:1", 10.0), (a, x, "p0:2", 40.0), (a, x, "p1:1", 30.0), (a, y, "p1:1", 5.0),
            (b, x, "p0:1", float("nan")), (b, x, "p1:1", 7.0)]  # a NaN is no pair's worst
    floors = [(a, x, "p0:1", 1.0), (a, x, "p0:2", 38.0), (a, y, "p1:1", 1.0), (b, x, "p1:1", 2.0)]
    lines = [line(name, ns, {"dst": dst, "path": path}, now_ms - 1000, host=src)
             for name, found in (("owd_p50_ns", rows), ("owd_floor_ns", floors)) for src, dst, path, ns in found]
    httpx.post(series_engine.url + "/api/v1/import/prometheus", content="\n".join(lines), timeout=5.0).raise_for_status()
    until(lambda: len([d for d in series.delays("owd_floor_ns") if tag in d[1]]) == 4, series_engine.url)

    def worst(**kw) -> list:
        return sorted(w for w in series.pair_worst("owd_p50_ns", **kw) if tag in w[0])

    assert worst() == [(a, x, 40.0), (a, y, 5.0), (b, x, 7.0)]
    assert worst(path="p1") == [(a, x, 30.0), (a, y, 5.0), (b, x, 7.0)]  # a plane: each of its paths
    assert worst(path="p0:1") == [(a, x, 10.0)]
    assert worst(less="owd_floor_ns") == [(a, x, 9.0), (a, y, 4.0), (b, x, 5.0)]  # a x p1:1 has no floor
    assert worst(path="p0", less="owd_floor_ns") == [(a, x, 9.0)]
    assert worst(hosts=[b]) == [(b, x, 7.0)]  # of the hosts asked only
    assert sorted(series.delays("owd_p50_ns", hosts=[a, b], peers=[y])) == [(a, y, "p1:1", 5.0)]
    assert sorted(series.delays("owd_p50_ns", hosts=[a], peers=[])) == []
    assert {"p0:1", "p0:2", "p1:1"} <= set(series.path_labels("owd_p50_ns"))
    with pytest.raises(ValueError, match="^rx_bytes is not a probe path's delay"):
        series.pair_worst("rx_bytes")
    with pytest.raises(ValueError, match="^rx_bytes is not a probe path's delay"):
        series.pair_worst("owd_p50_ns", less="rx_bytes")


def test_a_forged_host_label_is_overridden(gate, series, series_engine):
    name = f"t_{uuid.uuid4().hex[:8]}"
    now_ms = time.time_ns() // 1_000_000
    forged = f'clockfabric_{name}{{host="h2",peer="p"}} 9 {now_ms}\n'
    assert push(gate, "h1", forged, params="?extra_label=host=h2").status_code == 204
    until(lambda: series.latest(name) != [], series_engine.url)
    assert [(s.host, s.labels) for s in series.latest(name)] == [("h1", {"peer": "p"})]


def test_the_gate_refuses_a_wrong_credential_and_every_other_path(gate):
    assert push(gate, "h1", "clockfabric_x 1\n", token="h1:" + "0" * 64).status_code in (400, 401, 403)
    assert push(gate, "h3", "clockfabric_x 1\n").status_code in (400, 401, 403)  # not let in yet
    for path in ("/api/v1/query?query=up", "/api/v1/admin/tsdb/delete_series?match[]=x", "/api/v1/export"):
        r = httpx.get(gate.url + path, headers={"Authorization": f"Bearer {host_token(FLEET, 'h1')}"})
        assert r.status_code >= 400, path


def test_a_host_enrolled_later_is_live_once_the_gate_takes_its_writes(gate):
    """vmauth reloads on its own time: a host is live (told where to write) only once its writes
    are taken, and from then on the first is."""
    assert not gate.can_write("h4")
    gate.allow(["h4"])
    until(lambda: gate.can_write("h4"))
    assert push(gate, "h4", "clockfabric_later 1\n").status_code == 204


def test_a_refused_write_is_logged_without_the_credential(gate, caplog):
    """vmauth's refusal quotes the token it was given: the agent's log line must not."""
    poster = Poster({"Authorization": f"Bearer {host_token(FLEET, 'h9')}"}, 5.0)
    writer = SeriesWriter(poster)
    with caplog.at_level(logging.WARNING, logger="clockfabric.agent.series_write"):
        assert not writer.write(gate.url + IMPORT_PATH, [{"name": "link_up", "value": 1.0}])
    poster.close()
    assert "failed: HTTP 4" in caplog.text and "<credential>" in caplog.text
    assert host_token(FLEET, "h9") not in caplog.text


def test_a_fleet_enrolling_together_costs_a_few_rewrites_and_every_host_gets_in(gate):
    """One host at a time, as pushes enrol them: the gate's thread rewrites at most once per
    COALESCE_S, not once per host, and every host is let in."""
    before, t0 = gate.rewrites, time.monotonic()
    names = [f"burst{i:04d}" for i in range(2000)]
    for name in names:
        gate.allow([name])
    until(lambda: host_token(FLEET, names[-1]) in gate.path.read_text())
    assert gate.rewrites - before <= 2 + (time.monotonic() - t0) / COALESCE_S
    text = gate.path.read_text()
    assert all(host_token(FLEET, n) in text for n in names)
    until(lambda: all(gate.can_write(n) for n in names))
    assert push(gate, "burst0007", "clockfabric_burst 1\n").status_code == 204


def test_a_revoked_hosts_old_credential_is_refused_at_the_gate_and_the_others_write_on(gate):
    assert push(gate, "h2", "clockfabric_before 1\n").status_code == 204
    gate.set_epochs({"h2": 1})
    until(lambda: push(gate, "h2", "clockfabric_old 1\n").status_code in (400, 401, 403))
    assert push(gate, "h2", "clockfabric_new 1\n", token=host_token(FLEET, "h2", 1)).status_code == 204
    assert push(gate, "h1", "clockfabric_other 1\n").status_code == 204


def test_the_gates_configuration_is_its_owners_alone_whatever_the_umask(gate):
    # it holds every host's credential
    old = os.umask(0o022)
    try:
        gate.allow(["h5"])
        until(lambda: host_token(FLEET, "h5") in gate.path.read_text())  # rewritten by the gate's thread
    finally:
        os.umask(old)
    assert gate.path.stat().st_mode & 0o777 == 0o600


def test_a_query_past_its_budget_is_refused_in_time():
    """An engine that takes the connection and never answers: refused within the budget."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen()
        held: list[socket.socket] = []
        threading.Thread(target=lambda: held.append(s.accept()[0]), daemon=True).start()
        slow = Series(f"http://127.0.0.1:{s.getsockname()[1]}", budget_s=0.3)
        t0 = time.monotonic()
        with pytest.raises(SeriesError, match="did not answer within the 0.3 s budget"):
            slow.query("/api/v1/query", {"query": "clockfabric_x"})
        assert time.monotonic() - t0 < 1.5
        t0 = time.monotonic()  # a read no route waits on is given a budget of its own
        with pytest.raises(SeriesError, match="did not answer within the 1.2 s budget"):
            slow.delays("owd_p50_ns", budget_s=1.2)
        assert 1.2 < time.monotonic() - t0 < 2.5
        slow.close()


def test_an_engine_away_is_one_clear_error():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    gone = Series(f"http://127.0.0.1:{port}")
    with pytest.raises(SeriesError, match="cannot be reached"):
        gone.latest("x")
    gone.close()


def test_the_engine_is_started_again_after_it_dies(series_engine, series):
    before = series_engine.restarts
    series_engine.proc.kill()
    until(lambda: series_engine.restarts > before and series_engine.healthy(), timeout_s=10)
    assert series.latest("nothing_here") == []


def test_a_read_over_the_engines_series_limit_is_one_line_naming_the_flag(tmp_path):
    """An engine that selects at most 2 series a query (the embedded one holds 2,000,000): a read
    of 3 says which flag to raise, not the engine's own paragraph."""
    from clockfabric.controller.series.engine import engine

    small = engine(tmp_path / "small", flags=("-search.maxUniqueTimeseries=2",))
    small.start()
    try:
        httpx.post(small.url + IMPORT_PATH, content="".join(line("x", 1.0, {"n": str(i)}, None) + "\n"
                                                            for i in range(3))).raise_for_status()
        httpx.get(small.url + "/internal/force_flush").raise_for_status()
        reader = Series(small.url)
        until(lambda: reader.names() == ["x"], timeout_s=10)
        with pytest.raises(SeriesError) as refused:
            reader.latest("x")
        assert "raise that flag" in str(refused.value) and "-search.maxUniqueTimeseries" in str(refused.value)
        assert "\n" not in str(refused.value)
        reader.close()
    finally:
        small.stop()


def test_path_readings_are_each_paths_newest_and_when_of_the_hosts_asked(series, series_engine, monkeypatch):
    """A probe delay (the engine's peer label) and the class stream's (dst), each path's newest
    value and time, of the hosts asked only, since a time; in slices of hosts, none missed."""
    tag = uuid.uuid4().hex[:8]
    hosts = [f"p{i}-{tag}" for i in range(3)]
    now_ms = time.time_ns() // 1_000_000
    lines = [line(name, v, {"dst": f"peer-{tag}", "path": str(p)}, now_ms - age_ms, host=h)
             for name in ("owd_p50_ns", "class_owd_p50_ns") for i, h in enumerate(hosts) for p in range(2)
             for age_ms, v in ((9000, 1.0), (1000 * (i + 1), 1000.0 * i + p))]
    httpx.post(series_engine.url + "/api/v1/import/prometheus", content="\n".join(lines), timeout=5.0).raise_for_status()
    until(lambda: len(series.path_readings("owd_p50_ns", hosts=hosts)) == 6, series_engine.url)
    monkeypatch.setattr(promql, "SLICE_NAMES_BYTES", len(hosts[0]) + 1)  # a host a slice
    for name in ("owd_p50_ns", "class_owd_p50_ns"):
        got = sorted(series.path_readings(name, hosts=hosts[:2]))
        assert got == [(h, f"peer-{tag}", str(p), 1000.0 * i + p, (now_ms - 1000 * (i + 1)) * 1_000_000)
                       for i, h in enumerate(hosts[:2]) for p in range(2)], name
        recent = series.path_readings(name, hosts=hosts, since_ns=(now_ms - 2500) * 1_000_000)
        assert sorted(r[0] for r in recent) == [hosts[0], hosts[0], hosts[1], hosts[1]]  # h2's newest is 3 s old


def test_a_path_silent_past_the_paths_lookback_is_not_read_as_its_newest(series, series_engine):
    """A probe path's readings look back PUSHED_LOOKBACK_S, not the hour of other "latest" reads: a
    path no agent wrote in that long is no longer measured, and the engine reads every sample
    inside the window."""
    tag = uuid.uuid4().hex[:8]
    now_ms = time.time_ns() // 1_000_000
    old_ms = now_ms - (read.PUSHED_LOOKBACK_S + 60) * 1000
    lines = [line("owd_p50_ns", 10.0, {"dst": f"peer-{tag}", "path": "live"}, now_ms - 1000, host=f"a-{tag}"),
             line("owd_p50_ns", 20.0, {"dst": f"peer-{tag}", "path": "gone"}, old_ms, host=f"a-{tag}"),
             line("owd_p50_ns", 30.0, {"dst": f"peer-{tag}", "path": "gone"}, old_ms, host=f"b-{tag}")]
    httpx.post(series_engine.url + "/api/v1/import/prometheus", content="\n".join(lines), timeout=5.0).raise_for_status()
    until(lambda: len(series.latest("owd_p50_ns", match={"dst": f"peer-{tag}"})) == 3, series_engine.url)
    assert [d for d in series.delays("owd_p50_ns") if tag in d[1]] == [(f"a-{tag}", f"peer-{tag}", "live", 10.0)]
    assert [r[:4] for r in series.path_readings("owd_p50_ns", hosts=[f"a-{tag}", f"b-{tag}"])] == [
        (f"a-{tag}", f"peer-{tag}", "live", 10.0)]


def test_a_link_end_silent_past_the_lookback_of_what_every_push_carries_has_no_state(series, series_engine):
    """A link end's state rides every push: an end no agent wrote for PUSHED_LOOKBACK_S is not
    read at its state of up to an hour ago (the fabric map calls it unknown), and the engine
    reads five minutes of a fleet's link states, not the hour."""
    tag = uuid.uuid4().hex[:8]
    name = f"up_{tag}"
    now_ms = time.time_ns() // 1_000_000
    old_ms = now_ms - (read.PUSHED_LOOKBACK_S + 60) * 1000
    lines = [line(name, 1.0, {"device": "eth0"}, now_ms - 1000, host=f"a-{tag}"),
             line(name, 0.0, {"device": "eth1"}, old_ms, host=f"a-{tag}"),
             line(name, 1.0, {"device": "eth0"}, old_ms, host=f"b-{tag}")]
    httpx.post(series_engine.url + "/api/v1/import/prometheus", content="\n".join(lines), timeout=5.0).raise_for_status()
    until(lambda: len(series.latest(name)) == 3, series_engine.url)
    assert series.latest_values(name) == [(f"a-{tag}", {"device": "eth0"}, 1.0)]


def test_ranges_of_several_names_are_a_query_and_each_sample_keeps_its_name(series, series_engine, monkeypatch):
    """Names whose selectors differ only by name are one query (a delay's are another: its labels
    are the engine's own); each sample comes back under its name, scaled, name by name."""
    tag = uuid.uuid4().hex[:8]
    now_ms = time.time_ns() // 1_000_000
    lines = [line(f"r_{tag}_a", 1.0, {"jobid": tag}, now_ms - 2000, host="h1"),
             line(f"r_{tag}_b", 2.0, {"jobid": tag}, now_ms - 2000, host="h1"),
             line(f"r_{tag}_b", 3.0, {"jobid": "other"}, now_ms - 2000, host="h1"),
             line("owd_p50_ns", 52_300, {"dst": f"peer-{tag}", "path": "0"}, now_ms - 2000, host="h1")]
    httpx.post(series_engine.url + "/api/v1/import/prometheus", content="\n".join(lines), timeout=5.0).raise_for_status()
    window = {"since_ns": (now_ms - 5000) * 1_000_000, "until_ns": now_ms * 1_000_000}
    names = [f"r_{tag}_b", f"r_{tag}_a"]
    until(lambda: len({s.name for s in series.ranges(names, **window, match={"jobid": tag})}) == 2, series_engine.url)
    queries = []
    real = series.query
    monkeypatch.setattr(series, "query", lambda *a, **k: queries.append(a[1]["query"]) or real(*a, **k))
    got = series.ranges([*names, "owd_p50_ns"], **window, match={"jobid": tag})
    assert len(queries) == 2  # the two flows' names in one, the delay (no jobid: none) in the other
    assert [(s.name, s.host, s.labels, s.value) for s in got] == [
        (f"r_{tag}_b", "h1", {"jobid": tag}, 2.0), (f"r_{tag}_a", "h1", {"jobid": tag}, 1.0)]
    delays = series.ranges(["owd_p50_ns"], **window, match={"dst": f"peer-{tag}"})
    assert {(s.name, s.labels["src"], s.value) for s in delays} == {("owd_p50_ns", "h1", 52_300)}


def test_latest_of_many_hosts_is_read_in_slices_and_latest_values_without_times(series, series_engine, monkeypatch):
    tag = uuid.uuid4().hex[:8]
    hosts = [f"l{i}-{tag}" for i in range(3)]
    now_ms = time.time_ns() // 1_000_000
    name = f"up_{tag}"
    lines = [line(name, float(i), {"device": "eth0"}, now_ms - 1000, host=h) for i, h in enumerate(hosts)]
    httpx.post(series_engine.url + "/api/v1/import/prometheus", content="\n".join(lines), timeout=5.0).raise_for_status()
    until(lambda: len(series.latest(name)) == 3, series_engine.url)
    assert sorted(series.latest_values(name)) == [(h, {"device": "eth0"}, float(i)) for i, h in enumerate(hosts)]
    queries = []
    real = series.query
    monkeypatch.setattr(series, "query", lambda *a, **k: queries.append(a[1]["query"]) or real(*a, **k))
    monkeypatch.setattr(promql, "SLICE_NAMES_BYTES", len(hosts[0]) + 1)  # a host a slice: no query over the limit
    got = series.latest(name, hosts=hosts[1:])
    assert [(s.host, s.value, s.t_ns) for s in got] == [(h, float(i + 1), (now_ms - 1000) * 1_000_000)
                                                        for i, h in enumerate(hosts[1:])]
    assert len(queries) == 4 and all(q.count("|") == 0 for q in queries)


def test_the_engines_two_answers_are_joined_by_series_whatever_their_order():
    """Row by row where both list the same series in one order; by labels where they do not (a
    series in one answer only is left out)."""
    def rows(*series):
        return [{"metric": dict(m), "value": [0, v]} for m, v in series]
    a, b, c = {"host": "h1", "peer": "x"}, {"host": "h2", "peer": "x"}, {"host": "h3", "peer": "y"}
    named = [({"__name__": "m", **m}, v) for m, v in ((a, "1"), (b, "2"))]
    assert list(read._joined(rows(*named), rows((a, "10.5"), (b, "11")))) == [(a, 1.0, 10.5), (b, 2.0, 11.0)]
    assert list(read._joined(rows(*named), rows((b, "11"), (a, "10.5")))) == [(a, 1.0, 10.5), (b, 2.0, 11.0)]
    assert list(read._joined(rows((a, "1"), (c, "3")), rows((c, "13"),))) == [(c, 3.0, 13.0)]
