"""Topology generators: leaf-spine (one plane) and multi-rail / dual-plane."""

from __future__ import annotations

from typing import Any

from clockfabric.errors import ClockfabricError
from clockfabric.topology.load import DEFAULT_BUFFER, DEFAULT_MTU, parse
from clockfabric.topology.model import Topology
from clockfabric.topology.rates import format_rate, parse_rate


def leafspine(hosts: int, leaves: int, spines: int, *, host_rate: str = "100mbit",
              fabric_rate: str | None = None, buffer: int = DEFAULT_BUFFER, mtu: int = DEFAULT_MTU,
              name: str | None = None) -> Topology:
    """H hosts spread evenly under L leaves, every leaf cabled to every one of S spines."""
    return multirail(hosts, 1, leaves, spines, host_rate=host_rate, fabric_rate=fabric_rate,
                     buffer=buffer, mtu=mtu, name=name or f"leafspine-{hosts}")


def multirail(hosts: int, planes: int, leaves: int, spines: int, *, host_rate: str = "100mbit",
              fabric_rate: str | None = None, buffer: int = DEFAULT_BUFFER, mtu: int = DEFAULT_MTU,
              name: str | None = None) -> Topology:
    """NIC r of every host on plane r; each plane its own leaf-spine of L leaves and S spines.

    With one plane the switches are named leaf0, spine0; with more, p0-leaf0, p1-spine0.
    """
    for label, value, low in (("hosts", hosts, 1), ("planes", planes, 1), ("leaves", leaves, 1),
                              ("spines", spines, 0)):
        if value < low:
            raise ClockfabricError(f"--{label} must be at least {low} (got {value})")
    if leaves > hosts:
        raise ClockfabricError(f"--leaves ({leaves}) must not exceed --hosts ({hosts}): a leaf needs a host")
    if leaves > 1 and spines == 0:
        raise ClockfabricError("more than one leaf needs at least one spine to join them; set --spines")
    host_bps = parse_rate(host_rate)
    fabric_bps = parse_rate(fabric_rate) if fabric_rate else host_bps

    def sw(plane: int, role: str, i: int) -> str:
        return f"{role}{i}" if planes == 1 else f"p{plane}-{role}{i}"

    data: dict[str, Any] = {
        "name": name or (f"dualplane-{hosts}" if planes == 2 else f"multirail{planes}-{hosts}"),
        "meta": {"generator": "leafspine" if planes == 1 else "multirail", "hosts": hosts, "planes": planes,
                 "leaves": leaves, "spines": spines},
        "defaults": {"rate": format_rate(host_bps), "buffer": buffer},
        "mtu": mtu,
        "hosts": [{"name": f"h{i}", "nics": [{"name": f"eth{r}", "plane": r} for r in range(planes)]}
                  for i in range(hosts)],
        "switches": [{"name": sw(r, role, i), "role": role, "plane": r}
                     for r in range(planes) for role, n in (("leaf", leaves), ("spine", spines)) for i in range(n)],
        "links": [],
    }
    for r in range(planes):
        data["links"] += [{"a": f"h{i}:eth{r}", "b": sw(r, "leaf", i * leaves // hosts)} for i in range(hosts)]
        data["links"] += [{"a": sw(r, "leaf", j), "b": sw(r, "spine", k), "rate": format_rate(fabric_bps)}
                          for j in range(leaves) for k in range(spines)]
    return parse(data, f"generated {data['name']}")
