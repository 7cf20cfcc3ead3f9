"""The controller takes only bounded, valid input, stores a push whole or not at all, and lists
whatever its database holds: on the real app (FastAPI's test client, and uvicorn on loopback for
what only a socket shows), with SQLite."""

from __future__ import annotations

import gc
import socket
import sqlite3

import pytest

from clockfabric.auth.credential import host_token
from clockfabric.controller.app import MAX_PUSH_BYTES
from clockfabric.controller.fleet import Fleet
from clockfabric.controller.server import GC_YOUNG, Listen, server, start_in_thread
from clockfabric.controller.storage.base import Event, StorageError
from clockfabric.controller.storage.sqlite import SqliteStorage
from tests.unit.credentials import as_host
from tests.unit.test_controller_app import AUTH, TOKEN, env, push  # noqa: F401 - env is a fixture

T0 = 1_800_000_000 * 10**9


def raw_push(client, text: str):
    return client.post("/api/v1/push", headers=as_host(TOKEN, "h1", **{"Content-Type": "application/json"}),
                       content=text.encode())


def event_json(detail: str = "{}", t_ns: str = str(T0), kind: str = '"note"') -> str:
    """A push of one event; its kind has no declared detail, so only the bounds judge the detail."""
    event = f'{{"seq": 1, "t_ns": {t_ns}, "kind": {kind}, "detail": {detail}}}'
    return f'{{"host": "h1", "boot": "b1", "events": [{event}]}}'


def refused(r, *place) -> str:
    """The reason of a 422 whose first error is at `place` under the body."""
    assert r.status_code == 422, r.text
    error = r.json()["detail"][0]
    assert error["loc"][: len(place) + 1] == ["body", *place], error
    return error["msg"]


@pytest.mark.parametrize("value", ["NaN", "Infinity", "-Infinity", "1e999"])
def test_non_finite_numbers_are_refused(env, value):  # noqa: F811
    client, *_ = env
    text = f'{{"host": "h1", "boot": "b1", "samples": [{{"name": "x", "value": {value}}}]}}'
    assert "finite" in refused(raw_push(client, text), "samples", 0, "value")
    assert "finite" in refused(raw_push(client, event_json(f'{{"v": {value}}}')), "events", 0, "detail", "v")
    assert client.get("/api/v1/events", headers=AUTH).json()["items"] == []


def test_integers_past_64_bits_are_refused(env):  # noqa: F811
    client, *_ = env
    assert "64 bits" in refused(raw_push(client, event_json(t_ns=str(2**63))), "events", 0, "t_ns")
    assert "64 bits" in refused(raw_push(client, event_json(f'{{"n": {-(2**63) - 1}}}')), "events", 0, "detail", "n")
    assert raw_push(client, event_json(f'{{"n": {2**63 - 1}}}')).status_code == 200  # the edge itself fits


def test_lone_surrogates_are_refused(env):  # noqa: F811
    client, *_ = env
    assert "surrogate" in refused(raw_push(client, event_json(kind='"\\ud800"')), "events", 0, "kind")
    assert "surrogate" in refused(raw_push(client, event_json('{"\\udfff": 1}')), "events", 0, "detail")
    assert raw_push(client, event_json('{"ok": "\\ud83d\\ude00"}')).status_code == 200  # a pair is a character


@pytest.mark.parametrize("depth", [40, 900, 5_000])
def test_deep_nesting_is_refused(env, depth):  # noqa: F811
    client, *_ = env
    assert "deeper" in refused(raw_push(client, event_json("[" * depth + "]" * depth)))
    assert client.get("/api/v1/events", headers=AUTH).json()["items"] == []


def test_long_strings_and_lists_are_refused(env):  # noqa: F811
    client, *_ = env
    assert "characters" in refused(raw_push(client, event_json(f'{{"s": "{"x" * 70_000}"}}')),
                                   "events", 0, "detail", "s")
    assert "entries" in refused(raw_push(client, event_json(f'{{"l": [{",".join(["0"] * 50_001)}]}}')),
                                "events", 0, "detail", "l")


def test_a_push_is_stored_whole_or_not_at_all(env, monkeypatch):  # noqa: F811
    client, fleet, clock, _ = env

    def fail(*_args):
        raise StorageError("disk full")

    monkeypatch.setattr(fleet.storage, "_seen", fail)  # after the events went in
    r = push(client, events=[{"seq": 1, "t_ns": clock.now, "kind": "link_down"}])
    assert r.status_code == 503
    assert client.get("/api/v1/events", headers=AUTH).json()["items"] == []
    assert fleet.storage.host("h1").last_seen_ns is None
    monkeypatch.undo()
    assert push(client, events=[{"seq": 1, "t_ns": clock.now, "kind": "link_down"}]).json()["events_new"] == 1


def test_rows_stored_before_the_bounds_still_list(env, tmp_path):  # noqa: F811
    client, fleet, clock, _ = env
    deep: object = {}
    for _ in range(900):
        deep = {"d": deep}
    fleet.storage.add_events([Event("h1", 1, "b1", clock.now, "link_down", detail={"deep": deep})])
    with sqlite3.connect(tmp_path / "c.db") as db:  # a detail that is not JSON at all
        db.execute("INSERT INTO events (host, seq, boot, t_ns, kind, device, detail, synced) "
                   "VALUES ('h1', 2, 'b1', 1, 'x', '', '{broken', 1)")
    events = client.get("/api/v1/events", headers=AUTH)
    assert events.status_code == 200
    first, second = events.json()["items"]
    assert "not shown" in str(first["detail"]) and "unreadable" in second["detail"]


# ---- on a real socket: what the test client cannot show ------------------------------------------
@pytest.fixture
def live(tmp_path):
    storage = SqliteStorage(tmp_path / "c.db")
    srv = server(Fleet(storage, hosts=["h1"]), TOKEN, Listen(port=0))
    thread = start_in_thread(srv)
    port = srv.servers[0].sockets[0].getsockname()[1]
    yield port
    srv.should_exit = True
    thread.join(5)
    storage.close()


def send_headers(port: int, extra: str) -> socket.socket:
    sock = socket.create_connection(("127.0.0.1", port), timeout=5)
    sock.sendall(f"POST /api/v1/push HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {host_token(TOKEN, 'h1')}\r\n"
                 f"Content-Type: application/json\r\n{extra}\r\n".encode())
    return sock


def status_of(sock: socket.socket) -> int:
    return int(sock.recv(4096).split(b" ", 2)[1])


def test_413_by_content_length_before_any_body_is_sent(live):
    with send_headers(live, f"Content-Length: {100 * 2**20}\r\n") as sock:
        assert status_of(sock) == 413  # an answer, with not one byte of the body sent


def test_413_for_a_chunked_body_once_past_the_cap(live):
    with send_headers(live, "Transfer-Encoding: chunked\r\n") as sock:
        chunk = b"x" * 2**16
        for _ in range(MAX_PUSH_BYTES // len(chunk) + 2):
            sock.sendall(b"%x\r\n%s\r\n" % (len(chunk), chunk))
        assert status_of(sock) == 413  # the body never ended: it was refused while streaming


def test_the_controllers_process_collects_cycles_after_many_allocations_not_700(tmp_path):
    """A route's parse of an engine answer is tens of thousands of dicts: the collector must not
    run dozens of times in one and scan the whole heap every few routes."""
    before = gc.get_threshold()
    storage = SqliteStorage(tmp_path / "c.db")
    try:
        server(Fleet(storage, hosts=["h1"]), TOKEN, Listen(port=0))
        assert gc.get_threshold() == (GC_YOUNG, *before[1:]) and GC_YOUNG >= 10_000
    finally:
        gc.set_threshold(*before)
        storage.close()
