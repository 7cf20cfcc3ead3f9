"""An agent whose controller cannot take its pushes backs off exponentially with full jitter,
capped, and never comes back sooner than the controller's Retry-After, given in seconds or as an
HTTP date. The real Pusher against a real HTTP server on loopback that answers 503."""

from __future__ import annotations

import random
import statistics
import threading
import time
from datetime import datetime, timezone
from email.utils import format_datetime
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from clockfabric.agent.push import MAX_BACKOFF_S, MAX_RETRY_AFTER_S, Pusher, backoff_s, retry_after_s
from clockfabric.auth.credential import host_token

TOKEN = "t" * 32


class Busy(BaseHTTPRequestHandler):
    """503 with the server's Retry-After (a callable: an HTTP date must be made at answer time)
    until `busy` answers have been given, then 200."""

    def do_POST(self):  # noqa: N802 - the handler's name
        self.rfile.read(int(self.headers["Content-Length"]))
        srv = self.server
        srv.seen.append(time.monotonic())
        busy = len(srv.seen) <= srv.busy
        self.send_response(503 if busy else 200)
        if busy and srv.retry_after:
            self.send_header("Retry-After", srv.retry_after())
        self.send_header("Content-Length", "2")
        self.end_headers()
        self.wfile.write(b"{}")

    def log_message(self, *_args):
        pass


@pytest.fixture
def busy():
    srv = ThreadingHTTPServer(("127.0.0.1", 0), Busy)
    srv.seen, srv.busy, srv.retry_after = [], 1, None
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    yield srv
    srv.shutdown()


def run_pusher(srv, seconds: float, interval_s: float = 0.05, seed: int = 1) -> Pusher:
    p = Pusher(f"http://127.0.0.1:{srv.server_port}", host_token(TOKEN, "h1"), "h1", interval_s=interval_s,
               snapshot=lambda: ([{"t_ns": time.time_ns(), "kind": "tick"}], [], {}), rng=random.Random(seed))
    p.start()
    p.wake()
    threading.Event().wait(seconds)
    p.stop()
    p.join(5)
    return p


def http_date(seconds_ahead: float) -> str:
    return format_datetime(datetime.fromtimestamp(time.time() + seconds_ahead, timezone.utc), usegmt=True)


def test_a_503_with_retry_after_in_seconds_is_waited_out(busy):
    busy.retry_after = lambda: "1"
    p = run_pusher(busy, 1.8)
    first, second = busy.seen[:2]
    assert second - first >= 0.95  # the backoff alone would have come back within 0.1 s
    assert p.counters["pushes"] >= 1 and not p.pending


def test_a_503_with_retry_after_as_an_http_date_is_waited_out(busy):
    busy.retry_after = lambda: http_date(2.0)  # whole seconds: 1 to 2 s from the answer
    p = run_pusher(busy, 2.8)
    first, second = busy.seen[:2]
    assert second - first >= 0.95
    assert p.counters["pushes"] >= 1 and not p.pending


def test_without_retry_after_the_backoff_is_short_and_jittered(busy):
    busy.busy = 3
    run_pusher(busy, 1.5, interval_s=0.05)
    gaps = [b - a for a, b in zip(busy.seen, busy.seen[1:4], strict=False)]
    assert len(gaps) == 3
    assert all(g < 0.05 * 2 ** (i + 1) + 0.1 for i, g in enumerate(gaps))  # within each round's cap
    assert len({round(g, 3) for g in gaps}) == 3


def test_full_jitter_spreads_over_zero_to_the_cap():
    rng = random.Random(7)
    for rounds in (1, 3, 6):
        cap = min(MAX_BACKOFF_S, 0.1 * 2 ** rounds)
        waits = [backoff_s(rounds, 0.1, rng) for _ in range(2000)]
        assert 0 <= min(waits) < cap * 0.05 and cap * 0.95 < max(waits) <= cap
        assert statistics.mean(waits) == pytest.approx(cap / 2, rel=0.1)  # uniform: a herd spreads out
    assert max(backoff_s(1000, 1.0, rng) for _ in range(100)) <= MAX_BACKOFF_S  # capped, no overflow


@pytest.mark.parametrize(("value", "expected"), [
    ("7", 7.0), ("0.5", 0.5), ("-3", 0.0), ("", 0.0), (None, 0.0), ("soon", 0.0), ("nan", 0.0),
    ("100000", MAX_RETRY_AFTER_S),
    ("Wed, 21 Oct 2015 07:28:30 GMT", 30.0),
    ("Wed, 21 Oct 2015 07:28:30 -0000", 30.0),
    ("Wed, 21 Oct 2015 07:27:00 GMT", 0.0),  # a date past: at once
])
def test_retry_after_reads_seconds_and_http_dates(value, expected):
    now = datetime(2015, 10, 21, 7, 28, 0, tzinfo=timezone.utc).timestamp()
    assert retry_after_s(value, now_s=now) == pytest.approx(expected)
