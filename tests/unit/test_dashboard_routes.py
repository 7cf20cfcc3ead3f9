"""The dashboard's routes on the controller (FastAPI's test client, real SQLite storage): the
page, the fleet and viewer tokens, the fabric map's link states and the flows that cross a link,
and the live stream's changes."""

from __future__ import annotations

import asyncio
import contextlib
import json
import socket
import threading
import time

import httpx
import pytest
from fastapi.testclient import TestClient

from clockfabric.controller.app import create_app
from clockfabric.controller.dashboard.auth import Tickets
from clockfabric.controller.dashboard.changes import Changes, stream
from clockfabric.controller.dashboard.routes import allow_viewer
from clockfabric.controller.fleet import Fleet
from clockfabric.controller.monitor import Monitor
from clockfabric.controller.server import Listen, server, start_in_thread
from clockfabric.controller.storage.sqlite import SqliteStorage
from clockfabric.errors import ClockfabricError
from clockfabric.topology import leafspine
from tests.series import series_path, write_pushed
from tests.unit.credentials import as_host

TOKEN, VIEWER = "f" * 32, "v" * 32
FLEET_AUTH, VIEWER_AUTH = {"Authorization": f"Bearer {TOKEN}"}, {"Authorization": f"Bearer {VIEWER}"}


@pytest.fixture
def fleet(tmp_path):
    topo = leafspine(4, 2, 2)
    storage = SqliteStorage(tmp_path / "c.db")
    monitor = Monitor.create(storage, topology=topo)
    with series_path(tmp_path, token=TOKEN) as series:
        yield Fleet(storage, hosts=sorted(topo.hosts) + sorted(topo.switches), monitor=monitor, series=series)
    storage.close()


@pytest.fixture
def client(fleet):
    app = create_app(fleet, TOKEN, tick_s=3600)
    allow_viewer(app, VIEWER)
    with TestClient(app) as c:
        yield c


def push(client, host, samples=(), events=(), auth=None, t_ns=None):
    """As an agent does: its events to the controller, its samples through the series gate (at
    `t_ns`, now if None)."""
    r = client.post("/api/v1/push", headers=auth or as_host(TOKEN, host),
                    json={"host": host, "boot": "b", "events": list(events)})
    if r.status_code == 200:
        write_pushed(client, host, samples, t_ns)
    return r


def link_up(device, up):
    return {"name": "link_up", "value": float(up), "labels": {"device": device}}


def test_the_page_and_its_files_load_without_a_token_but_hold_no_data(client):
    assert client.get("/", follow_redirects=False).headers["location"] == "/dashboard/"
    page = client.get("/dashboard/")
    assert page.status_code == 200 and '<script type="module" src="/dashboard/static/js/main.js">' in page.text
    for path in ("js/main.js", "js/api.js", "js/fabric.js", "js/chart.js", "dashboard.css", "vendor/uplot/uPlot.esm.js",
                 "vendor/uplot/uPlot.min.css"):
        served = client.get(f"/dashboard/static/{path}")
        assert served.status_code == 200, path
        kind = "text/javascript" if path.endswith(".js") else "text/css"
        assert served.headers["content-type"].startswith(kind), path
    assert client.get("/dashboard/static/nothing.js").status_code == 404


@pytest.mark.parametrize("path", ["/api/v1/fabric", "/api/v1/hosts", "/api/v1/events", "/api/v1/stream"])
def test_data_needs_the_fleet_or_the_viewer_token(client, path):
    assert client.get(path).status_code == 401
    assert client.get(path, headers={"Authorization": "Bearer " + "x" * 32}).status_code == 401
    if path != "/api/v1/stream":  # the stream never ends: its accepted case is tested below
        assert client.get(path, headers=FLEET_AUTH).status_code == 200
        assert client.get(path, headers=VIEWER_AUTH).status_code == 200


def test_the_viewer_token_reads_but_cannot_write(client):
    r = push(client, "h1", auth=VIEWER_AUTH)
    assert r.status_code == 403 and "read-only" in r.json()["detail"]
    assert client.post("/api/v1/audits", headers=VIEWER_AUTH, json={}).status_code == 403
    assert push(client, "h1").status_code == 200
    assert client.get("/api/v1/hosts", headers=VIEWER_AUTH).json()["items"]


def test_without_a_viewer_token_only_the_fleet_token_reads(fleet):
    with TestClient(create_app(fleet, TOKEN, tick_s=3600)) as c:
        assert c.get("/api/v1/hosts", headers=VIEWER_AUTH).status_code == 401


def test_a_viewer_token_equal_to_the_fleet_token_is_refused(fleet):
    with pytest.raises(ClockfabricError, match="differ"):
        allow_viewer(create_app(fleet, TOKEN), TOKEN)


def test_the_fabric_gives_each_link_its_state_from_both_ends(client):
    fabric = client.get("/api/v1/fabric", headers=FLEET_AUTH).json()
    states = {lk["name"]: lk["state"] for lk in fabric["links"]}
    assert set(states.values()) == {"unknown"}  # nobody has pushed yet
    assert {n["role"] for n in fabric["nodes"]} == {"host", "leaf", "spine"}
    spine_link = next(lk for lk in fabric["links"] if "spine0" in lk["name"] and "leaf0" in lk["name"])
    leaf_end = next(e for e in (spine_link["a"], spine_link["b"]) if e.startswith("leaf0:"))
    push(client, "leaf0", samples=[link_up(leaf_end.split(":")[1], True)])
    assert _state(client, spine_link["name"]) == "up"
    push(client, "leaf0", samples=[link_up(leaf_end.split(":")[1], False)])
    assert _state(client, spine_link["name"]) == "down"
    flaps = [{"seq": i + 1, "kind": "link_down" if i % 2 == 0 else "link_up",
              "device": leaf_end.split(":")[1]} for i in range(4)]
    push(client, "leaf0", samples=[link_up(leaf_end.split(":")[1], True)],
         events=[{**e, "t_ns": time.time_ns()} for e in flaps])
    assert _state(client, spine_link["name"]) == "flapping"


def test_a_link_event_newer_than_the_last_sample_decides_the_state_at_once(client):
    """The engine shows a sample a second or two after it is written; the push's link event is
    stored at once, and the map turns red by it. A sample written after the event decides again."""
    spine_link = next(lk for lk in client.get("/api/v1/fabric", headers=FLEET_AUTH).json()["links"]
                      if "spine0" in lk["name"] and "leaf0" in lk["name"])
    device = next(e for e in (spine_link["a"], spine_link["b"]) if e.startswith("leaf0:")).split(":")[1]
    t0 = time.time_ns()
    push(client, "leaf0", samples=[link_up(device, True)], t_ns=t0)
    assert _state(client, spine_link["name"]) == "up"
    down = {"seq": 1, "kind": "link_down", "device": device, "t_ns": t0 + 10**9}
    push(client, "leaf0", events=[down])  # its sample not yet seen
    assert _state(client, spine_link["name"]) == "down"
    push(client, "leaf0", samples=[link_up(device, True)], t_ns=t0 + 2 * 10**9)  # back up, no event seen
    assert _state(client, spine_link["name"]) == "up"
    stale = {"seq": 2, "kind": "link_down", "device": device, "t_ns": t0 + 15 * 10**8}
    push(client, "leaf0", events=[stale])  # older than the sample: the sample stands
    assert _state(client, spine_link["name"]) == "up"


def _state(client, name):
    return next(lk["state"] for lk in client.get("/api/v1/fabric", headers=FLEET_AUTH).json()["links"]
                if lk["name"] == name)


def test_the_fabric_is_404_without_a_topology(tmp_path):
    storage = SqliteStorage(tmp_path / "c.db")
    with TestClient(create_app(Fleet(storage, hosts=[]), TOKEN, tick_s=3600)) as c:
        r = c.get("/api/v1/fabric", headers=FLEET_AUTH)
    storage.close()
    assert r.status_code == 404 and "--topology" in r.json()["detail"]


def test_changes_bump_only_the_topics_that_moved(fleet):
    changes = Changes(fleet, every_s=0)
    first = changes.poll()
    assert changes.poll() == first
    fleet.push("h1", "b", {}, [{"seq": 1, "t_ns": fleet.clock(), "kind": "link_down", "device": "eth0"}], 0)
    after_push = changes.poll()
    assert after_push["hosts"] == first["hosts"] + 1 and after_push["events"] == first["events"] + 1
    assert after_push["alerts"] == first["alerts"] and after_push["audits"] == first["audits"]
    fleet.tick()  # the link_down detector opens an alert
    assert changes.poll()["alerts"] == first["alerts"] + 1


def test_the_stream_says_hello_then_only_what_changed():
    versions = iter([{"hosts": 0, "events": 0, "alerts": 0, "audits": 0}] * 3
                    + [{"hosts": 0, "events": 1, "alerts": 0, "audits": 0}])

    async def poll():
        return next(versions)

    async def disconnected():
        return False

    async def first_messages(n):
        out = []
        async for m in stream(poll, disconnected, every_s=0):
            out.append(m)
            if len(out) == n:
                return out

    hello, change = asyncio.run(first_messages(2))
    assert hello.startswith("retry: 1000\nevent: hello\n")
    assert change.startswith("event: change\n")
    assert json.loads(change.split("data: ")[1])["topics"] == ["events"]


def test_a_real_server_streams_a_push_to_a_viewer_holding_a_ticket_not_the_token(fleet):
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    srv = server(fleet, TOKEN, Listen("127.0.0.1", port), VIEWER)
    thread = start_in_thread(srv)
    try:
        url = f"http://127.0.0.1:{port}"
        ticket = httpx.get(f"{url}/api/v1/stream/ticket", headers={"Authorization": f"Bearer {VIEWER}"}).json()["ticket"]
        with httpx.stream("GET", f"{url}/api/v1/stream", params={"ticket": ticket}, timeout=5) as r:
            assert r.status_code == 200 and r.headers["content-type"].startswith("text/event-stream")
            lines = r.iter_lines()
            assert "event: hello" in [next(lines) for _ in range(2)]
            threading.Timer(0.3, lambda: httpx.post(f"{url}/api/v1/push", headers=as_host(TOKEN, "h2"),
                                                    json={"host": "h2", "boot": "b"})).start()
            next(line for line in lines if line == "event: change")
            assert json.loads(next(lines)[len("data: "):])["topics"] == ["hosts"]  # h2 pushed, nothing else
        assert httpx.get(f"{url}/api/v1/stream", params={"ticket": ticket}).status_code == 401  # spent
        assert httpx.get(f"{url}/api/v1/stream", params={"token": VIEWER}).status_code == 401  # never a token
        assert httpx.get(f"{url}/api/v1/stream/ticket", params={"token": VIEWER}).status_code == 401
    finally:
        srv.should_exit = True
        thread.join(10)


def test_a_ticket_is_spent_once_and_expires():
    now = [0.0]
    tickets = Tickets(clock=lambda: now[0])
    a, b = tickets.issue(), tickets.issue()
    assert a != b and len(a) >= 32
    assert tickets.redeem(a) and not tickets.redeem(a)
    now[0] = Tickets.TTL_S + 0.1
    assert not tickets.redeem(b) and not tickets.redeem("made-up")


def test_an_open_stream_does_not_hold_the_server_at_exit(fleet):
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    srv = server(fleet, TOKEN, Listen("127.0.0.1", port))
    thread = start_in_thread(srv)
    opened = threading.Event()

    def watch() -> None:
        with contextlib.suppress(httpx.HTTPError), httpx.stream(
                "GET", f"http://127.0.0.1:{port}/api/v1/stream", headers=FLEET_AUTH, timeout=30) as r:
            opened.set()
            for _ in r.iter_lines():
                pass

    threading.Thread(target=watch, daemon=True).start()
    assert opened.wait(5)
    t0 = time.monotonic()
    srv.should_exit = True
    thread.join(10)
    assert not thread.is_alive() and time.monotonic() - t0 < 6


def push_two_flows(client) -> None:
    """Job A's flow from h0 to h2, traced through spine1, at 500 Mbit/s; a flow of no job from h1 to
    h3, untraced, at 900 Mbit/s."""
    traced, untraced = "10.64.0.0->10.64.0.4", "10.0.0.2->10.0.0.4"
    now = time.time_ns()
    push(client, "h0", samples=[
        {"name": "job_flow_tx_bps", "value": 5e8, "labels": {"jobid": "A", "flow": traced}, "t_ns": now},
        {"name": "job_flow_path", "value": 1.0, "labels": {"jobid": "A", "flow": traced, "via": "spine1"},
         "t_ns": now}])
    push(client, "h1", samples=[{"name": "other_flow_tx_bps", "value": 9e8, "labels": {"flow": untraced},
                                 "t_ns": now}])


def test_a_links_flows_are_those_that_cross_it_then_those_that_may(client):
    push_two_flows(client)

    def flows(link):
        found = client.get("/api/v1/dashboard/link-flows", headers=VIEWER_AUTH, params={"link": link})
        assert found.status_code == 200, found.text
        return [(f["host"], f["jobid"], f["certain"], f["tx_bps"]) for f in found.json()["items"]]

    assert flows("leaf0:swp4--spine1:swp1") == [("h0", "A", True, 5e8), ("h1", None, False, 9e8)]
    assert flows("leaf0:swp3--spine0:swp1") == [("h1", None, False, 9e8)]  # h0's was traced through spine1
    missing = client.get("/api/v1/dashboard/link-flows", headers=FLEET_AUTH, params={"link": "<no-such>"})
    assert missing.status_code == 404 and "<no-such>" in missing.json()["detail"]
    assert client.get("/api/v1/dashboard/link-flows", params={"link": "x"}).status_code == 401


def test_a_links_load_is_the_flows_that_surely_cross_it(client):
    push_two_flows(client)
    links = client.get("/api/v1/dashboard/link-load", headers=VIEWER_AUTH).json()["links"]
    assert links["leaf0:swp4--spine1:swp1"]["bps"] == 5e8  # h0's, traced there; h1's only may cross it
    assert "leaf0:swp3--spine0:swp1" not in links
    assert links["h1:eth0--leaf0:swp2"]["bps"] == 9e8  # every path of h1's shares its own link
    rate = next(lk["rate_bps"] for lk in client.get("/api/v1/fabric", headers=FLEET_AUTH).json()["links"]
                if lk["name"] == "h1:eth0--leaf0:swp2")
    assert links["h1:eth0--leaf0:swp2"]["share"] == pytest.approx(9e8 / rate)


def push_mesh(client, fleet, queued_at_ns: int) -> None:
    """Every path through spine0 from leaf0 to leaf1 queues 2 ms over its floor (its newest delay
    at `queued_at_ns`); the same pairs through spine1, and each leaf's own pairs, sit at theirs."""
    now = time.time_ns()
    rows = {"h0": [("h2", "p0", 0, "spine0"), ("h2", "p1", 0, "spine1"), ("h1", "p0", 0, None)],
            "h1": [("h3", "p0", 0, "spine0"), ("h3", "p1", 0, "spine1")], "h2": [("h3", "p0", 0, None)]}
    for src, paths in rows.items():
        fleet.monitor.observe_paths(src, paths, now)
        samples = []
        for dst, label, _, via in paths:
            queued, key = via == "spine0", {"src": src, "dst": dst, "path": label}
            samples += [{"name": "owd_floor_ns", "value": 20_000.0, "labels": key, "t_ns": now},
                        {"name": "owd_p50_ns", "value": 2_020_000.0 if queued else 21_000.0, "labels": key,
                         "t_ns": queued_at_ns if queued else now}]
        push(client, src, samples=samples)


def test_the_queueing_the_mesh_locates_is_named_on_its_links_and_both_where_no_path_parts_them(client, fleet):
    push_mesh(client, fleet, queued_at_ns=time.time_ns())
    found = client.get("/api/v1/dashboard/link-queueing", headers=VIEWER_AUTH).json()
    assert (found["strength"], found["queued"]) == ("weak", 2), found  # weak: the mesh joins 4 of 12 pairs
    assert [lack for lack in found["lacks"] if lack.startswith("the probe mesh misses 8 of 12 host pairs")]
    # every path through spine0 crosses leaf0's uplink and spine0's downlink alike: both, never one
    up, down = "leaf0:swp3--spine0:swp1", "leaf1:swp3--spine0:swp2"
    assert set(found["links"]) == {up, down}, found["links"]
    assert found["links"][up]["direction"] == "leaf0->spine0" and found["links"][down]["direction"] == "spine0->leaf1"
    assert all(lk["ambiguous"] and lk["queued_paths"] == 2 for lk in found["links"].values())
    assert found["links"][up]["with"] == [down] and found["links"][up]["excess_us"] == pytest.approx(2000, rel=0.01)
    assert client.get("/api/v1/dashboard/link-queueing").status_code == 401


def test_a_queue_whose_newest_delay_has_left_the_window_locates_nothing(client, fleet):
    push_mesh(client, fleet, queued_at_ns=time.time_ns() - 60 * 10**9)
    found = client.get("/api/v1/dashboard/link-queueing", headers=FLEET_AUTH).json()
    assert (found["strength"], found["links"], found["queued"]) == ("healthy", {}, 0), found
