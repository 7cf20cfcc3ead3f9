"""Hosts, switches and link ends from a topology file's entries, each problem one line."""

from __future__ import annotations

import ipaddress
import re
from collections.abc import Iterator, Mapping

from clockfabric.topology.model import SWITCH_ROLES, Host, Nic, Port, Switch
from clockfabric.topology.schema import NIC_NAME, NODE_NAME, PLANES, PORT_NAME

NAME = re.compile(NODE_NAME)
NIC = re.compile(NIC_NAME)
PORT = re.compile(PORT_NAME)
NAME_RULE = "use DNS labels (letters, digits, '-', '_') joined by dots, at most 253 characters"
AutoPorts = Mapping[str, Iterator[str]]  # switch -> its free swpN names, for links that name no port


def host(raw: object, i: int, free: Iterator[ipaddress.IPv4Address], problems: list[str]) -> Host | None:
    if not isinstance(raw, dict) or "name" not in raw:
        problems.append(f"host {i + 1}: needs a name, like {{name: h0, nics: [{{name: eth0, plane: 0}}]}}")
        return None
    name = str(raw["name"])
    if not NAME.match(name):
        problems.append(f"host {name!r}: {NAME_RULE}")
    label = f"host {name!r}"
    address = _address(raw, "address", ipaddress.IPv4Address, label, problems)
    address6 = _address(raw, "address6", ipaddress.IPv6Address, label, problems)
    nics = []
    for n in raw.get("nics") or [{"name": "eth0", "plane": 0}]:
        nic = _nic(n, label, problems)
        if nic is not None:
            nics.append(nic)
    if len({n.name for n in nics}) != len(nics):
        problems.append(f"{label}: two NICs share a name")
    # an address that did not parse still gets one, so the host's links do not cascade into more errors
    return Host(name, address or next(free, ipaddress.IPv4Address(0)), tuple(nics), address6)


def _nic(raw: object, host: str, problems: list[str]) -> Nic | None:
    if not isinstance(raw, dict) or not NIC.match(str(raw.get("name", ""))):
        problems.append(f"{host}: NIC {raw!r} needs a Linux interface name like eth0 (at most 15 characters)")
        return None
    name, plane = str(raw["name"]), raw.get("plane", 0)
    if not isinstance(plane, int) or isinstance(plane, bool) or not 0 <= plane < PLANES:
        problems.append(f"{host}: NIC {name} plane {plane!r} must be 0..{PLANES - 1}")
        return None
    label = f"{host}: NIC {name}"
    return Nic(name, plane, _address(raw, "address", ipaddress.IPv4Interface, label, problems),
               _address(raw, "address6", ipaddress.IPv6Interface, label, problems))


_EXAMPLES = {ipaddress.IPv4Address: "10.0.0.7", ipaddress.IPv6Address: "fd00::7",
             ipaddress.IPv4Interface: "10.64.0.1/31", ipaddress.IPv6Interface: "fd00:64::1/127"}
_OTHER_KEY = {"address": "address6", "address6": "address"}


def _address(raw: dict, key: str, kind, label: str, problems: list[str]):
    """raw[key] as `kind` (an address, or an interface: an address with its prefix); None if absent or wrong."""
    if key not in raw:
        return None
    text = str(raw[key])
    version = 4 if kind in (ipaddress.IPv4Address, ipaddress.IPv4Interface) else 6
    with_prefix = kind in (ipaddress.IPv4Interface, ipaddress.IPv6Interface)
    try:
        if with_prefix and "/" not in text:
            raise ValueError(text)
        return kind(text)
    except ValueError:
        hint = f"write it like {_EXAMPLES[kind]}"
        try:
            if ipaddress.ip_interface(text).version != version:
                hint = f"that is IPv{10 - version}: write it as {_OTHER_KEY[key]}"
        except ValueError:
            pass
        prefix = " with its prefix" if with_prefix else ""
        problems.append(f"{label}: {key} {raw[key]!r} is not an IPv{version} address{prefix}; {hint}")
        return None


def switch(raw: object, i: int, problems: list[str]) -> Switch | None:
    if not isinstance(raw, dict) or "name" not in raw:
        problems.append(f"switch {i + 1}: needs a name, like {{name: leaf0, role: leaf}}")
        return None
    name, role, plane = str(raw["name"]), str(raw.get("role", "leaf")), raw.get("plane", 0)
    if not NAME.match(name):
        problems.append(f"switch {name!r}: {NAME_RULE}")
    if role not in SWITCH_ROLES:
        problems.append(f"switch {name!r}: role {role!r} must be one of {', '.join(SWITCH_ROLES)}")
    if not isinstance(plane, int) or isinstance(plane, bool) or not 0 <= plane < PLANES:
        problems.append(f"switch {name!r}: plane {plane!r} must be 0..{PLANES - 1}")
        plane = 0
    return Switch(name, role, plane)


def endpoint(text: str, hosts: dict[str, Host], switches: dict[str, Switch], auto_ports: AutoPorts,
             label: str, problems: list[str]) -> Port | None:
    """One end of a link: host:nic (a bare host: its only NIC) or switch:port (a bare switch: its next swpN)."""
    node, _, iface = text.partition(":")
    if node in hosts:
        nics = hosts[node].nics
        if not iface:
            if len(nics) != 1:
                problems.append(f"{label}: host {node!r} has {len(nics)} NICs; name one, like {node}:{nics[0].name}")
                return None
            iface = nics[0].name
        if iface not in {n.name for n in nics}:
            problems.append(f"{label}: host {node!r} has no NIC {iface!r}")
            return None
        return Port(node, iface)
    if node in switches:
        if not iface:
            iface = next(auto_ports[node])
        elif not PORT.match(iface):
            problems.append(f"{label}: port name {iface!r} must start with a letter and hold letters, digits "
                            "and '_-./' (like swp1, swp1s0 or Ethernet1/1), at most 64 characters")
            return None
        return Port(node, iface)
    problems.append(f"{label}: unknown node {node!r}; define it under hosts or switches")
    return None
