"""Topology files: YAML in, a validated Topology out (or every problem, one line each)."""

from __future__ import annotations

import ipaddress
import re
from pathlib import Path as FilePath

import yaml

from clockfabric.errors import ClockfabricError
from clockfabric.topology import classes as traffic_classes
from clockfabric.topology import nodes, schema
from clockfabric.topology.model import Host, Link, Nic, Port, Switch, Topology
from clockfabric.topology.rates import RateError, format_rate, parse_rate
from clockfabric.yamlfile import read_yaml

TOPOLOGY_NAME = re.compile(schema.TOPOLOGY_NAME)
DEFAULT_HOST_POOL = "10.0.0.0/16"
DEFAULT_FABRIC_POOL = "10.64.0.0/10"
DEFAULT_RATE = "100mbit"
DEFAULT_BUFFER = 200  # full-sized frames per link direction (lab/shaping.py holds them as bytes)
DEFAULT_MTU = 1500
MTU_RANGE = (1280, 9216)  # IPv6's minimum; the largest jumbo frame switches commonly take


class TopologyError(ClockfabricError):
    def __init__(self, source: str, problems: list[str]):
        self.source, self.problems = source, problems
        super().__init__("\n".join(f"{source}: {p}" for p in problems))


def load(path: str | FilePath) -> Topology:
    path = FilePath(path)
    data = read_yaml(path, "topology")
    return parse(data, str(path), schema.key_lines(path.read_text()))


def save(topo: Topology, path: str | FilePath) -> None:
    FilePath(path).write_text(dumps(topo))


def dumps(topo: Topology) -> str:
    """YAML with one line per host, switch and link: easy to read and to diff."""
    lines = [f"name: {_q(topo.name)}"]
    if topo.meta:
        lines.append(f"meta: {_flow(topo.meta)}")
    lines += [
        f"addressing: {{hosts: {topo.host_pool}, fabric: {topo.fabric_pool}}}",
        f"defaults: {{rate: {format_rate(topo.default_rate_bps)}, buffer: {topo.default_buffer_pkts}}}",
    ]
    if topo.mtu != DEFAULT_MTU:
        lines.append(f"mtu: {topo.mtu}")
    if topo.classes is not None:
        lines.append(f"classes: {topo.classes.dumps()}")
    lines.append("hosts:")
    for h in topo.hosts.values():
        nics = ", ".join(_nic_flow(n) for n in h.nics)
        v6 = f", address6: {_q(str(h.address6))}" if h.address6 else ""
        lines.append(f"  - {{name: {_q(h.name)}, address: {h.address}{v6}, nics: [{nics}]}}")
    lines.append("switches:")
    for s in topo.switches.values():
        lines.append(f"  - {{name: {_q(s.name)}, role: {s.role}, plane: {s.plane}}}")
    lines.append("links:")
    for lk in topo.links:
        extra = f", buffer: {lk.buffer_pkts}" if lk.buffer_pkts != topo.default_buffer_pkts else ""
        lines.append(f"  - {{a: {_q(str(lk.a))}, b: {_q(str(lk.b))}, rate: {format_rate(lk.rate_bps)}{extra}}}")
    return "\n".join(lines) + "\n"


def _nic_flow(nic: Nic) -> str:
    given = "".join(f", {key}: {_q(str(value))}" for key, value in (("address", nic.address),
                                                                    ("address6", nic.address6)) if value)
    return f"{{name: {nic.name}, plane: {nic.plane}{given}}}"


def _flow(d: dict) -> str:
    return "{" + ", ".join(f"{k}: {_q(v)}" for k, v in d.items()) + "}"


def _q(value: object) -> str:
    """A scalar as YAML reads it back unchanged: names like 'on', 'null' or '007' get quotes."""
    text = str(value)
    return text if yaml.safe_load(text) == value or not isinstance(value, str) else f'"{text}"'


def parse(data: object, source: str = "topology", lines: schema.Lines | None = None) -> Topology:
    """Build a Topology from parsed YAML, or raise TopologyError listing every problem; `lines`
    (schema.key_lines of the file's text) puts line numbers on unknown keys."""
    if not isinstance(data, dict):
        raise TopologyError(source, ["expected a mapping with name, hosts, switches and links"])
    problems = schema.unknown_keys(data, lines)

    def section(key: str) -> list:
        value = data.get(key) or []
        if not isinstance(value, list):
            problems.append(f"'{key}' must be a list")
            return []
        return value

    name = str(data.get("name", FilePath(source).stem))
    if not TOPOLOGY_NAME.match(name):
        problems.append(f"name {name!r}: use letters, digits, '-' and '_' (at most 31)")

    addressing = _mapping(data, "addressing", "{hosts: 10.0.0.0/16, fabric: 10.64.0.0/10}", problems)
    pools = {}
    for key, default in (("hosts", DEFAULT_HOST_POOL), ("fabric", DEFAULT_FABRIC_POOL)):
        try:
            pools[key] = ipaddress.IPv4Network(str(addressing.get(key, default)))
        except ValueError as e:
            problems.append(f"addressing.{key}: {e}; write a prefix like {default}")
            pools[key] = ipaddress.IPv4Network(default)
    if pools["fabric"].prefixlen > 16:
        problems.append("addressing.fabric must be /16 or larger (each plane takes a slice of it)")

    defaults = _mapping(data, "defaults", "{rate: 1gbit, buffer: 200}", problems)
    try:
        default_rate = parse_rate(defaults.get("rate", DEFAULT_RATE))
    except RateError as e:
        problems.append(f"defaults: {e}")
        default_rate = parse_rate(DEFAULT_RATE)
    default_buffer = _buffer(defaults.get("buffer", DEFAULT_BUFFER), "defaults", problems)
    mtu = _mtu(data.get("mtu", DEFAULT_MTU), problems)
    classes = traffic_classes.parse(data["classes"], problems) if "classes" in data else None

    hosts: dict[str, Host] = {}
    raw_hosts = section("hosts")
    taken = {str(h["address"]) for h in raw_hosts if isinstance(h, dict) and "address" in h}
    free = (a for a in pools["hosts"].hosts() if str(a) not in taken)
    for i, raw in enumerate(raw_hosts):
        host = nodes.host(raw, i, free, problems)
        if host is None:
            continue
        if host.name in hosts:
            problems.append(f"host {host.name!r} is defined twice; give each host its own name")
        hosts[host.name] = host

    switches: dict[str, Switch] = {}
    for i, raw in enumerate(section("switches")):
        sw = nodes.switch(raw, i, problems)
        if sw is None:
            continue
        if sw.name in switches or sw.name in hosts:
            problems.append(f"node {sw.name!r} is defined twice; give each node its own name")
        switches[sw.name] = sw

    links: list[Link] = []
    raw_links = section("links")
    named = {str(raw[k]) for raw in raw_links if isinstance(raw, dict) for k in ("a", "b") if k in raw}
    auto_ports = {s: (f"swp{k}" for k in range(1, 100_000) if f"{s}:swp{k}" not in named) for s in switches}
    used_ports: set[Port] = set()
    for i, raw in enumerate(raw_links):
        if not isinstance(raw, dict) or "a" not in raw or "b" not in raw:
            problems.append(f"link {i + 1}: needs 'a' and 'b' endpoints, like {{a: h0:eth0, b: leaf0}}")
            continue
        label = f"link {i + 1} ({raw['a']} -- {raw['b']})"
        ends = [nodes.endpoint(str(raw[k]), hosts, switches, auto_ports, label, problems) for k in ("a", "b")]
        try:
            rate = parse_rate(raw.get("rate", default_rate))
        except RateError as e:
            problems.append(f"{label}: {e}")
            continue
        buffer = _buffer(raw.get("buffer", default_buffer), label, problems)
        a, b = ends
        if a is None or b is None:
            continue
        if a.node == b.node:
            problems.append(f"{label}: a link must join two different nodes")
            continue
        for port in (a, b):
            if port in used_ports:
                problems.append(f"{label}: port {port} is already cabled; each port takes one link")
            used_ports.add(port)
        links.append(Link(a, b, rate, buffer))

    topo = Topology(name, hosts, switches, links, pools["hosts"], pools["fabric"],
                    default_rate, default_buffer, dict(data.get("meta") or {}), mtu, classes)
    if not problems:
        from clockfabric.topology.validate import problems as semantic_problems

        problems += semantic_problems(topo)
    if problems:
        raise TopologyError(source, problems)
    return topo


def _mapping(data: dict, key: str, example: str, problems: list[str]) -> dict:
    value = data.get(key) or {}
    if not isinstance(value, dict):
        problems.append(f"'{key}' must be a mapping, like {key}: {example}")
        return {}
    return value


def _buffer(value: object, label: str, problems: list[str]) -> int:
    if isinstance(value, int) and not isinstance(value, bool) and 1 <= value <= 100_000:
        return value
    problems.append(f"{label}: buffer {value!r} must be a count of full-sized frames from 1 to 100000")
    return DEFAULT_BUFFER


def _mtu(value: object, problems: list[str]) -> int:
    low, high = MTU_RANGE
    if isinstance(value, int) and not isinstance(value, bool) and low <= value <= high:
        return value
    problems.append(f"mtu {value!r} must be a byte count from {low} to {high} (1500, or 9000 for jumbo frames)")
    return DEFAULT_MTU
