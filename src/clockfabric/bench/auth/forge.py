"""What an attacker on a lab host without the fleet key can send: run on a host, in its namespace.

    python -m clockfabric.bench.auth.forge reply   --to ADDR --ports 7304,7305 [--count N]
    python -m clockfabric.bench.auth.forge map     --to ADDR --victim HOST --shift-ns NS [--count N]
    python -m clockfabric.bench.auth.forge garbage --to ADDR --ports 7299,7300 [--count N]
    python -m clockfabric.bench.auth.forge replay  --ports 7299 [--count N] [--wait S]

`reply` sends probe replies (REPLY0 with made-up timestamps, REPLY1) sealed with a key of its
own under the fleet's key id; `map` a clock map that moves `victim` by `shift-ns`, sealed the
same way, to the agent's control port; `garbage` random bytes; `replay` listens on this host's
interfaces for a datagram it sends (a genuine, sealed one) to one of `ports` and sends that
again, byte for byte, from the same address. Each prints one JSON line: what it sent.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import socket
import struct
import subprocess
import sys
import time
from typing import TYPE_CHECKING

from clockfabric.agent.config import CONTROL_PORT
from clockfabric.auth.keys import Keyring
from clockfabric.auth.seal import CONTROL, PROBE, Sealer
from clockfabric.probe import wire

if TYPE_CHECKING:
    from clockfabric.lab.state import Lab

ETH_P_ALL = 0x0003
FLEET_KEY_ID = 1  # the id a lab's key file gives its key: the forger claims it
_IP = struct.Struct("!BBHHHBBH4s4s")
_UDP = struct.Struct("!HHHH")


def _sender(bind: str) -> socket.socket:
    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    s.bind((bind, 0))
    return s


def _own_key() -> Keyring:
    """A key of the attacker's own, under the fleet's key id: the MAC is all that can tell."""
    return Keyring({FLEET_KEY_ID: os.urandom(32)})


def forged_replies(to: str, ports: list[int], count: int, bind: str) -> int:
    sealer, s = Sealer(PROBE, bind, _own_key()), _sender(bind)
    now = time.time_ns()
    shift = 500_000_000  # half a second: what a forged reply once moved an offset by
    for i in range(count):
        session, seq = random.getrandbits(32), i + 1
        for p in (wire.Packet(wire.REPLY0, session, seq, (now + shift, now + shift + 1000), seq - 1, (now, now)),
                  wire.Packet(wire.REPLY1, session, seq)):
            s.sendto(sealer.seal(wire.encode(p), to, echo=random.getrandbits(63))[0], (to, ports[i % len(ports)]))
    return 2 * count


def forged_maps(to: str, victim: str, shift_ns: float, count: int, bind: str) -> int:
    sealer, s = Sealer(CONTROL, bind, _own_key()), _sender(bind)
    for _ in range(count):
        mapping = {"t0_ns": time.time_ns(), "offset_ns": shift_ns, "drift": 0.0, "uncertainty_ns": 1.0,
                   "synced": True}
        msg = {"t": "map", "parts": 1, "urgent": True, "hosts": {victim: mapping}}
        s.sendto(sealer.seal(json.dumps(msg).encode(), to)[0], (to, CONTROL_PORT))
    return count


def garbage(to: str, ports: list[int], count: int, bind: str) -> int:
    s = _sender(bind)
    for i in range(count):
        s.sendto(os.urandom(random.randrange(0, 200)), (to, ports[i % len(ports)]))
    return count


def _outgoing_udp(frame: bytes, address: str, ports: list[int]) -> tuple[str, int, bytes] | None:
    """(destination, port, payload) of an IPv4 UDP frame from `address` to one of `ports`."""
    if len(frame) < 14 + _IP.size + _UDP.size or frame[12:14] != b"\x08\x00":
        return None
    ver_ihl, _, _, _, _, _, proto, _, src, dst = _IP.unpack_from(frame, 14)
    ihl = (ver_ihl & 0x0F) * 4
    if proto != socket.IPPROTO_UDP or socket.inet_ntoa(src) != address:
        return None
    _, dport, length, _ = _UDP.unpack_from(frame, 14 + ihl)
    if dport not in ports:
        return None
    start = 14 + ihl + _UDP.size
    return socket.inet_ntoa(dst), dport, frame[start:start + length - _UDP.size]


def replay(ports: list[int], count: int, wait_s: float, bind: str) -> int:
    sniff = socket.socket(socket.AF_PACKET, socket.SOCK_RAW, socket.htons(ETH_P_ALL))
    sniff.settimeout(0.2)
    deadline = time.monotonic() + wait_s
    while time.monotonic() < deadline:
        try:
            frame = sniff.recv(65_535)
        except TimeoutError:
            continue
        found = _outgoing_udp(frame, bind, ports)
        if found is not None and found[0] != bind:
            dst, port, payload = found
            s = _sender(bind)
            for _ in range(count):
                s.sendto(payload, (dst, port))
            return count
    return 0


def on_host(lab: Lab, host: str, what: str, *args: str, timeout_s: float = 30.0) -> int:
    """Run one forgery on a lab host (from outside it); how many datagrams it sent."""
    from clockfabric.lab.exec import command

    address = str(lab.topology.hosts[host].address)
    argv = [sys.executable, "-m", "clockfabric.bench.auth.forge", what, "--bind", address, *args]
    done = subprocess.run(command(lab, host, argv), capture_output=True, text=True, timeout=timeout_s)
    lines = done.stdout.strip().splitlines()
    return int(json.loads(lines[-1])["sent"]) if lines else 0


def main(argv: list[str]) -> int:
    ap = argparse.ArgumentParser(prog="forge")
    ap.add_argument("what", choices=["reply", "map", "garbage", "replay"])
    ap.add_argument("--bind", required=True, help="this host's address")
    ap.add_argument("--to", default="")
    ap.add_argument("--ports", default=str(CONTROL_PORT))
    ap.add_argument("--victim", default="")
    ap.add_argument("--shift-ns", type=float, default=-1e12)
    ap.add_argument("--count", type=int, default=10)
    ap.add_argument("--wait", type=float, default=5.0)
    a = ap.parse_args(argv)
    ports = [int(p) for p in a.ports.split(",")]
    sent = {"reply": lambda: forged_replies(a.to, ports, a.count, a.bind),
            "map": lambda: forged_maps(a.to, a.victim, a.shift_ns, a.count, a.bind),
            "garbage": lambda: garbage(a.to, ports, a.count, a.bind),
            "replay": lambda: replay(ports, a.count, a.wait, a.bind)}[a.what]()
    print(json.dumps({"what": a.what, "sent": sent}))
    return 0 if sent else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
