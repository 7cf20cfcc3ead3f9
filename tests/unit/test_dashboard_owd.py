"""The one-way-delay heatmap (controller.dashboard.owdmap and its route): each pair's worst path,
host x host up to 64 hosts, blocks of hosts past that with one block pair's hosts on request,
the worst pairs a page at a time, newest or over a window, as delays or their excess over floor;
and events since a time read as they were."""

from __future__ import annotations

import threading
import time

import httpx
import pytest
from fastapi.testclient import TestClient

from clockfabric.controller.app import create_app
from clockfabric.controller.dashboard.data import HEATMAP_MAX_AGE_S
from clockfabric.controller.dashboard.fresh import MAX_KEYS, Drawn, Fresh, Pending
from clockfabric.controller.dashboard.owdmap import MAX_GRID, WORST_PAGE, heatmap, natural, pairs, worst_first
from clockfabric.controller.dashboard.owdpair import pair_series
from clockfabric.controller.dashboard.owdwindow import excess, over_window
from clockfabric.controller.fleet import Fleet
from clockfabric.controller.series.read import SeriesError
from clockfabric.controller.series.sample import Sample
from clockfabric.controller.storage.base import Event
from clockfabric.controller.storage.sqlite import SqliteStorage
from clockfabric.serieswire import line
from tests.series import series_path, until, write, write_pushed

TOKEN = "f" * 32
AUTH = {"Authorization": f"Bearer {TOKEN}"}


def test_a_small_fleet_is_host_by_host_each_cell_its_worst_path():
    found = heatmap(pairs([("h1", "h2", "p0", 10.0), ("h1", "h2", "p1", 30.0), ("h2", "h1", "p0", 20.0),
                           ("h1", "h3", "p0", float("nan"))]), stat="p50")
    assert found["rows"] == found["cols"] == ["h1", "h2"]  # h3's only delay is not a number: left out
    assert found["cells"][0][0] is None
    assert found["cells"][0][1] == {"ns": 30.0, "paths": {"p0": 10.0, "p1": 30.0}}
    assert found["cells"][1][0]["ns"] == 20.0
    assert (found["lo_ns"], found["hi_ns"], found["paths"], found["block_size"]) == (20.0, 30.0, ["p0", "p1"], 1)
    one_path = heatmap(pairs([("h1", "h2", "p0", 10.0), ("h1", "h2", "p1", 30.0)], path="p0"), stat="p50")
    assert one_path["cells"][0][1] == {"ns": 10.0, "paths": {"p0": 10.0}}


def test_a_plane_is_the_worst_of_its_paths():
    rows = [("h1", "h2", "p0:9000", 10.0), ("h1", "h2", "p0:9001", 40.0), ("h1", "h2", "p1:9000", 90.0),
            ("h2", "h1", "p1:9001", 5.0)]
    found = heatmap(pairs(rows), stat="p50")
    assert found["planes"] == ["p0", "p1"] and found["cells"][0][1]["ns"] == 90.0
    plane0 = heatmap(pairs(rows, path="p0"), stat="p50")
    assert plane0["cells"][0][1] == {"ns": 40.0, "paths": {"p0:9000": 10.0, "p0:9001": 40.0}}
    assert plane0["cells"][1][0] is None  # h2 -> h1 has only a plane-1 path
    assert heatmap(pairs(rows, path="p1:9000"), stat="p50")["cells"][0][1]["ns"] == 90.0


def test_a_large_fleet_is_blocks_of_hosts_each_cell_its_worst_pair():
    hosts = [f"h{i}" for i in range(1, 2001)]
    rows = [(h, hosts[(i + k) % len(hosts)], "p0", float(i * 10 + k)) for i, h in enumerate(hosts) for k in (1, 2)]
    found = heatmap(pairs(rows), stat="p99")
    assert found["block_size"] == 32 and found["blocks"] == len(found["rows"]) == 63 <= MAX_GRID
    assert found["rows"][0] == "h1 .. h32" and found["rows"][1] == "h33 .. h64"  # h2 before h10
    first = found["cells"][0][0]  # h1..h32 to h1..h32: each host's next and next-but-one in the block
    assert (first["pairs"], first["src"], first["dst"], first["ns"]) == (31 + 30, "h31", "h32", 301.0)
    assert found["cells"][0][1]["pairs"] == 3 and found["cells"][0][5] is None
    inside = heatmap(pairs(rows), stat="p99", block=(0, 1))
    assert inside["rows"] == hosts[:32] and inside["cols"] == hosts[32:64]
    assert inside["cells"][31][0]["ns"] == 311.0 and inside["cells"][0][0] is None
    assert [p["ns"] for p in found["worst"]["items"][:2]] == [19992.0, 19991.0]
    later = heatmap(pairs(rows), stat="p99", offset=WORST_PAGE)
    assert later["worst"]["items"][0]["ns"] < found["worst"]["items"][-1]["ns"] and later["worst"]["total"] == 4000
    with pytest.raises(IndexError):
        heatmap(pairs(rows), stat="p99", block=(0, 63))


def test_a_fleet_read_worst_first_draws_what_every_path_read_draws_reading_a_pages_pairs_alone():
    hosts = [f"h{i}" for i in range(1, 2001)]
    rows = [(h, hosts[(i + k) % len(hosts)], f"p{k % 2}:{p}", float(i * 10 + k + p))
            for i, h in enumerate(hosts) for k in (1, 2, 3) for p in (0, 1)]
    for path in (None, "p1", "p0:1"):
        every = pairs(rows, path)
        asked: list[list] = []

        def paths_of(wanted, every=every, asked=asked):
            asked.append(wanted)
            return {pair: every.delays[pair] for pair in wanted if pair in every.delays}

        first = worst_first([(s, d, ns) for (s, d), ns in every.worst.items()], every.labels, path, paths_of)
        for page in ({}, {"block": (0, 1)}, {"block": (62, 62)}, {"offset": WORST_PAGE}):
            asked.clear()
            assert heatmap(first, stat="p50", **page) == heatmap(every, stat="p50", **page)
            shown = 32 * 32 if "block" in page else 0  # a block's host grid, at most
            assert sum(map(len, asked)) <= WORST_PAGE + shown  # the worst page's and the grid's pairs alone
    assert heatmap(worst_first([("a", "b", float("nan"))], [], None, lambda w: {}), stat="p50")["pairs"] == 0


def test_names_sort_as_people_count():
    assert sorted(["h10", "h2", "h1"], key=natural) == ["h1", "h2", "h10"]


def owd(name: str, ns: float, src: str, dst: str, path: str = "p0") -> dict:
    """One delay as the agents write it (agent/services/clock.py)."""
    return {"name": name, "value": ns, "labels": {"src": src, "dst": dst, "path": path}}


@pytest.fixture
def client(tmp_path):
    storage = SqliteStorage(tmp_path / "c.db")
    with series_path(tmp_path, token=TOKEN) as series:
        at = time.time_ns() - 5 * 10**9
        write(series, "b", [owd("owd_p50_ns", 3000.0, "b", "a")], at, wait=False)
        write(series, "a", [owd("owd_p50_ns", ns, "a", dst) for dst, ns in (("b", 1000.0), ("<b>", 2000.0))], at)
        with TestClient(create_app(Fleet(storage, hosts=["a", "b"], series=series), TOKEN, tick_s=3600)) as c:
            yield c
    storage.close()


def test_the_route_serves_the_heatmap_and_refuses_what_it_cannot_answer(client):
    assert client.get("/api/v1/dashboard/owd").status_code == 401
    found = client.get("/api/v1/dashboard/owd", headers=AUTH, params={"stat": "p50"}).json()
    assert found["rows"] == ["<b>", "a", "b"] and found["pairs"] == 3
    assert 0 <= found["age_s"] < 60 and 0 <= found["read_s"] < 60  # how old, and how long its reading took
    assert [p["ns"] for p in found["worst"]["items"]] == [3000.0, 2000.0, 1000.0]
    assert client.get("/api/v1/dashboard/owd", headers=AUTH, params={"stat": "p99"}).json()["pairs"] == 0
    assert client.get("/api/v1/dashboard/owd", headers=AUTH, params={"stat": "p42"}).status_code == 422
    assert client.get("/api/v1/dashboard/owd", headers=AUTH, params={"src_block": 0}).status_code == 422
    missing = client.get("/api/v1/dashboard/owd", headers=AUTH, params={"src_block": 0, "dst_block": 9})
    assert missing.status_code == 404 and "no block" in missing.json()["detail"]


def test_the_route_reads_a_fleet_past_the_grid_worst_first_and_a_pages_paths_alone(tmp_path):
    """70 hosts: the overview from each pair's worst as the engine works it out (of a plane, less
    the floors), a block's host grid and the worst page with each path's delay, as a fleet of a
    few hosts is drawn from every path."""
    hosts = [f"n{i}" for i in range(70)]
    rows = [(h, hosts[(i + 1) % 70], path, 1000.0 * i + k) for i, h in enumerate(hosts)
            for k, path in enumerate(("p0:1", "p0:2", "p1:1"))]
    now_ms = time.time_ns() // 1_000_000
    lines = [line(name, ns - (900.0 if name == "owd_floor_ns" else 0.0) * (path != "p0:2"), {"dst": d, "path": path},
                  now_ms - 1000, host=s) for name in ("owd_p50_ns", "owd_floor_ns") for s, d, path, ns in rows]
    storage = SqliteStorage(tmp_path / "c.db")
    with series_path(tmp_path, token=TOKEN) as series:
        httpx.post(series.url + "/api/v1/import/prometheus", content="\n".join(lines), timeout=10).raise_for_status()
        until(lambda: len(series.series.delays("owd_floor_ns")) == len(rows), series.url)
        read, real = [], series.series.delays
        series.series.delays = lambda name, **kw: read.append(len(kw.get("hosts") or hosts)) or real(name, **kw)
        with TestClient(create_app(Fleet(storage, hosts=hosts, series=series), TOKEN, tick_s=3600)) as c:
            def heat(**params) -> dict:
                found = c.get("/api/v1/dashboard/owd", headers=AUTH, params={"stat": "p50", **params})
                assert found.status_code == 200, found.text
                return found.json()

            overview = heat()
            assert (overview["hosts"], overview["pairs"], overview["block_size"]) == (70, 70, 2)
            assert overview["paths"] == ["p0:1", "p0:2", "p1:1"] and overview["planes"] == ["p0", "p1"]
            assert overview["cells"][0][0] == {"ns": 2.0, "pairs": 1, "src": "n0", "dst": "n1"}  # n0, n1
            assert overview["cells"][0][1] == {"ns": 1002.0, "pairs": 1, "src": "n1", "dst": "n2"}
            top = overview["worst"]["items"][0]
            assert (top["src"], top["dst"], top["ns"], top["paths"]) == ("n69", "n0", 69_002.0, {
                "p0:1": 69_000.0, "p0:2": 69_001.0, "p1:1": 69_002.0})
            inside = heat(src_block=0, dst_block=0)
            assert inside["rows"] == ["n0", "n1"] and inside["cells"][0][1] == {
                "ns": 2.0, "paths": {"p0:1": 0.0, "p0:2": 1.0, "p1:1": 2.0}}
            assert heat(path="p0")["worst"]["items"][0]["ns"] == 69_001.0
            over = heat(over_floor="true")  # p0:2 has a floor of its own delay: excess 0
            assert over["worst"]["items"][0]["ns"] == 900.0 and over["worst"]["items"][0]["paths"] == {
                "p0:1": 900.0, "p0:2": 0.0, "p1:1": 900.0}
            assert read and max(read) <= WORST_PAGE  # each path's delay of a page's pairs' hosts alone
    storage.close()


def test_events_since_a_time_are_those_stored_since_whatever_order_they_came_in(tmp_path):
    with SqliteStorage(tmp_path / "c.db") as storage:
        times = [50, 10, 40, 20, 30]  # stored out of time order, as late pushes arrive
        storage.add_events([Event("h", seq, "b", t, "link_down", "eth0") for seq, t in enumerate(times)])
        assert sorted(e.t_ns for e in storage.events(since_ns=25, limit=100)) == [30, 40, 50]
        assert [e.t_ns for e in storage.events(since_ns=25, limit=100)] == [50, 40, 30]  # in id order
        assert storage.events(since_ns=60) == []
        first = storage.events(since_ns=25, limit=1)
        assert [e.t_ns for e in storage.events(since_ns=25, after_id=first[0].id, limit=100)] == [40, 30]


def sample(src, dst, name, ns, t_ns, path="p0"):
    return Sample(src, t_ns, name, ns, {"src": src, "dst": dst, "path": path})


def test_over_a_window_each_series_is_reduced_by_its_statistic():
    pushes = [sample("a", "b", "owd_p50_ns", ns, t) for t, ns in enumerate((10.0, 50.0, 20.0, float("nan")))]
    pushes += [sample("a", "b", "owd_p99_ns", float(ns), t, "p1") for t, ns in enumerate(range(1, 201))]
    assert over_window(pushes[:4], "p50") == [("a", "b", "p0", 20.0)]  # the median of 10, 50, 20; the NaN left out
    (_src, _dst, _path, p99), = over_window(pushes[4:], "p99")
    assert p99 == 198.0  # nearest rank: the 198th of 200
    assert over_window(pushes[:3], "min")[0][3] == over_window(pushes[:3], "floor")[0][3] == 10.0


def test_excess_is_each_delay_less_its_own_series_floor():
    rows = [("a", "b", "p0", 50.0), ("a", "b", "p1", 70.0), ("b", "a", "p0", 40.0)]
    floors = [("a", "b", "p0", 10.0), ("a", "b", "p1", 60.0), ("b", "a", "p0", float("nan"))]
    assert [(path, v) for _s, _d, path, v in excess(rows, floors)] == [("p0", 40.0), ("p1", 10.0)]
    found = heatmap(pairs(excess(rows, floors)), stat="p50")
    assert found["cells"][0][1] == {"ns": 40.0, "paths": {"p0": 40.0, "p1": 10.0}}  # the worst excess, not delay


@pytest.fixture
def windowed(tmp_path):
    now = time.time_ns() // 10**9 * 10**9
    storage = SqliteStorage(tmp_path / "c.db")
    with series_path(tmp_path, token=TOKEN) as series:
        for age, ns in ((120, 9000.0), (20, 1000.0), (10, 3000.0)):
            write(series, "a", [owd("owd_p50_ns", ns, "a", "b")], now - age * 10**9, wait=False)
        write(series, "a", [owd("owd_p50_ns", 2000.0, "a", "b"), owd("owd_floor_ns", 500.0, "a", "b")],
              now - 5 * 10**9)
        with TestClient(create_app(Fleet(storage, hosts=["a", "b"], clock=lambda: now, series=series), TOKEN,
                                   tick_s=3600)) as c:
            yield c
    storage.close()


def test_the_route_takes_a_window_and_the_excess_over_floor(windowed):
    def cell(**params):
        found = windowed.get("/api/v1/dashboard/owd", headers=AUTH, params={"stat": "p50", **params})
        assert found.status_code == 200, found.text
        return found.json()["cells"][0][1]["ns"], found.json()["window"], found.json()["over_floor"]

    assert cell() == (2000.0, "latest", False)  # the newest push
    assert cell(window="1m")[0] == 2000.0  # the median of 1000, 3000, 2000: the one 2 minutes old left out
    assert cell(window="5m")[0] == 2500.0  # with it: the median of four
    assert cell(over_floor="true") == (1500.0, "latest", True)
    assert cell(window="1m", over_floor="true")[0] == 1500.0
    for bad in ({"window": "2h"}, {"window": "soon"}, {"stat": "floor", "over_floor": "true"}):
        refused = windowed.get("/api/v1/dashboard/owd", headers=AUTH, params=bad)
        assert refused.status_code == 422 and ("window" in refused.text or "over_floor" in refused.text)


def seen(served):
    """What a caller is served, and its age."""
    return served.value, served.age_s


def test_a_heatmap_is_worked_out_at_most_once_a_second_per_question():
    now = [0.0]
    fresh: Fresh[int] = Fresh(max_age_s=1.0, clock=lambda: now[0])
    calls = []

    def work(answer):
        calls.append(answer)
        return answer

    assert seen(fresh.get("p50", lambda: work(1))) == (1, 0.0)
    now[0] = 0.9
    assert seen(fresh.get("p50", lambda: work(2))) == (1, 0.9)  # with its age
    assert seen(fresh.get("p99", lambda: work(3))) == (3, 0.0)  # another question
    now[0] = 1.0
    assert seen(fresh.get("p50", lambda: work(4))) == (4, 0.0)  # a second old: worked out again
    assert calls == [1, 3, 4]
    for key in range(MAX_KEYS + 10):
        fresh.get(key, lambda: 0)
    assert len(fresh._kept) == MAX_KEYS


def settled(fresh: Fresh) -> None:
    deadline = time.monotonic() + 5
    while fresh._running:
        assert time.monotonic() < deadline, "a working-out never ended"
        time.sleep(0.01)


def test_a_slow_reading_is_served_while_the_next_is_read_and_spaced_by_its_length():
    now = [0.0]
    fresh: Fresh[int] = Fresh(max_age_s=1.0, wait_s=2.0, clock=lambda: now[0])
    began = []

    def taking_5s(answer, release=None):
        def work():
            began.append(answer)
            if release is not None:
                assert release.wait(5)
            now[0] += 5.0
            return answer
        return work

    assert seen(fresh.get("p50", taking_5s(1))) == (1, 5.0)  # nothing to serve yet: waited for
    now[0] = 19.9  # past max_age_s, but within 4 times the 5 s it took (SHARE)
    assert seen(fresh.get("p50", taking_5s(2))) == (1, 19.9) and began == [1]
    now[0] = 20.0
    release = threading.Event()
    assert seen(fresh.get("p50", taking_5s(3, release))) == (1, 20.0)  # served at once: a slow reading
    assert seen(fresh.get("p50", taking_5s(4))) == (1, 20.0)  # and one reading at a time
    release.set()
    settled(fresh)
    assert seen(fresh.get("p50", taking_5s(5))) == (3, 5.0) and began == [1, 3]
    assert fresh.get("p50", taking_5s(6)).took_s == 5.0


def test_a_reading_of_a_quarter_of_max_age_is_waited_for_and_a_longer_one_is_served():
    now = [0.0]
    fresh: Fresh[int] = Fresh(max_age_s=1.0, wait_s=2.0, clock=lambda: now[0])

    def taking(seconds, answer):
        def work():
            now[0] += seconds
            return answer
        return work

    assert seen(fresh.get("a", taking(0.25, 1))) == (1, 0.25)
    now[0] = 1.25
    assert seen(fresh.get("a", taking(0.5, 2))) == (2, 0.5)  # the last took 0.25 s: waited for
    now[0] = 3.0
    assert seen(fresh.get("a", taking(0.5, 3))) == (2, 1.75)  # the next not yet due: 4 x 0.5 s after the last began
    now[0] = 3.25
    assert seen(fresh.get("a", taking(0.5, 4))) == (2, 2.0)  # the last took 0.5 s: served, the next behind it
    settled(fresh)
    assert seen(fresh.get("a", taking(0.5, 5))) == (4, 0.5)


def test_a_first_reading_past_the_wait_is_pending_and_goes_on():
    fresh: Fresh[int] = Fresh(max_age_s=1.0, wait_s=0.05)
    release = threading.Event()

    def slow():
        assert release.wait(5)
        return 7

    with pytest.raises(Pending, match="ask again"):
        fresh.get("p50", slow)
    release.set()
    settled(fresh)
    assert fresh.get("p50", lambda: 8).value == 7  # the reading went on; the next is not yet due


def test_a_failed_reading_reaches_whoever_waited_and_leaves_the_last_one_served():
    now = [0.0]
    fresh: Fresh[int] = Fresh(max_age_s=1.0, wait_s=2.0, clock=lambda: now[0])

    def broken():
        raise SeriesError("the series engine cannot be reached")

    with pytest.raises(SeriesError):
        fresh.get("p50", broken)  # nothing kept: the error, and tried again on the next ask
    with pytest.raises(SeriesError):
        fresh.get("p50", broken)

    def slow():
        now[0] += 5.0
        return 1

    assert seen(fresh.get("p50", slow)) == (1, 5.0)
    now[0] = 25.0
    assert seen(fresh.get("p50", broken)) == (1, 25.0)  # a slow one's failed successor: the last one, served
    settled(fresh)
    assert seen(fresh.get("p50", lambda: 2)) == (1, 25.0)  # not tried again until spaced as before


def test_a_heatmap_page_is_drawn_once_a_reading_however_often_it_is_asked():
    drawn, draws = Drawn(), []

    def draw(text):
        return lambda: draws.append(text) or text

    reading = object()
    assert drawn.get("p50", reading, (None, 0), draw("a")) == "a"
    assert drawn.get("p50", reading, (None, 0), draw("b")) == "a"  # the same page of the same reading
    assert drawn.get("p50", reading, (None, 50), draw("c")) == "c"  # the next page of the worst pairs
    assert drawn.get("p99", reading, (None, 0), draw("d")) == "d"  # another question
    newer = object()
    assert drawn.get("p50", newer, (None, 0), draw("e")) == "e"  # a new reading: drawn again
    assert draws == ["a", "c", "d", "e"]
    for page in range(MAX_KEYS + 5):
        drawn.get("p50", newer, page, draw(str(page)))
    assert drawn.get("p50", newer, MAX_KEYS + 4, draw("x")) == str(MAX_KEYS + 4)
    assert drawn.get("p50", newer, 0, draw("y")) == "y"  # the oldest drawings went: MAX_KEYS are kept


def test_the_route_serves_one_drawing_a_reading_with_each_ask_s_age(client):
    def ask():
        return client.get("/api/v1/dashboard/owd", headers=AUTH, params={"stat": "p50"}).json()

    first, again = ask(), ask()
    assert first["age_s"] <= again["age_s"] and first["read_s"] == again["read_s"]
    assert {k: v for k, v in first.items() if k != "age_s"} == {k: v for k, v in again.items() if k != "age_s"}
    assert first["window"] == "latest" and first["over_floor"] is False and first["pairs"] == 3


def test_the_route_shows_a_push_within_two_seconds(client):
    def worst():
        return client.get("/api/v1/dashboard/owd", headers=AUTH, params={"stat": "p50"}).json()["hi_ns"]

    assert worst() == 3000.0
    write_pushed(client, "b", [owd("owd_p50_ns", 9000.0, "b", "a")], wait=False)
    # the engine makes a known series' new sample searchable within about a second, then the
    # heatmap's own cache holds it at most HEATMAP_MAX_AGE_S
    deadline = time.monotonic() + HEATMAP_MAX_AGE_S + 2.0
    while worst() != 9000.0:
        assert time.monotonic() < deadline, "the push is not in the heatmap two seconds later"
        time.sleep(0.05)


def test_a_pairs_series_has_a_line_per_direction_and_path_on_one_axis():
    s = 10**9
    pushes = [sample("a", "b", "owd_p50_ns", 100.0, 10 * s), sample("a", "b", "owd_p50_ns", 110.0, 10 * s + 5),
              sample("a", "b", "owd_p50_ns", 120.0, 12 * s, "p1"), sample("b", "a", "owd_p50_ns", 90.0, 11 * s),
              sample("a", "c", "owd_p50_ns", 999.0, 11 * s), sample("a", "b", "owd_p50_ns", 1.0, 1 * s)]
    found = pair_series(pushes, "a", "b", since_ns=5 * s, now_ns=20 * s)
    assert found["t_ns"] == [10 * s, 11 * s, 12 * s]  # a to c is another pair's; the one at 1 s is before the window
    lines = {(line["from"], line["to"], line["path"]): line["ns"] for line in found["lines"]}
    assert lines == {("a", "b", "p0"): [110.0, None, None], ("a", "b", "p1"): [None, None, 120.0],
                     ("b", "a", "p0"): [None, 90.0, None]}  # the newest push of a second


def test_the_pair_route_reads_both_ends_pushes_over_the_window(windowed):
    found = windowed.get("/api/v1/dashboard/owd-pair", headers=AUTH, params={"src": "b", "dst": "a", "since": "1m"})
    assert found.status_code == 200, found.text
    assert [line["ns"] for line in found.json()["lines"]] == [[1000.0, 3000.0, 2000.0]]  # a's pushes, in the minute
    assert windowed.get("/api/v1/dashboard/owd-pair", headers=AUTH, params={"src": "a"}).status_code == 422
    assert windowed.get("/api/v1/dashboard/owd-pair", params={"src": "a", "dst": "b"}).status_code == 401
