"""Background traffic between lab hosts: real iperf3 flows, TCP or rate-limited UDP."""

from __future__ import annotations

import json
import random
import subprocess
import time
from pathlib import Path

from clockfabric.errors import ClockfabricError
from clockfabric.lab import process
from clockfabric.lab.exec import command
from clockfabric.lab.state import Lab


def run(lab: Lab, src: str, dst: str, *, seconds: float, rate_bps: int | None = None,
        udp: bool = False, streams: int = 1) -> dict:
    """Run one iperf3 test from src to dst (host addresses) and return what it measured."""
    topo = lab.topology
    for h in (src, dst):
        if h not in topo.hosts:
            raise ClockfabricError(f"{h!r} is not a host of lab {lab.name}; traffic runs between hosts")
    if src == dst:
        raise ClockfabricError("traffic needs two different hosts")
    address = str(topo.hosts[dst].address)
    port = random.randrange(20000, 60000)
    server = iperf_server(lab, dst, address, port, once=True)
    try:
        args = ["iperf3", "-c", address, "-p", str(port), "-B", str(topo.hosts[src].address),
                "-t", str(seconds), "-J", "-P", str(streams)]
        if udp or rate_bps:
            args += ["-u"] if udp else []
            args += ["-b", str(rate_bps or 0)]
        try:  # iperf3 3.12 was seen spinning at the end of a 600 s saturated test, its report unsent
            client = subprocess.run(command(lab, src, args), capture_output=True, text=True, timeout=seconds + 30)
        except subprocess.TimeoutExpired:
            raise ClockfabricError(f"iperf3 {src} -> {dst} did not finish {seconds + 30:g} s after it started "
                                   f"(a {seconds:g} s test); it was stopped") from None
        try:
            result = json.loads(client.stdout)
        except json.JSONDecodeError:
            raise ClockfabricError(
                f"iperf3 {src} -> {dst} failed: {client.stderr.strip() or client.stdout[:200]}") from None
        if "error" in result:
            raise ClockfabricError(f"iperf3 {src} -> {dst} failed: {result['error']}")
    finally:
        process.stop([server])
    end = result["end"]
    if udp:
        summary = end["sum"]
        received = summary["bits_per_second"] * (1 - summary.get("lost_percent", 0) / 100)
        return {"src": src, "dst": dst, "protocol": "udp", "seconds": seconds,
                "sent_bps": summary["bits_per_second"], "received_bps": received,
                "lost_percent": summary.get("lost_percent", 0.0), "jitter_ms": summary.get("jitter_ms")}
    return {"src": src, "dst": dst, "protocol": "tcp", "seconds": seconds, "streams": streams,
            "sent_bps": end["sum_sent"]["bits_per_second"], "received_bps": end["sum_received"]["bits_per_second"],
            "retransmits": end["sum_sent"].get("retransmits")}


def iperf_server(lab: Lab, host: str, address: str, port: int, *, once: bool = False,
                 timeout_s: float = 10.0) -> subprocess.Popen:
    """An iperf3 server on host, returned once it listens: a client started before that is
    refused and exits, and the flow silently never runs (seen on a loaded machine with a fixed
    sleep). Its output goes to a log in the lab's folder, never to a pipe no one drains."""
    log = server_log(lab, host, address, port)
    server = process.spawn(command(lab, host, ["iperf3", "-s", *(["-1"] if once else []), "-B", address,
                                               "-p", str(port), "--forceflush"]), log=log)
    deadline = time.monotonic() + timeout_s
    while "listening" not in (text := log.read_text()).lower():
        if server.poll() is not None or time.monotonic() > deadline:
            process.stop([server])
            said = text.strip().splitlines()[-1:] or ["no output; is iperf3 installed (make setup)?"]
            raise ClockfabricError(f"iperf3 server on {host} ({address}:{port}) did not start: {said[0]}")
        time.sleep(0.02)
    return server


def server_log(lab: Lab, host: str, address: str, port: int) -> Path:
    """Where iperf_server's server writes (per-second lines once a client's data flows)."""
    return lab.dir / "iperf3" / f"{host}-{address}-{port}.log"
