"""LLDP (IEEE 802.1AB) frames: just enough to say and hear "this is switch S, port P".

Shared by the lab, whose switches announce themselves, and the audit, whose hosts listen on
each NIC to learn where it is cabled. Real switches send the same TLVs.
"""

from __future__ import annotations

import logging
import re
import select
import socket
import struct
import threading
import time
from dataclasses import dataclass

ETH_P_LLDP = 0x88CC
MULTICAST = bytes.fromhex("0180c200000e")  # nearest bridge: never forwarded by a switch
CHASSIS, PORT, TTL, PORT_DESC, SYSTEM_NAME, END = 1, 2, 3, 4, 5, 0
LOCAL, IFNAME = 7, 5  # chassis id subtype "locally assigned", port id subtype "interface name"
MAC_CHASSIS, ADDRESS_CHASSIS, MAC_PORT, ADDRESS_PORT = 4, 5, 3, 4  # the id subtypes that are binary
MAX_FRAME = 1518
_MAC = re.compile(r"[0-9a-f]{2}(:[0-9a-f]{2}){5}")  # a port id as parse() writes a MAC
log = logging.getLogger(__name__)


def _tlv(kind: int, value: bytes) -> bytes:
    return struct.pack("!H", kind << 9 | len(value)) + value


def frame(src_mac: bytes, chassis: str, port: str, *, system: str = "", description: str = "", ttl: int = 120) -> bytes:
    body = (_tlv(CHASSIS, bytes([LOCAL]) + chassis.encode()) + _tlv(PORT, bytes([IFNAME]) + port.encode())
            + _tlv(TTL, struct.pack("!H", ttl)))
    if description:
        body += _tlv(PORT_DESC, description.encode()[:255])
    if system:
        body += _tlv(SYSTEM_NAME, system.encode()[:255])
    return MULTICAST + src_mac + struct.pack("!H", ETH_P_LLDP) + body + _tlv(END, b"")


def parse(data: bytes) -> dict | None:
    """The neighbour a frame describes ({chassis, port, system, ttl, ...}), or None if it is not LLDP."""
    if len(data) < 14 or struct.unpack("!H", data[12:14])[0] != ETH_P_LLDP:
        return None
    out: dict = {}
    i = 14
    while i + 2 <= len(data):
        head, = struct.unpack("!H", data[i:i + 2])
        kind, length = head >> 9, head & 0x1FF
        value = data[i + 2:i + 2 + length]
        if kind == END or len(value) < length:
            break
        if kind in (CHASSIS, PORT) and value:
            subtype, ident = value[0], value[1:]
            if (kind, subtype) in ((CHASSIS, MAC_CHASSIS), (PORT, MAC_PORT)) and len(ident) == 6:
                text = ident.hex(":")
            elif (kind, subtype) in ((CHASSIS, ADDRESS_CHASSIS), (PORT, ADDRESS_PORT)):
                text = ident.hex()  # a network address, family byte first: binary, not text
            else:
                text = ident.decode(errors="replace")
            out["chassis" if kind == CHASSIS else "port"] = text
        elif kind == TTL and length == 2:
            out["ttl"], = struct.unpack("!H", value)
        elif kind == PORT_DESC:
            out["port_description"] = value.decode(errors="replace")
        elif kind == SYSTEM_NAME:
            out["system"] = value.decode(errors="replace")
        i += 2 + length
    return out if "chassis" in out and "port" in out else None


def bound(s: socket.socket | None, iface: str) -> bool:
    """Whether a packet socket is still bound to `iface`: when a NIC leaves the namespace (a
    cable moved to another host, in the lab), its sockets come unbound and say "" here, and stay
    so when it comes back: only a socket opened again hears it."""
    try:
        return s is not None and s.getsockname()[0] == iface
    except OSError:
        return False


def _open(iface: str, proto: int) -> socket.socket:
    # protocol 0 until bound: a socket made for LLDP would queue frames from every
    # interface in the moments before bind() narrows it to this one
    s = socket.socket(socket.AF_PACKET, socket.SOCK_RAW, 0)
    try:
        s.bind((iface, proto))
    except OSError:
        s.close()
        raise
    s.setblocking(False)
    return s


def listen(ifaces: list[str], wait_s: float) -> dict[str, dict | None]:
    """The first neighbour heard on each interface within wait_s (None where none was heard)."""
    socks: dict[socket.socket, str] = {}
    heard: dict[str, dict | None] = {i: None for i in ifaces}
    try:
        for name in ifaces:
            try:
                socks[_open(name, ETH_P_LLDP)] = name
            except OSError:
                continue  # an absent NIC hears nothing; the NIC checks say why
        deadline = time.monotonic() + wait_s
        while socks and (left := deadline - time.monotonic()) > 0:
            ready, _, _ = select.select(list(socks), [], [], left)
            for s in ready:
                if (neighbour := parse(s.recv(MAX_FRAME))) is not None:
                    heard[socks.pop(s)] = neighbour
                    s.close()
    finally:
        for s in socks:
            s.close()
    return heard


@dataclass
class _Port:
    iface: str
    chassis: str
    port: str
    system: str
    description: str
    sock: socket.socket | None = None
    frame: bytes = b""


class Announcer(threading.Thread):
    """Sends each added port's frame every interval, as a switch's lldpd does (30 s there).

    With `reopen`, a port whose NIC was replaced (same name, new device) is opened again, in
    the announcer thread's own namespace: for an agent, its host's. The lab's speaker, which
    sends into other namespaces from one thread, must not.
    """

    def __init__(self, interval_s: float = 30.0, *, reopen: bool = False):
        super().__init__(name="lldp-announcer", daemon=True)
        self.interval_s = interval_s
        self.reopen = reopen
        self.stopping = threading.Event()
        self.ports: list[_Port] = []

    def add(self, iface: str, chassis: str, port: str, *, system: str = "", description: str = "") -> None:
        """Announce on `iface` of the calling thread's network namespace."""
        entry = _Port(iface, chassis, port, system, description)
        self._bind(entry)
        self.ports.append(entry)

    def _bind(self, p: _Port) -> None:
        if p.sock is not None:
            p.sock.close()
            p.sock = None
        p.sock = _open(p.iface, 0)  # protocol 0: sends, never receives
        p.frame = frame(p.sock.getsockname()[4], p.chassis, p.port, system=p.system, description=p.description,
                        ttl=max(1, round(4 * self.interval_s)))

    def run(self) -> None:
        while True:
            for p in self.ports:
                try:
                    if self.reopen and not bound(p.sock, p.iface):
                        self._bind(p)
                    if p.sock is not None:  # None: its last reopen failed
                        p.sock.send(p.frame)
                except OSError:
                    pass  # a port that is down (or not there now) sends nothing, as on a real switch
            if self.stopping.wait(self.interval_s):
                return

    def stop(self) -> None:
        self.stopping.set()
        if self.is_alive():
            self.join(2)
        self.close()

    def close(self) -> None:
        for p in self.ports:
            if p.sock is not None:
                p.sock.close()
        self.ports.clear()


def neighbour_name(heard: dict) -> str:
    """"node:port" of what a frame describes: the system name where it gives one (a chassis id is
    often a MAC), as the topology names switches; the port description where the port id is a MAC
    or an address (lldpd on a Linux machine announces its MAC, and the interface name as description)."""
    port = heard["port"]
    if _MAC.fullmatch(port) and heard.get("port_description"):
        port = heard["port_description"]
    return f"{heard.get('system') or heard['chassis']}:{port}"


class Neighbours:
    """What each interface hears, kept until the frame's TTL runs out: a long-lived listener.

    Non-blocking: `poll()` reads whatever frames have come since the last call, so no thread is
    needed; LLDP is a few frames a minute. An interface that cannot be opened hears nothing
    until it can; one whose NIC was replaced is opened again (in the caller's namespace).
    """

    def __init__(self, ifaces: list[str], clock=time.monotonic):
        self.clock = clock
        self.socks: dict[str, socket.socket | None] = {}
        self.heard: dict[str, tuple[str, float]] = {}  # iface -> (neighbour name, heard until)
        self._lock = threading.Lock()  # polled by the push and the /metrics threads
        for name in ifaces:
            self.socks[name] = self._try_open(name)

    @staticmethod
    def _try_open(name: str) -> socket.socket | None:
        try:
            return _open(name, ETH_P_LLDP)
        except PermissionError:
            raise
        except OSError:
            return None

    def poll(self) -> dict[str, str | None]:
        """Each interface's neighbour as "node:port", or None where none is heard now."""
        with self._lock:
            now = self.clock()
            for name, s in self.socks.items():
                if not bound(s, name):
                    if s is not None:
                        s.close()
                    self.heard.pop(name, None)  # another NIC now, or none: what the old one heard is void
                    s = self.socks[name] = self._try_open(name)
                while s is not None:
                    try:
                        heard = parse(s.recv(MAX_FRAME))
                    except OSError:  # nothing more (or the NIC just went)
                        break
                    if heard is not None:
                        self.heard[name] = (neighbour_name(heard), now + heard.get("ttl", 120))
            out: dict[str, str | None] = {}
            for name in self.socks:
                seen = self.heard.get(name)
                out[name] = seen[0] if seen and seen[1] > now else None
            return out

    def close(self) -> None:
        for s in self.socks.values():
            if s is not None:
                s.close()
        self.socks.clear()


def for_ports(node: str, ports: list[str], interval_s: float) -> tuple[Neighbours | None, Announcer | None]:
    """An agent's LLDP: listen on each port and (interval_s > 0) announce "node, port" on it, as
    lldpd does; the announcer is not started. (None, None) without raw packet sockets (not root)."""
    try:
        neighbours = Neighbours(ports)
    except PermissionError:
        log.info("no LLDP: raw packet sockets need root or CAP_NET_RAW")
        return None, None
    if interval_s <= 0:
        return neighbours, None
    announcer = Announcer(interval_s, reopen=True)
    for port in ports:
        try:
            announcer.add(port, node, port, system=node)
        except OSError as e:
            log.warning("no LLDP announcements on %s: %s", port, e.strerror)
    return neighbours, announcer
