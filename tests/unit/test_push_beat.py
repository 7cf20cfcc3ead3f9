"""An agent pushes on a beat fixed on the wall clock, its phase drawn from its host name, and a
beat's samples carry the beat's time: the series engine sees evenly spaced timestamps. The real
Pusher against real HTTP servers on loopback: a controller that names a series gate, and the gate."""

from __future__ import annotations

import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from clockfabric.agent.push import Pusher, next_beat_ms
from clockfabric.auth.credential import host_token

TOKEN = "t" * 32


@pytest.mark.parametrize("interval_s", [0.05, 1.0, 10.0, 2.5])
def test_beats_are_an_interval_apart_at_the_hosts_own_phase(interval_s):
    step = round(interval_s * 1000)
    for host in ("h1", "gpu-node-0173"):
        now = 1_764_000_000_123
        beats = [next_beat_ms(now, interval_s, host)]
        for _ in range(20):
            beats.append(next_beat_ms(beats[-1], interval_s, host))
        assert now < beats[0] <= now + step  # the first beat after now, within an interval
        assert {b - a for a, b in zip(beats, beats[1:], strict=False)} == {step}
        # the same beat from any instant before it: a late wake-up does not shift the grid
        assert next_beat_ms(beats[3] - 1, interval_s, host) == beats[3]
        assert next_beat_ms(beats[3] - step + 1, interval_s, host) == beats[3]


def test_hosts_spread_over_the_interval():
    phases = {next_beat_ms(0, 1.0, f"h{i}") for i in range(200)}
    assert len(phases) > 150 and min(phases) < 100 and max(phases) > 900


class Recorder(BaseHTTPRequestHandler):
    def do_POST(self):  # noqa: N802 - the handler's name
        body = self.rfile.read(int(self.headers["Content-Length"]))
        srv = self.server
        srv.seen.append((time.time_ns() // 1_000_000, body))
        answer = srv.answer()
        self.send_response(200)
        self.send_header("Content-Length", str(len(answer)))
        self.end_headers()
        self.wfile.write(answer)

    def log_message(self, *_args):
        pass


def serve(answer) -> ThreadingHTTPServer:
    srv = ThreadingHTTPServer(("127.0.0.1", 0), Recorder)
    srv.seen, srv.answer = [], answer
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    return srv


def test_a_beats_samples_carry_the_beat_and_a_woken_push_its_own_time():
    gate = serve(lambda: b"")
    controller = serve(lambda: b'{"series_port": %d}' % gate.server_port)
    interval_ms = 100
    samples = [{"name": "owd_p99_ns", "value": 1234.0, "labels": {"dst": "10.0.1.1"}}]
    p = Pusher(f"http://127.0.0.1:{controller.server_port}", host_token(TOKEN, "h7"), "h7",
               snapshot=lambda: ([], samples, {}), interval_s=interval_ms / 1000)
    try:
        p.start()
        time.sleep(1.0)
        phase = next_beat_ms(0, interval_ms / 1000, "h7")
        time.sleep((next_beat_ms(time.time_ns() // 1_000_000, interval_ms / 1000, "h7") + 30) / 1000 - time.time())
        woken_at = time.time_ns() // 1_000_000
        p.wake()  # between two beats: a link went down
        time.sleep(0.5)
    finally:
        p.stop()
        p.join(5)
        controller.shutdown()
        gate.shutdown()
    stamps = [int(body.split()[-1]) for _, body in gate.seen]
    on_beat = [t for t in stamps if (t - phase) % interval_ms == 0]
    assert len(on_beat) >= 10 and len(set(on_beat)) == len(on_beat)
    # each written once its beat came (not before), and soon after: a loaded machine is late, not early
    for arrived, body in gate.seen:
        assert 0 <= arrived - int(body.split()[-1]) < 1000
    off_beat = [t for t in stamps if (t - phase) % interval_ms]
    assert any(woken_at <= t < woken_at + 60 for t in off_beat)  # the woken push's, at its own time
