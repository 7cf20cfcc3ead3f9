"""Named network namespaces (`ip netns`), entered from inside this process.

The calling thread steps into a namespace (setns), opens what it needs (a netlink socket,
a /proc/sys file, a UDP socket) and steps back: whatever it opened stays bound to that
namespace. A host may keep links in a named namespace; the lab keeps whole hosts in them.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import contextmanager

from pyroute2 import IPRoute, netns


@contextmanager
def returning() -> Iterator[None]:
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
    with returning():
        netns.setns(name, flags=0)
        yield


def ipr(name: str) -> IPRoute:
    """A netlink socket bound to namespace `name`."""
    with entered(name):
        return IPRoute()
