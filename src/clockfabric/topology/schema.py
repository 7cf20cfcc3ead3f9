"""The topology file's schema: every key it takes, defined once.

The loader rejects any key this does not name (with its line and the nearest known key),
and docs/topology.schema.json is this same definition written out as JSON Schema, so an
editor or CI can check a fleet file before clockfabric reads it. Regenerate that file with
`python -m clockfabric.topology.schema > docs/topology.schema.json`; a unit test fails
while the two differ.
"""

from __future__ import annotations

import difflib
import json
from typing import Any

import yaml

from clockfabric.topology.model import SWITCH_ROLES

# A node name: DNS labels (letters, digits, '-', and '_' as lab names have always allowed)
# joined by dots, so hosts can carry their real names (gpu-017.rack3.example.com).
LABEL = r"[A-Za-z0-9][A-Za-z0-9_-]{0,62}"
NODE_NAME = rf"^(?=.{{1,253}}$){LABEL}(\.{LABEL})*$"
TOPOLOGY_NAME = r"^[A-Za-z0-9][A-Za-z0-9_-]{0,30}$"
NIC_NAME = r"^[A-Za-z][A-Za-z0-9_.-]{0,14}$"  # a Linux interface name: 15 characters at most
# A switch port as the switch's own OS names it: swp1, swp1s0, Ethernet1/1, et-0/0/1, Eth1/1.100
PORT_NAME = r"^[A-Za-z][A-Za-z0-9_./-]{0,63}$"
PLANES = 64


def _object(properties: dict[str, dict], *, required: tuple[str, ...] = (), what: str = "") -> dict:
    out: dict[str, Any] = {"type": "object", "properties": properties, "additionalProperties": False}
    if required:
        out["required"] = list(required)
    if what:
        out["description"] = what
    return out


def _list(items: dict, what: str) -> dict:
    return {"type": "array", "items": items, "description": what}


def _text(what: str, pattern: str | None = None) -> dict:
    out = {"type": "string", "description": what}
    if pattern:
        out["pattern"] = pattern
    return out


def _count(what: str, low: int, high: int) -> dict:
    return {"type": "integer", "minimum": low, "maximum": high, "description": what}


RATE = {"type": ["string", "number"], "description": "bits per second: 1gbit, 200mbit, 10Gbps, or a number"}
PLANE = _count("the plane (rail) this NIC or switch is on", 0, PLANES - 1)
BUFFER = _count("full-sized frames each port of the link queues", 1, 100_000)
DSCP = {"type": ["integer", "array"], "items": {"type": "integer", "minimum": 0, "maximum": 63},
        "minimum": 0, "maximum": 63, "description": "a DSCP (0..63) or a list of them"}
PERCENT = {"type": ["string", "number"], "description": "a percent of the link, like 5%"}

NIC = _object({
    "name": _text("the Linux interface name, like eth0", NIC_NAME),
    "plane": PLANE,
    "address": _text("the NIC's IPv4 address with its prefix, like 10.64.0.1/31", "^[0-9.]+/[0-9]+$"),
    "address6": _text("the NIC's IPv6 address with its prefix, like fd00:64::1/127", "^[0-9A-Fa-f:.]+/[0-9]+$"),
}, required=("name",), what="one NIC; without addresses it takes the address plan's")

# How `clockfabric audit --hosts` reaches the hosts (audit/ssh.py reads it): fleet-wide and per host
SSH = _object({
    "user": _text("the login user"),
    "port": _count("the SSH port", 1, 65535),
    "key": _text("a private key file, relative to this file"),
    "known_hosts": _text("a known_hosts file, relative to this file"),
    "python": _text("the command that runs Python on the host, like sudo -n /opt/clockfabric/bin/python"),
}, what="SSH options for the audit")

HOST = _object({
    "name": _text("the host's name: its DNS name may have dots", NODE_NAME),
    "address": _text("the host's stable IPv4 address (default: the next free one of addressing.hosts)",
                     "^[0-9.]+$"),
    "address6": _text("the host's stable IPv6 address", "^[0-9A-Fa-f:.]+$"),
    "nics": _list(NIC, "the host's fabric NICs, one per plane (default: eth0 on plane 0)"),
    "ssh": SSH,
}, required=("name",))

SWITCH = _object({
    "name": _text("the switch's name: its DNS name may have dots", NODE_NAME),
    "role": {"enum": list(SWITCH_ROLES), "description": "leaf (hosts attach), spine or core"},
    "plane": PLANE,
}, required=("name",))

ENDPOINT = _text("NODE:PORT, like h0:eth0 or leaf0:Ethernet1/1; a bare switch name takes its next free swpN, "
                 "a bare host name its only NIC")
LINK = _object({"a": ENDPOINT, "b": ENDPOINT, "rate": RATE, "buffer": BUFFER}, required=("a", "b"))

SCHEMA: dict[str, Any] = {
    "$schema": "https://json-schema.org/draft/2020-12/schema",
    "title": "clockfabric topology",
    "description": "A fabric: hosts with NICs on planes, switches, and the links between their ports.",
    **_object({
        "name": _text("the topology's name", TOPOLOGY_NAME),
        "meta": {"type": "object", "description": "free-form notes kept for people: the generator and its arguments"},
        "addressing": _object({
            "hosts": _text("IPv4 prefix the hosts' addresses come from (default 10.0.0.0/16)"),
            "fabric": _text("IPv4 prefix, /16 or larger, the address plan cuts into per-plane link /31s "
                            "(default 10.64.0.0/10)"),
        }),
        "defaults": _object({"rate": RATE, "buffer": BUFFER}, what="what a link without its own takes"),
        "mtu": _count("every cable's MTU in bytes", 1280, 9216),
        "classes": _object({
            "priority": _object({"dscp": DSCP, "cap": PERCENT}),
            "collective": _object({"dscp": DSCP, "share": PERCENT}),
        }, what="the traffic classes every port serves; best-effort takes every other DSCP"),
        "hosts": _list(HOST, "the hosts"),
        "switches": _list(SWITCH, "the switches"),
        "links": _list(LINK, "the cables, each between two ports"),
        "ssh": SSH,
    }),
}

Lines = dict[tuple, int]  # a key's path (keys and list indexes) -> its line in the file, from 1


def key_lines(text: str) -> Lines:
    """Where each mapping key of a YAML document sits; {} for text that does not compose."""
    try:
        root = yaml.compose(text, Loader=yaml.SafeLoader)
    except yaml.YAMLError:
        return {}
    out: Lines = {}

    def walk(node: yaml.Node, path: tuple) -> None:
        if isinstance(node, yaml.MappingNode):
            for key, value in node.value:
                here = (*path, key.value)
                out[here] = key.start_mark.line + 1
                walk(value, here)
        elif isinstance(node, yaml.SequenceNode):
            for i, item in enumerate(node.value):
                walk(item, (*path, i))

    if root is not None:
        walk(root, ())
    return out


def unknown_keys(data: object, lines: Lines | None = None) -> list[str]:
    """One line for each key the schema does not name, with where it is and what was meant."""
    out: list[str] = []

    def walk(value: object, schema: dict, path: tuple) -> None:
        if isinstance(value, dict) and schema.get("additionalProperties") is False:
            known = list(schema["properties"])
            for key, inner in value.items():
                if key in schema["properties"]:
                    walk(inner, schema["properties"][key], (*path, key))
                    continue
                near = difflib.get_close_matches(str(key), known, n=1, cutoff=0.6)
                hint = f"did you mean {near[0]}?" if near else f"known keys: {', '.join(known)}"
                line = (lines or {}).get((*path, key))
                where = f"line {line}: " if line else ""
                out.append(f"{where}{_label(path)}unknown key {key!r}; {hint}")
        elif isinstance(value, list) and "items" in schema:
            for i, item in enumerate(value):
                walk(item, schema["items"], (*path, i))

    walk(data, SCHEMA, ())
    return out


def _label(path: tuple) -> str:
    """hosts[2].nics[0]: for a key's message."""
    text = "".join(f"[{p}]" if isinstance(p, int) else f".{p}" for p in path).lstrip(".")
    return f"{text}: " if text else ""


def dumps() -> str:
    return json.dumps(SCHEMA, indent=2) + "\n"


if __name__ == "__main__":
    print(dumps(), end="")
