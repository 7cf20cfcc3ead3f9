"""Network namespaces from inside this process, without a fork per namespace.

The calling thread steps into a namespace (setns), opens what it needs (a netlink socket,
a /proc/sys file, a UDP socket) and steps back: whatever it opened stays bound to that
namespace. That is how one process drives a 76-namespace lab in a fraction of a second.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from pyroute2 import IPRoute, netns

NETNS_DIR = Path("/run/netns")


def exists(name: str) -> bool:
    return (NETNS_DIR / name).exists()


def listed(prefix: str = "") -> list[str]:
    try:
        return sorted(n for n in os.listdir(NETNS_DIR) if n.startswith(prefix))
    except FileNotFoundError:
        return []


@contextmanager
def entered(name: str) -> Iterator[None]:
    """Run the block with this thread inside namespace `name`."""
    netns.pushns(name)
    try:
        yield
    finally:
        netns.popns()


def create(name: str) -> None:
    """Create a named namespace (like `ip netns add`), failing if it exists."""
    if exists(name):
        raise FileExistsError(name)
    netns.pushns()
    try:
        netns._create(name)  # unshare + bind mount, in this thread only; popns() returns us
    finally:
        netns.popns()


def remove(name: str) -> None:
    try:
        netns.remove(name)
    except FileNotFoundError:
        pass


def ipr(name: str) -> IPRoute:
    """A netlink socket bound to namespace `name`."""
    with entered(name):
        return IPRoute()


def write_sysctls(name: str, values: dict[str, str | int]) -> None:
    """Set net.* sysctls inside one namespace (each namespace has its own)."""
    with entered(name):
        for key, value in values.items():
            Path("/proc/sys", *key.split(".")).write_text(f"{value}\n")


def pids(name: str) -> list[int]:
    """Processes whose network namespace is `name` (like `ip netns pids`)."""
    try:
        target = os.stat(NETNS_DIR / name)
    except FileNotFoundError:
        return []
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            st = os.stat(f"/proc/{entry}/ns/net")
        except OSError:
            continue
        if (st.st_ino, st.st_dev) == (target.st_ino, target.st_dev):
            found.append(int(entry))
    return found
