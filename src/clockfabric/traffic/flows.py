"""The TCP flows a decision touches: established connections to a peer, from /proc/net/tcp.

/proc/net is the reading process's network namespace, so an agent sees its own host's
flows, in a lab namespace or on a real machine alike.
"""

from __future__ import annotations

import socket
import struct

ESTABLISHED = "01"


def _address(hex_pair: str) -> tuple[str, int]:
    ip, port = hex_pair.split(":")
    return socket.inet_ntoa(struct.pack("<I", int(ip, 16))), int(port, 16)


def parse(text: str) -> list[tuple[str, int, str, int]]:
    """Established flows in /proc/net/tcp's format: (local ip, port, remote ip, port)."""
    flows = []
    for line in text.splitlines()[1:]:
        fields = line.split()
        if len(fields) > 3 and fields[3] == ESTABLISHED:
            flows.append((*_address(fields[1]), *_address(fields[2])))
    return flows


def to_peers(peers: set[str], path: str = "/proc/net/tcp") -> dict[str, list[str]]:
    """peer address -> its established flows, as 'local:port->remote:port'."""
    try:
        with open(path) as f:
            text = f.read()
    except OSError:
        return {}
    out: dict[str, list[str]] = {}
    for lip, lport, rip, rport in parse(text):
        if rip in peers:
            out.setdefault(rip, []).append(f"{lip}:{lport}->{rip}:{rport}")
    return out
