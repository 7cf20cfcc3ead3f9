"""All-pairs TCP streams between lab hosts, to see whether connections survive a failure.

One process per host (`python -m clockfabric.lab.streams`), bound to the host's stable
address: it accepts its peers' connections and opens some to each peer, and sends a steady
trickle on each. TCP_USER_TIMEOUT makes a connection fail the way a job's transport does
(RDMA gives up after a few seconds of unacknowledged data; gloo and NCCL time out): a
connection that cannot deliver for that long is *broken*. At the end each process writes
what every connection it opened saw: bytes, the longest stall, broken or not.
"""

from __future__ import annotations

import argparse
import json
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

from clockfabric.lab import process

CHUNK = 8192
TCP_USER_TIMEOUT = 18


def _sender(connection: str, address: str, port: int, args, out: dict) -> None:
    rec = out[connection] = {"peer": connection.partition("#")[0], "connection": connection, "bytes": 0,
                             "broken": False, "error": "", "max_stall_s": 0.0}
    deadline = time.monotonic() + args.seconds
    try:
        s = socket.create_connection((address, port), timeout=10, source_address=(args.address, 0))
    except OSError as e:
        rec.update(broken=True, error=f"connect: {e}")
        return
    s.setsockopt(socket.IPPROTO_TCP, TCP_USER_TIMEOUT, int(args.user_timeout * 1000))
    s.settimeout(args.user_timeout + 5)
    data = b"x" * CHUNK
    gap = CHUNK * 8 / args.rate_bps
    last_progress = time.monotonic()
    with s:
        while time.monotonic() < deadline:
            try:
                s.sendall(data)
            except OSError as e:
                rec.update(broken=True, error=str(e))
                return
            now = time.monotonic()
            rec["max_stall_s"] = max(rec["max_stall_s"], now - last_progress)
            rec["bytes"] += CHUNK
            last_progress = now
            time.sleep(gap)
        try:  # everything sent must also be delivered: the timeout applies to the tail too
            s.shutdown(socket.SHUT_WR)
            s.recv(1)
        except OSError as e:
            rec.update(broken=True, error=f"closing: {e}")


def _serve(listener: socket.socket, stop: threading.Event) -> None:
    listener.settimeout(0.5)
    while not stop.is_set():
        try:
            conn, _ = listener.accept()
        except TimeoutError:
            continue
        threading.Thread(target=_drain, args=(conn,), daemon=True).start()


def _drain(conn: socket.socket) -> None:
    with conn:
        try:
            while conn.recv(65536):
                pass
        except OSError:
            pass


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--address", required=True, help="this host's stable address")
    ap.add_argument("--peers", required=True, help="name=address,... of the hosts to stream to")
    ap.add_argument("--port", type=int, default=7270)
    ap.add_argument("--seconds", type=float, default=30.0)
    ap.add_argument("--connections", type=int, default=1, help="per peer (ECMP spreads them over the planes)")
    ap.add_argument("--rate-bps", type=float, default=2e6, help="per connection")
    ap.add_argument("--user-timeout", type=float, default=5.0, help="TCP_USER_TIMEOUT, seconds")
    ap.add_argument("--start-at", type=float, default=0.0, help="time.time() to start sending (all hosts at once)")
    ap.add_argument("--out", required=True)
    args = ap.parse_args()
    peers = dict(p.split("=") for p in args.peers.split(","))
    listener = socket.create_server((args.address, args.port), backlog=64)
    stop = threading.Event()
    threading.Thread(target=_serve, args=(listener, stop), daemon=True).start()
    time.sleep(max(0.0, args.start_at - time.time()))
    out: dict[str, dict] = {}
    senders = [threading.Thread(target=_sender, args=(f"{name}#{i}", address, args.port, args, out))
               for name, address in peers.items() for i in range(args.connections)]
    for t in senders:
        t.start()
    for t in senders:
        t.join()
    stop.set()
    with open(args.out, "w") as f:
        json.dump(list(out.values()), f)


class Mesh:
    """The streams on a set of lab hosts, started together and collected at the end."""

    def __init__(self, lab, hosts: list[str], *, seconds: float, user_timeout_s: float = 5.0,
                 connections: int = 1, rate_bps: float = 2e6, port: int = 7270):
        self.lab, self.hosts = lab, hosts
        self.dir = Path(lab.dir) / "streams"
        self.dir.mkdir(exist_ok=True)
        addresses = {h: str(lab.topology.hosts[h].address) for h in hosts}
        start_at = time.time() + 1.0  # every listener is up by then
        self.procs = []
        for h in hosts:
            peers = ",".join(f"{p}={a}" for p, a in addresses.items() if p != h)
            (self.dir / f"{h}.json").unlink(missing_ok=True)
            argv = [sys.executable, "-m", "clockfabric.lab.streams", "--address", addresses[h], "--peers", peers,
                    "--port", str(port), "--seconds", str(seconds), "--rate-bps", str(rate_bps),
                    "--connections", str(connections),
                    "--user-timeout", str(user_timeout_s), "--start-at", str(start_at),
                    "--out", str(self.dir / f"{h}.json")]
            self.procs.append(lab.spawn(h, argv, f"tcp streams on {h}", log=self.dir / f"{h}.log"))

    def wait(self, timeout_s: float) -> list[dict]:
        """Every connection's record, as {src, peer, bytes, broken, error, max_stall_s}."""
        out = []
        for h, proc in zip(self.hosts, self.procs, strict=True):
            try:
                proc.wait(timeout_s)
            except subprocess.TimeoutExpired:
                process.stop([proc])
            try:
                out += [{"src": h, **rec} for rec in json.loads((self.dir / f"{h}.json").read_text())]
            except (OSError, ValueError):
                err = (self.dir / f"{h}.log").read_text(errors="replace").strip().splitlines()
                out.append({"src": h, "peer": "*", "bytes": 0, "broken": True, "max_stall_s": 0.0,
                            "error": f"streams on {h} wrote nothing: {err[-1] if err else proc.returncode}"})
        return out


if __name__ == "__main__":
    main()
