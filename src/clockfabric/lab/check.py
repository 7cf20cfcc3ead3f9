"""`lab check`: does every host reach every other, over every plane and every ECMP path?

A host can only learn which path a flow takes the way traceroute does: send probes with
TTL 1, 2, ... and see which switch answers "time exceeded". For each host pair and plane
we try source ports until every expected shortest path has been seen hop by hop and a
full-TTL probe on that same 5-tuple has been delivered. One process holds raw sockets in
every host namespace, so the whole mesh is probed in parallel.
"""

from __future__ import annotations

import ipaddress
import random
import selectors
import socket
import struct
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from clockfabric.lab import netns
from clockfabric.lab.state import Lab
from clockfabric.topology import interfaces

PORT = 33434  # traceroute's port: the probes' destination
SO_BINDTODEVICE = 25


@dataclass
class PairCheck:
    src: str
    dst: str
    plane: int
    expected: set[tuple[str, ...]]  # switch sequences of the shortest paths
    seen: dict[tuple[str, ...], int] = field(default_factory=dict)  # path -> a source port on it
    unexpected: set[tuple[str, ...]] = field(default_factory=set)
    delivered: bool = False
    ports_tried: int = 0

    @property
    def missing(self) -> list[tuple[str, ...]]:
        return sorted(self.expected - set(self.seen))

    @property
    def ok(self) -> bool:
        return self.delivered and not self.missing and not self.unexpected

    def as_dict(self) -> dict:
        return {"src": self.src, "dst": self.dst, "plane": self.plane, "ok": self.ok,
                "delivered": self.delivered, "paths_expected": len(self.expected), "paths_seen": len(self.seen),
                "missing": [list(p) for p in self.missing], "unexpected": [list(p) for p in self.unexpected],
                "ports_tried": self.ports_tried}


def _probe(src: ipaddress.IPv4Address, dst: ipaddress.IPv4Address, sport: int, ident: int, ttl: int,
           payload: bytes) -> bytes:
    length = 28 + len(payload)
    ip = struct.pack("!BBHHHBBH4s4s", 0x45, 0, length, ident, 0, ttl, socket.IPPROTO_UDP, 0, src.packed, dst.packed)
    return ip + struct.pack("!HHHH", sport, PORT, length - 20, 0) + payload


class _Mesh:
    """Per host: a raw sender per NIC, a raw ICMP listener, and a UDP listener."""

    def __init__(self, lab: Lab):
        self.sel = selectors.DefaultSelector()
        self.senders: dict[tuple[str, str], socket.socket] = {}
        self.socks: list[socket.socket] = []
        for h in lab.topology.hosts.values():
            with netns.entered(lab.ns(h.name)):
                for nic in h.nics:
                    s = socket.socket(socket.AF_INET, socket.SOCK_RAW, socket.IPPROTO_RAW)
                    s.setsockopt(socket.SOL_SOCKET, SO_BINDTODEVICE, nic.name.encode())
                    s.setblocking(False)
                    self.senders[(h.name, nic.name)] = s
                    self.socks.append(s)
                icmp = socket.socket(socket.AF_INET, socket.SOCK_RAW, socket.IPPROTO_ICMP)
                udp = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
                udp.bind((str(h.address), PORT))
            for s, kind in ((icmp, "icmp"), (udp, "udp")):
                s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4 << 20)
                s.setblocking(False)
                self.sel.register(s, selectors.EVENT_READ, (kind, h.name))
                self.socks.append(s)

    def close(self) -> None:
        self.sel.close()
        for s in self.socks:
            s.close()


def check(lab: Lab, *, max_rounds: int = 40, seed: int = 0,
          progress: Callable[[int, int], None] | None = None) -> list[PairCheck]:
    topo = lab.topology
    owner = {itf.address.ip: itf.port.node for itf in interfaces(topo).values()}
    by_address = {h.address: h.name for h in topo.hosts.values()}
    pairs: dict[tuple[str, str, int], PairCheck] = {}
    for src in topo.hosts:
        for dst in topo.hosts:
            if src != dst:
                for path in topo.paths(src, dst):
                    key = (src, dst, path.plane)
                    pairs.setdefault(key, PairCheck(src, dst, path.plane, set())).expected.add(path.switches)
    rng = random.Random(seed)
    mesh = _Mesh(lab)
    try:
        for rnd in range(max_rounds):
            todo = [p for p in pairs.values() if not (p.delivered and not p.missing)]
            if progress:
                progress(len(pairs) - len(todo), len(pairs))
            if not todo:
                break
            _round(lab, mesh, todo, rng, rnd, owner, by_address)
    finally:
        mesh.close()
    return sorted(pairs.values(), key=lambda p: (p.src, p.dst, p.plane))


def _round(lab, mesh, todo, rng, rnd, owner, by_address) -> None:
    topo = lab.topology
    hops: dict[tuple[str, str, int, int], dict[int, str]] = {}  # (src, dst, plane, sport) -> ttl -> switch
    tried: dict[tuple[str, str, int, int], PairCheck] = {}
    want = 0
    for pc in todo:  # sorted by source: consecutive sends spread over many links' queues
        sport = rng.randrange(20000, 60000)
        pc.ports_tried += 1
        src, dst = topo.hosts[pc.src], topo.hosts[pc.dst]
        nic = src.nic(pc.plane)
        sender = mesh.senders[(pc.src, nic.name)]
        length = len(next(iter(pc.expected)))
        probes = [_probe(src.address, dst.address, sport, ttl, ttl, b"") for ttl in range(1, length + 1)]
        probes.append(_probe(src.address, dst.address, sport, 64, 64, bytes([pc.plane, rnd % 256])))
        for probe in probes:
            try:
                sender.sendto(probe, (str(dst.address), 0))
            except OSError:  # NIC without carrier, or its queue full: this probe is lost, as on a wire
                pass
        key = (pc.src, pc.dst, pc.plane, sport)
        hops[key], tried[key] = {}, pc
        want += length + 1
    got, deadline, quiet = 0, time.monotonic() + 0.5, time.monotonic() + 0.1
    delivered: set[tuple[str, str, int, int]] = set()
    while got < want and time.monotonic() < min(deadline, quiet):
        for sel_key, _ in mesh.sel.select(timeout=0.01):
            kind, host = sel_key.data
            while True:
                try:
                    data, addr = sel_key.fileobj.recvfrom(2048)
                except BlockingIOError:
                    break
                quiet = time.monotonic() + 0.1
                if kind == "udp":
                    if len(data) >= 1 and (src := by_address.get(ipaddress.IPv4Address(addr[0]))):
                        delivered.add((src, host, data[0], addr[1]))
                        got += 1
                    continue
                reply = _time_exceeded(data)
                if reply is None:
                    continue
                responder, inner_src, inner_dst, sport, ttl = reply
                dst = by_address.get(inner_dst)
                node = owner.get(responder)  # the answering switch; its plane is the probe's
                if node is None or dst is None or by_address.get(inner_src) != host:
                    continue
                plane = topo.switches[node].plane if node in topo.switches else None
                key = (host, dst, plane, sport)
                if key in hops:
                    hops[key][ttl] = node
                    got += 1
    for key, pc in tried.items():
        if key in delivered:
            pc.delivered = True
        path_hops = hops[key]
        length = len(next(iter(pc.expected)))
        if len(path_hops) == length and key in delivered:
            path = tuple(path_hops[t] for t in range(1, length + 1))
            if path in pc.expected:
                pc.seen.setdefault(path, key[3])
            else:
                pc.unexpected.add(path)


def _time_exceeded(data: bytes):
    """(responder, inner src, inner dst, inner source port, ttl probe id) of an ICMP time exceeded."""
    ihl = (data[0] & 0x0F) * 4
    if len(data) < ihl + 8 + 28 or data[ihl] != 11:
        return None
    inner = ihl + 8
    inner_ihl = (data[inner] & 0x0F) * 4
    ident = struct.unpack_from("!H", data, inner + 4)[0]
    sport, dport = struct.unpack_from("!HH", data, inner + inner_ihl)
    if dport != PORT:
        return None
    return (ipaddress.IPv4Address(data[12:16]), ipaddress.IPv4Address(data[inner + 12:inner + 16]),
            ipaddress.IPv4Address(data[inner + 16:inner + 20]), sport, ident)
