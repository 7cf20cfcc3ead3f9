"""Host side: ping every rail peer from each NIC, from the NIC's own address, out of that NIC.

One raw ICMP socket per NIC, bound to it, so each echo leaves by the rail being tested and
only replies that came back on it count. All targets are pinged in rounds at once; the
round trip is timed by the kernel's receive timestamp against the send time in the payload;
the first round, which waits for ARP, counts for reach but not for latency.
"""

from __future__ import annotations

import os
import select
import socket
import struct
import time

ECHO_REQUEST, ECHO_REPLY = 8, 0
SO_BINDTODEVICE = 25
SO_TIMESTAMPNS = 35  # receive times as a timespec (Python has no name for it)
PAYLOAD = struct.Struct("!Qd")  # send time (ns, CLOCK_REALTIME as the kernel stamps), padding


def _checksum(data: bytes) -> int:
    if len(data) % 2:
        data += b"\0"
    total = sum(struct.unpack(f"!{len(data) // 2}H", data))
    total = (total >> 16) + (total & 0xFFFF)
    total += total >> 16
    return ~total & 0xFFFF


def echo(ident: int, seq: int, sent_ns: int) -> bytes:
    body = PAYLOAD.pack(sent_ns, 0.0)
    head = struct.pack("!BBHHH", ECHO_REQUEST, 0, 0, ident, seq)
    return struct.pack("!BBHHH", ECHO_REQUEST, 0, _checksum(head + body), ident, seq) + body


def _open(nic: str, source: str | None) -> socket.socket:
    s = socket.socket(socket.AF_INET, socket.SOCK_RAW, socket.IPPROTO_ICMP)
    s.setsockopt(socket.SOL_SOCKET, SO_BINDTODEVICE, nic.encode())
    s.setsockopt(socket.SOL_SOCKET, SO_TIMESTAMPNS, 1)
    if source:
        s.bind((source, 0))
    s.setblocking(False)
    return s


def ping_mesh(targets: dict[str, list[str]], sources: dict[str, str | None], *, count: int = 5,
              gap_s: float = 0.02, wait_s: float = 1.0) -> dict[str, dict]:
    """nic -> {target: {sent, received, rtt_us: [...]}} (or {"error": ...} for a NIC that cannot send)."""
    out: dict[str, dict] = {}
    socks: dict[socket.socket, tuple[str, int]] = {}
    for i, (nic, addrs) in enumerate(sorted(targets.items())):
        out[nic] = {a: {"sent": 0, "received": 0, "rtt_us": []} for a in addrs}
        try:
            socks[_open(nic, sources.get(nic))] = (nic, (os.getpid() * 16 + i) & 0xFFFF)
        except OSError as e:
            out[nic] = {"error": f"cannot ping from {nic}: {e.strerror}"}
    try:
        end = time.monotonic() + count * gap_s + wait_s
        next_round, rounds = time.monotonic(), 0
        while socks and time.monotonic() < end:
            if rounds < count and time.monotonic() >= next_round:
                _send_round(socks, out, rounds)
                rounds += 1
                next_round += gap_s
            timeout = max(0.0, min(end, next_round if rounds < count else end) - time.monotonic())
            ready, _, _ = select.select(list(socks), [], [], timeout)
            for s in ready:
                _receive(s, *socks[s], out)
            if rounds >= count and _all_in(out, count):
                break
    finally:
        for s in socks:
            s.close()
    return out


def _send_round(socks: dict, out: dict, seq: int) -> None:
    for s, (nic, ident) in socks.items():
        for addr in out[nic]:
            out[nic][addr]["sent"] += 1  # one that cannot even leave (no route) counts as lost
            try:
                s.sendto(echo(ident, seq, time.time_ns()), (addr, 0))
            except OSError:
                pass


def _receive(s: socket.socket, nic: str, ident: int, out: dict) -> None:
    while True:
        try:
            data, anc, _, (src, _) = s.recvmsg(256, 64)
        except BlockingIOError:
            return
        now_ns = time.time_ns()
        for level, kind, value in anc:
            if level == socket.SOL_SOCKET and kind == SO_TIMESTAMPNS:
                sec, nsec = struct.unpack("qq", value[:16])
                now_ns = sec * 1_000_000_000 + nsec
        ihl = (data[0] & 0x0F) * 4
        icmp = data[ihl:]
        if len(icmp) < 8 + PAYLOAD.size:
            continue
        kind, _, _, got_ident, seq = struct.unpack("!BBHHH", icmp[:8])
        if kind != ECHO_REPLY or got_ident != ident or src not in out[nic]:
            continue
        sent_ns, _ = PAYLOAD.unpack(icmp[8:8 + PAYLOAD.size])
        rec = out[nic][src]
        rec["received"] += 1
        if seq > 0:  # the first round waits for ARP: it proves reach, not latency
            rec["rtt_us"].append(round((now_ns - sent_ns) / 1e3, 1))


def _all_in(out: dict, count: int) -> bool:
    return all(r.get("received", count) >= count for targets in out.values() if "error" not in targets
               for r in targets.values())
