"""LLDP (IEEE 802.1AB) frames: just enough to say and hear "this is switch S, port P".

Shared by the lab, whose switches announce themselves, and the audit, whose hosts listen on
each NIC to learn where it is cabled. Real switches send the same TLVs.
"""

from __future__ import annotations

import select
import socket
import struct
import time

ETH_P_LLDP = 0x88CC
MULTICAST = bytes.fromhex("0180c200000e")  # nearest bridge: never forwarded by a switch
CHASSIS, PORT, TTL, PORT_DESC, SYSTEM_NAME, END = 1, 2, 3, 4, 5, 0
LOCAL, IFNAME = 7, 5  # chassis id subtype "locally assigned", port id subtype "interface name"
MAC_CHASSIS, ADDRESS_CHASSIS, MAC_PORT, ADDRESS_PORT = 4, 5, 3, 4  # the id subtypes that are binary
MAX_FRAME = 1518


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


def listen(ifaces: list[str], wait_s: float) -> dict[str, dict | None]:
    """The first neighbour heard on each interface within wait_s (None where none was heard)."""
    socks, heard = {}, {i: None for i in ifaces}
    try:
        for name in ifaces:
            try:
                # protocol 0 until bound: a socket made for LLDP would queue frames from every
                # interface in the moments before bind() narrows it to this one
                s = socket.socket(socket.AF_PACKET, socket.SOCK_RAW, 0)
                s.bind((name, ETH_P_LLDP))
                socks[s] = name
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
