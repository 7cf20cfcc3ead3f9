"""Network namespaces from inside this process, without a fork per namespace.

The calling thread steps into a namespace (setns), opens what it needs (a netlink socket,
a /proc/sys file, a UDP socket) and steps back: whatever it opened stays bound to that
namespace. That is how one process drives a 76-namespace lab in a fraction of a second.
"""

from __future__ import annotations

import ctypes
import os
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from pyroute2 import IPRoute, netns

NETNS_DIR = Path("/run/netns")
CLONE_NEWNET = 0x40000000
_libc = ctypes.CDLL(None, use_errno=True)


def exists(name: str) -> bool:
    return (NETNS_DIR / name).exists()


def listed(prefix: str = "") -> list[str]:
    try:
        return sorted(n for n in os.listdir(NETNS_DIR) if n.startswith(prefix))
    except FileNotFoundError:
        return []


@contextmanager
def _returning() -> Iterator[None]:
    """Whatever the block does to this thread's namespace is undone after it.

    setns() moves only the calling thread, so each thread saves its own way back
    (pyroute2's pushns/popns share one stack between threads, which is not safe)."""
    home = os.open("/proc/thread-self/ns/net", os.O_RDONLY)
    try:
        yield
    finally:
        try:
            netns.setns(home)
        finally:
            os.close(home)


@contextmanager
def entered(name: str) -> Iterator[None]:
    """Run the block with this thread inside namespace `name`."""
    with _returning():
        netns.setns(name, flags=0)
        yield


def create(name: str) -> None:
    """Create a named namespace (like `ip netns add`), failing if it exists."""
    if exists(name):
        raise FileExistsError(name)
    with _returning():
        if _libc.unshare(CLONE_NEWNET) != 0:  # a new namespace for this thread only...
            raise OSError(ctypes.get_errno(), f"cannot create namespace {name}")
        netns.attach(name, "thread-self")  # ...bound at /run/netns/<name> like `ip netns add`


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
