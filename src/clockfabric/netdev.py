"""Sockets bound to a network device by its name, and bound again when the name is another device.

SO_BINDTODEVICE keeps a device's index, not its name: a NIC that comes back as another device
(replaced, or moved out of the namespace and back, as a lab's swapped cable is) may have another
index, and a socket still bound to the old one sends nothing (ENODEV) and hears nothing. The probe
engine and the failover heartbeats both bind to their NICs, and both call `bind_to_rail` again on
every link change of their host.
"""

from __future__ import annotations

import socket

SO_BINDTOIFINDEX = 62  # read back: the index of the device a socket is bound to (0: none)


def bound_index(sock: socket.socket) -> int:
    """The index of the device `sock` is bound to, 0 if none."""
    return sock.getsockopt(socket.SOL_SOCKET, SO_BINDTOIFINDEX)


def bind_to_rail(sock: socket.socket, rail: str) -> bool:
    """Bind `sock` to the device named `rail` now; True if that moved it (it was bound to another
    index, or to none)."""
    try:
        index = socket.if_nametoindex(rail)
    except OSError:
        return False  # not there now: the next link change tries again
    if bound_index(sock) == index:
        return False
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_BINDTODEVICE, rail.encode())
    except OSError:
        return False  # gone again meanwhile
    return True
