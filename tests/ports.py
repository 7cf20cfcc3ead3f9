"""Ports for the tests' own controllers. A controller listening on P puts its series gate on P + 1
(its --series-port default), so both must be free: a port the kernel picks says nothing of the next."""

from __future__ import annotations

import socket


def controller_port(address: str = "127.0.0.1", tries: int = 50) -> int:
    """A port P where nothing listens now on P or P + 1 (another process may still take one first)."""
    for _ in range(tries):
        with socket.socket() as first:
            first.bind((address, 0))
            port = first.getsockname()[1]
            with socket.socket() as second:
                try:
                    second.bind((address, port + 1))
                except OSError:
                    continue
                return port
    raise AssertionError(f"no two free ports in a row on {address} after {tries} tries")
