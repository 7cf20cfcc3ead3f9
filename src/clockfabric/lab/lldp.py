"""The lab's switches speak LLDP: every switch port announces "switch S, port P" like a real
switch does, so hosts can learn where each NIC is cabled. A thread in whichever process
needs it (the audit) holds a raw socket in every switch namespace and sends every interval;
under `monitor`, each switch agent announces its own ports instead."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

from clockfabric import lldp
from clockfabric.lab import netns
from clockfabric.lab.naming import link_alias
from clockfabric.lab.state import Lab


def speaker(lab: Lab, interval_s: float = 0.5) -> lldp.Announcer:
    """An announcer for every switch port of the lab, not yet started."""
    announcer = lldp.Announcer(interval_s)
    topo = lab.topology
    try:
        for lk in topo.links:
            for port in (lk.a, lk.b):
                if port.node in topo.switches:
                    with netns.entered(lab.ns(port.node)):
                        announcer.add(port.iface, port.node, port.iface, system=port.node,
                                      description=link_alias(lab.name, lk.name))
    except BaseException:
        announcer.close()
        raise
    return announcer


@contextmanager
def speaking(lab: Lab) -> Iterator[None]:
    """The lab's switches announce themselves while the block runs (real switches always do)."""
    announcer = speaker(lab)
    announcer.start()
    try:
        yield
    finally:
        announcer.stop()
