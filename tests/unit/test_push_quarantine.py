"""An event the controller refuses never wedges an agent's stream: it is quarantined (counted,
logged once, dropped) and the events after it go on; what the controller cannot take for now is
sent again, no sooner than its Retry-After. The real Pusher against the real controller on
loopback, and against a scripted one for the answers a healthy controller does not give."""

from __future__ import annotations

import json
import logging
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from clockfabric.agent.metrics import clock_metrics
from clockfabric.agent.push import PUSH_TIMEOUT_S, Pusher
from clockfabric.auth.credential import host_token
from clockfabric.controller.fleet import Fleet
from clockfabric.controller.server import Listen, server, start_in_thread
from clockfabric.controller.storage.sqlite import BUSY_TIMEOUT_S, SqliteStorage

TOKEN = "t" * 32
T0 = 1_800_000_000 * 10**9


@pytest.fixture
def controller(tmp_path):
    storage = SqliteStorage(tmp_path / "c.db")
    srv = server(Fleet(storage, hosts=["h1"]), TOKEN, Listen(port=0))
    thread = start_in_thread(srv)
    yield f"http://127.0.0.1:{srv.servers[0].sockets[0].getsockname()[1]}", storage
    srv.should_exit = True
    thread.join(5)
    storage.close()


def pusher(url: str, news: list[list[dict]], samples: list[dict] = ()) -> Pusher:
    """A Pusher driven by hand; each snapshot hands over the next list of `news`."""
    return Pusher(url, host_token(TOKEN, "h1"), "h1", snapshot=lambda: (news.pop(0) if news else [], list(samples), {}))


def event(i: int, **detail) -> dict:
    return {"t_ns": T0 + i, "kind": "link_down", "device": "eth0", "detail": detail}


def test_a_refused_event_is_quarantined_and_the_rest_go_on(controller, caplog):
    url, storage = controller
    poison = event(2, deep=json.loads("[" * 50 + "]" * 50))  # nested past the controller's bound
    p = pusher(url, [[event(1), poison, event(3)], [event(4)]])
    with caplog.at_level(logging.WARNING, logger="clockfabric.agent.push"):
        assert p.push_once()  # refused (422 naming event 1 of the batch): that one is quarantined
        assert p.push_once() and p.push_once()
    assert p.counters["quarantined"] == 1 and not p.pending
    assert [e.seq for e in storage.events()] == [1, 3, 4]
    refusals = [r for r in caplog.records if "refused" in r.getMessage()]
    assert len(refusals) == 1 and "seq 2" in refusals[0].getMessage() and "deeper" in refusals[0].getMessage()


def test_samples_without_a_number_are_left_out_not_refused(controller):
    url, storage = controller
    p = pusher(url, [[event(1)]], samples=[{"name": "owd_p50_ns", "value": float("nan"), "labels": {}},
                                           {"name": "up", "value": 1.0, "labels": {}}])
    assert p.push_once() and p.counters["quarantined"] == 0 and len(storage.events()) == 1


def test_quarantined_events_are_a_metric():
    (m,) = clock_metrics({"host": "h1", "push": {"quarantined": 3}})[1:]  # after the graph parts gauge
    assert (m.name, m.value, m.kind) == ("clockfabric_push_quarantined_total", 3.0, "counter")


class Scripted(BaseHTTPRequestHandler):
    """Answers each push with the next (status, headers) of the server's script; 200 once it is done."""

    def do_POST(self):  # noqa: N802 - the handler's name
        self.rfile.read(int(self.headers["Content-Length"]))
        status, headers = self.server.script.pop(0) if self.server.script else (200, {})
        self.server.seen.append((status, time.monotonic()))
        self.send_response(status)
        for k, v in {**headers, "Content-Length": "2"}.items():
            self.send_header(k, v)
        self.end_headers()
        self.wfile.write(b"{}")

    def log_message(self, *_args):
        pass


@pytest.fixture
def scripted():
    srv = ThreadingHTTPServer(("127.0.0.1", 0), Scripted)
    srv.script, srv.seen = [], []
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    yield srv
    srv.shutdown()


@pytest.mark.parametrize("status", [500, 503, 401, 408, 429])
def test_what_the_controller_cannot_take_now_is_kept(scripted, status):
    scripted.script = [(status, {"Retry-After": "7"})]
    p = pusher(f"http://127.0.0.1:{scripted.server_port}", [[event(1), event(2)]])
    assert not p.push_once()
    assert len(p.pending) == 2 and p.counters["quarantined"] == 0 and p._retry_after_s == 7.0
    assert p.push_once() and not p.pending


def test_retry_waits_for_retry_after(scripted):
    scripted.script = [(429, {"Retry-After": "0.6"}), (503, {"Retry-After": "0.6"})]
    p = pusher(f"http://127.0.0.1:{scripted.server_port}", [[event(1)]])
    p.interval_s = 0.05
    p.start()
    threading.Event().wait(1.5)
    p.stop()
    p.join(5)
    (first, t1), (second, t2), (third, t3) = scripted.seen[:3]
    assert (first, second, third) == (429, 503, 200)
    assert t2 - t1 >= 0.55 and t3 - t2 >= 0.55  # backoff alone would have come back after 0.1 s


def test_the_push_timeout_outlasts_the_controllers_busy_wait():
    assert PUSH_TIMEOUT_S > BUSY_TIMEOUT_S  # a locked database reaches the agent as a 503, not a timeout
