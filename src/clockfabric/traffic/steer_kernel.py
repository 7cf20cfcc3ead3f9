"""Transparent mode's kernel I/O: the host's TCP flows (sock_diag), the plane the kernel
routes a flow on (RTM_GETROUTE with its ports), and the per-flow rules that pin a flow to a plane.

Rules carry protocol 199 (as our routes do) and a priority in 19900..19963 (19900 + the plane the
flow came from), and point at table 19900 + the plane it now uses. A restarted agent finds them
by that protocol; if the agent dies they stay and keep working (fail-static).
"""

from __future__ import annotations

import os
import socket
import struct
import threading
from collections.abc import Callable
from typing import Any

from clockfabric.traffic.routes import RTPROT_CLOCKFABRIC
from clockfabric.traffic.steer_decide import FlowKey, FlowSample

RULE_PRIORITY = 19900  # + the plane the flow hashed onto
TABLE_BASE = 19900  # + the plane the flow is sent on
MAX_PLANES = 64
INET_DIAG_INFO, INET_DIAG_TOS = 2, 5  # linux/inet_diag.h: extensions asked for by bit (1 << (n - 1))


class FlowReader:
    """Established TCP flows from sock_diag, with tcp_info, of the network namespace it was
    made in. pyroute2 opens a socket per thread, in the namespace the thread is in at its first
    read: so the thread that made it may read it, and so may any thread in the namespace it was
    made in; any other is refused rather than silently read another namespace's flows."""

    def __init__(self):
        from pyroute2 import DiagSocket

        self.ds = DiagSocket()
        self.ds.bind()
        self.thread, self.netns = threading.get_ident(), _netns_here()

    def close(self) -> None:
        self.ds.close()

    def diag(self) -> list[tuple[FlowKey, Any, Any]]:
        """Each established flow: its key, its inet_diag message (idiag_cookie, idiag_inode,
        idiag_wqueue, ..., and the socket's TOS byte: `dscp(m)`) and its tcp_info (tcpi_*)."""
        if threading.get_ident() != self.thread and _netns_here() != self.netns:
            raise RuntimeError("FlowReader read from another thread, "
                               "in another network namespace than it was made in")
        extensions = 1 << (INET_DIAG_INFO - 1) | 1 << (INET_DIAG_TOS - 1)
        msgs = self.ds.get_sock_stats(family=socket.AF_INET, states=1 << 1, extensions=extensions)
        out = []
        for m in msgs:
            info = m.get_attr("INET_DIAG_INFO")
            if info is not None:
                out.append((FlowKey(m["idiag_src"], m["idiag_sport"], m["idiag_dst"], m["idiag_dport"]), m, info))
        return out

    def read(self) -> list[FlowSample]:
        return [FlowSample(key, m["idiag_cookie"], info["tcpi_bytes_acked"], m["idiag_wqueue"], info["tcpi_rtt"],
                           info["tcpi_bytes_received"]) for key, m, info in self.diag()]


def dscp(msg: Any) -> int | None:
    """The DSCP a socket marks (the top 6 bits of its IP_TOS), from its inet_diag message; None
    where the kernel did not say. pyroute2 hands the byte over as hex text."""
    tos = msg.get_attr("INET_DIAG_TOS")
    try:
        return int(str(tos).replace(":", "")[:2], 16) >> 2 if tos is not None else None
    except ValueError:
        return None


def _netns_here() -> int:
    """The calling thread's network namespace (its inode)."""
    return os.stat("/proc/thread-self/ns/net").st_ino


class RouteLookup:
    """Which interface the kernel routes a TCP 5-tuple out of, as a connection's own lookup
    does (multipath hash over the ports included): RTM_GETROUTE with RTA_IP_PROTO, RTA_SPORT
    and RTA_DPORT (Linux 4.17+), which pyroute2 does not encode."""

    HDR = struct.Struct("=IHHII")
    RTMSG = struct.Struct("=BBBBBBBBI")
    RTM_NEWROUTE, RTM_GETROUTE, NLMSG_ERROR, NLM_F_REQUEST = 24, 26, 2, 1
    RTA_DST, RTA_SRC, RTA_OIF, RTA_IP_PROTO, RTA_SPORT, RTA_DPORT = 1, 2, 4, 27, 28, 29

    def __init__(self):
        self.sock = socket.socket(socket.AF_NETLINK, socket.SOCK_RAW, socket.NETLINK_ROUTE)
        self.sock.bind((0, 0))
        self.sock.settimeout(1.0)
        self.seq = 0

    def close(self) -> None:
        self.sock.close()

    @staticmethod
    def _attr(kind: int, payload: bytes) -> bytes:
        data = struct.pack("=HH", 4 + len(payload), kind) + payload
        return data + b"\0" * (-len(data) % 4)

    def oif(self, key: FlowKey) -> int | None:
        self.seq += 1
        body = self.RTMSG.pack(socket.AF_INET, 32, 32, 0, 0, 0, 0, 0, 0)
        body += self._attr(self.RTA_DST, socket.inet_aton(key.remote))
        body += self._attr(self.RTA_SRC, socket.inet_aton(key.local))
        body += self._attr(self.RTA_IP_PROTO, bytes([socket.IPPROTO_TCP]))
        body += self._attr(self.RTA_SPORT, struct.pack("!H", key.lport))
        body += self._attr(self.RTA_DPORT, struct.pack("!H", key.rport))
        self.sock.send(self.HDR.pack(self.HDR.size + len(body), self.RTM_GETROUTE, self.NLM_F_REQUEST, self.seq, 0)
                       + body)
        while True:
            data = self.sock.recv(65536)
            length, kind, _, seq, _ = self.HDR.unpack_from(data)
            if seq != self.seq:
                continue
            if kind != self.RTM_NEWROUTE:
                return None  # NLMSG_ERROR: no route
            off = self.HDR.size + self.RTMSG.size
            while off + 4 <= length:
                alen, akind = struct.unpack_from("=HH", data, off)
                if alen < 4:
                    break
                if akind == self.RTA_OIF:
                    return struct.unpack_from("=I", data, off + 4)[0]
                off += (alen + 3) & ~3
            return None


class FlowRules:
    """Our per-flow rules and the per-plane tables they point at, by netlink."""

    def __init__(self, source: str, nics: dict[int, str], gateways: Callable[[str], dict[int, str]], ipr=None):
        from pyroute2 import IPRoute

        if max(nics) >= MAX_PLANES:
            raise ValueError(f"steering numbers planes below {MAX_PLANES}")
        self.source = source
        self.nics = nics
        self.gateways = gateways
        self.ipr = ipr or IPRoute()
        self.index = {p: self.ipr.link_lookup(ifname=n)[0] for p, n in nics.items()}
        self.tables: set[tuple[str, int]] = set()  # (peer address, plane) routed in our tables

    def close(self) -> None:
        self.ipr.close()

    def _table_route(self, peer: str, plane: int) -> None:
        if (peer, plane) in self.tables:
            return
        gw = self.gateways(peer).get(plane)
        if gw is None:
            raise OSError(f"no next hop toward {peer} on plane {plane}")
        self.ipr.route("replace", dst=f"{peer}/32", gateway=gw, oif=self.index[plane], table=TABLE_BASE + plane,
                       proto=RTPROT_CLOCKFABRIC, prefsrc=self.source)
        self.tables.add((peer, plane))

    @staticmethod
    def _selectors(key: FlowKey) -> dict:
        return {"src": key.local, "src_len": 32, "dst": key.remote, "dst_len": 32, "ip_proto": socket.IPPROTO_TCP,
                "sport_range": f"{key.lport}:{key.lport}", "dport_range": f"{key.rport}:{key.rport}"}

    def add(self, key: FlowKey, plane: int, origin: int | None) -> None:
        """Send the flow on `plane` (replacing a rule it had)."""
        from pyroute2 import NetlinkError

        try:
            self._table_route(key.remote, plane)
            self.remove(key)
            self.ipr.rule("add", table=TABLE_BASE + plane, priority=RULE_PRIORITY + (origin or 0),
                          protocol=RTPROT_CLOCKFABRIC, **self._selectors(key))
        except NetlinkError as e:
            raise OSError(f"rule for {key} on plane {plane}: {e}") from None

    def remove(self, key: FlowKey) -> None:
        """Back to the host's own route; nothing to do if it has no rule."""
        from pyroute2 import NetlinkError

        for k, plane, origin in self.installed():
            if k == key:
                try:
                    self.ipr.rule("del", table=TABLE_BASE + plane, priority=RULE_PRIORITY + (origin or 0),
                                  protocol=RTPROT_CLOCKFABRIC, **self._selectors(key))
                except NetlinkError as e:
                    if e.code != 2:  # ENOENT: gone already
                        raise OSError(f"removing the rule for {key}: {e}") from None

    def installed(self) -> list[tuple[FlowKey, int, int]]:
        """Our rules in the kernel now: (flow, plane it is sent on, plane it came from)."""
        out = []
        for r in self.ipr.get_rules(family=socket.AF_INET):
            attrs = dict(r["attrs"])
            prio, table = attrs.get("FRA_PRIORITY", 0), attrs.get("FRA_TABLE", r["table"])
            if attrs.get("FRA_PROTOCOL") != RTPROT_CLOCKFABRIC:
                continue
            if not (RULE_PRIORITY <= prio < RULE_PRIORITY + MAX_PLANES
                    and TABLE_BASE <= table < TABLE_BASE + MAX_PLANES):
                continue
            try:
                lport = int(attrs["FRA_SPORT_RANGE"].split(":")[0])
                rport = int(attrs["FRA_DPORT_RANGE"].split(":")[0])
                key = FlowKey(attrs["FRA_SRC"], lport, attrs["FRA_DST"], rport)
            except (KeyError, ValueError):
                continue
            out.append((key, table - TABLE_BASE, prio - RULE_PRIORITY))
        return out
