"""The lab's namespaces: create, list, remove them, set their sysctls, find their processes
(entering one is clockfabric.netns: the product may watch a named namespace too).
"""

from __future__ import annotations

import ctypes
import os
from pathlib import Path

from pyroute2 import netns

from clockfabric.netns import entered, ipr, returning

NETNS_DIR = Path("/run/netns")
CLONE_NEWNET = 0x40000000
_libc = ctypes.CDLL(None, use_errno=True)
__all__ = ["create", "entered", "exists", "ipr", "listed", "pids", "remove", "write_sysctls"]


def exists(name: str) -> bool:
    return (NETNS_DIR / name).exists()


def listed(prefix: str = "") -> list[str]:
    try:
        return sorted(n for n in os.listdir(NETNS_DIR) if n.startswith(prefix))
    except FileNotFoundError:
        return []


def create(name: str) -> None:
    """Create a named namespace (like `ip netns add`), failing if it exists."""
    if exists(name):
        raise FileExistsError(name)
    with returning():
        if _libc.unshare(CLONE_NEWNET) != 0:  # a new namespace for this thread only...
            raise OSError(ctypes.get_errno(), f"cannot create namespace {name}")
        netns.attach(name, "thread-self")  # ...bound at /run/netns/<name> like `ip netns add`


def remove(name: str) -> None:
    try:
        netns.remove(name)
    except FileNotFoundError:
        pass


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
