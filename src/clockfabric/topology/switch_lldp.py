"""A switch's LLDP table from its lldpd, as SONiC, Cumulus and any Linux switch run it: `lldpcli show
neighbors` printed as JSON (`-f json`, and the older `-f json0`) or as key=value lines (`-f
keyvalue`), and `lldpcli show interfaces`, the switch's own side (its system name, the port ID each
port announces). Pure but for `read_lldpcli`, which is handed how to run a command on the switch:
text in, a SwitchTable (switch_table.py) out, or one ClockfabricError line saying what the text is not.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from dataclasses import dataclass, field

from clockfabric import wirejson
from clockfabric.errors import ClockfabricError
from clockfabric.topology.switch_snmp import SNMP_LINE, parse_snmpwalk
from clockfabric.topology.switch_table import Neighbour, Run, SwitchTable, add, check_size, checked, last_line

NAMED_PORT_IDS = {"ifname", "local", "ifalias"}  # lldpd's port ID types that are names, not MACs or addresses


@dataclass
class _Record:
    """One interface's record, whatever the format: a neighbour (`show neighbors`) or the switch's
    own side of the port (`show interfaces`)."""
    ifname: str
    own: bool = False  # a `show interfaces` record
    chassis_name: str = ""
    chassis_id: str = ""
    port_type: str = ""
    port_id: str = ""
    port_descr: str = ""
    capabilities: dict[str, bool] = field(default_factory=dict)


# ---- lldpcli ------------------------------------------------------------------------------------
def parse_lldpcli(text: str, where: str = "lldpcli output") -> SwitchTable:
    """`lldpcli show neighbors` (and, in the same text or not, `show interfaces`), as JSON, json0 or
    keyvalue; several documents one after another are read in turn."""
    check_size(text, where)
    stripped = text.lstrip()
    if not stripped:
        return SwitchTable(None, ())
    records = list(_json_records(stripped, where) if stripped[0] == "{" else _keyvalue_records(stripped, where))
    return _table(records)


def _json_records(text: str, where: str) -> Iterator[_Record]:
    if not wirejson.depth_within(text):
        raise ClockfabricError(f"{where}: JSON nested deeper than lldpcli prints it")
    decoder = json.JSONDecoder()
    at = 0
    while at < len(text):
        try:
            doc, end = decoder.raw_decode(text, at)
        except ValueError as e:
            raise ClockfabricError(f"{where}: not lldpcli's JSON ({e})") from None
        if not isinstance(doc, dict) or "lldp" not in doc:
            raise ClockfabricError(f"{where}: JSON without lldpcli's top-level \"lldp\" key")
        yield from _json_document(doc["lldp"], where)
        at = end
        while at < len(text) and text[at].isspace():
            at += 1


def _json_document(lldp: object, where: str) -> Iterator[_Record]:
    if isinstance(lldp, list):  # json0: every value a list of objects
        for part in lldp:
            for iface in _dict(part, where).get("interface", []):
                yield _json0_interface(_dict(iface, where), where)
        return
    interfaces = _dict(lldp, where).get("interface", {})
    # json: one object of interfaces, or a list of one-key objects where a name repeats or there are several
    for entry in interfaces if isinstance(interfaces, list) else [interfaces]:
        for ifname, body in _dict(entry, where).items():
            yield _json_interface(str(ifname), _dict(body, where), where)


def _json_interface(ifname: str, body: dict, where: str) -> _Record:
    rec = _Record(ifname, own="via" not in body)
    chassis = _dict(body.get("chassis", {}), where)
    if isinstance(chassis.get("id"), dict) and "type" in chassis["id"]:  # a chassis with no system name
        rec.chassis_id = _text(chassis["id"].get("value"))
    elif chassis:
        name, inner = next(iter(chassis.items()))
        inner = _dict(inner, where)
        rec.chassis_name = str(name)
        rec.chassis_id = _text(_dict(inner.get("id", {}), where).get("value"))
        rec.capabilities = _capabilities(inner.get("capability", []), where)
    port = _dict(body.get("port", {}), where)
    port_id = _dict(port.get("id", {}), where)
    rec.port_type, rec.port_id = _text(port_id.get("type")), _text(port_id.get("value"))
    rec.port_descr = _text(port.get("descr"))
    return rec


def _json0_interface(body: dict, where: str) -> _Record:
    def first(obj: dict, key: str) -> dict:
        values = obj.get(key) or [{}]
        return _dict(values[0] if isinstance(values, list) else values, where)

    rec = _Record(_text(body.get("name")), own="via" not in body)
    chassis = first(body, "chassis")
    rec.chassis_name = _text(first(chassis, "name").get("value"))
    rec.chassis_id = _text(first(chassis, "id").get("value"))
    rec.capabilities = _capabilities(chassis.get("capability", []), where)
    port = first(body, "port")
    port_id = first(port, "id")
    rec.port_type, rec.port_id = _text(port_id.get("type")), _text(port_id.get("value"))
    rec.port_descr = _text(first(port, "descr").get("value"))
    return rec


def _capabilities(raw: object, where: str) -> dict[str, bool]:
    items = raw if isinstance(raw, list) else [raw]
    return {str(c.get("type")): c.get("enabled") is True for c in (_dict(i, where) for i in items)}


# lldpcli's key=value names the port ID by its type: port.ifname=, port.mac=, port.local=, ...
_KV_PORT_ID = re.compile(r"^port\.(ifname|local|ifalias|mac|ip|unhandled)$")
_KV_CHASSIS_ID = re.compile(r"^chassis\.(mac|local|ifname|ifalias|ip|unhandled)$")
_KV_CAPABILITY = re.compile(r"^chassis\.([A-Za-z]+)\.enabled$")
# what follows IFNAME in a record's keys (a key under any other word starts another interface's record)
_KV_ROOTS = {"via", "status", "rid", "age", "chassis", "port", "ttl", "vlan", "ppvid", "pi", "lldp-med",
             "unknown-tlvs"}


def _keyvalue_records(text: str, where: str) -> Iterator[_Record]:
    """Lines `lldp.IFNAME.KEY=VALUE`: a neighbour's record starts at its `via` line, an interface's
    own at its `status` line (IFNAME may hold dots: the record's first line says where it ends)."""
    rec: _Record | None = None
    for number, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        key, sep, value = line.partition("=")
        if not sep or not key.startswith("lldp."):
            raise ClockfabricError(f"{where}: line {number} is not lldpcli's key=value (lldp.IFNAME.KEY=VALUE)")
        if rec is not None and key.startswith(f"lldp.{rec.ifname}."):
            rest = key[len(f"lldp.{rec.ifname}."):]
            if rest.split(".", 1)[0] in _KV_ROOTS and rest not in ("via", "status"):
                _keyvalue_field(rec, rest, value)
                continue
        first = next((f for f in ("via", "status") if key.endswith(f".{f}")), None)
        if first is None:
            raise ClockfabricError(f"{where}: line {number} comes before its interface's first "
                                   "line (via= or status=)")
        if rec is not None:
            yield rec
        rec = _Record(key[len("lldp."):-len(first) - 1], own=first == "status")
    if rec is not None:
        yield rec


def _keyvalue_field(rec: _Record, key: str, value: str) -> None:
    if key == "chassis.name":
        rec.chassis_name = value
    elif _KV_CHASSIS_ID.match(key):
        rec.chassis_id = value
    elif match := _KV_PORT_ID.match(key):
        rec.port_type, rec.port_id = match.group(1), value
    elif key == "port.descr":
        rec.port_descr = value
    elif match := _KV_CAPABILITY.match(key):
        rec.capabilities[match.group(1)] = value == "on"


def _table(records: list[_Record]) -> SwitchTable:
    """Records to a table: the switch's own records name its ports and itself; the others are its neighbours."""
    own = [r for r in records if r.own]
    announced = {r.ifname: r.port_id for r in own if r.port_type in NAMED_PORT_IDS and r.port_id}
    system = next((r.chassis_name for r in own if r.chassis_name), None)
    neighbours: list[Neighbour] = []
    left_out: list[str] = []
    for r in (r for r in records if not r.own):
        node = r.chassis_name or r.chassis_id
        node_port = r.port_id if r.port_type in NAMED_PORT_IDS and r.port_id else (r.port_descr or r.port_id)
        caps = [r.capabilities[c] for c in ("Bridge", "Router") if c in r.capabilities]
        add(neighbours, left_out, announced.get(r.ifname, r.ifname), node, node_port, any(caps) if caps else None)
    return checked(system, neighbours, left_out)


# ---- lldpcli's output, or snmpwalk's ------------------------------------------------------------
def parse_table(text: str, where: str) -> SwitchTable:
    """lldpcli's output (JSON, json0, keyvalue) or snmpwalk's, told apart by their first line."""
    first = text.lstrip().split("\n", 1)[0]
    if first.startswith("{") or first.startswith("lldp."):
        return parse_lldpcli(text, where)
    if SNMP_LINE.match(first):
        return parse_snmpwalk(text, where)
    if not first:
        return SwitchTable(None, ())
    raise ClockfabricError(f"{where}: neither lldpcli's output (-f json or -f keyvalue) nor snmpwalk's (OID = "
                           "TYPE: VALUE lines) on its first line")


def read_lldpcli(run: Run, lldpcli: list[str], where: str) -> SwitchTable:
    """A switch's table from its lldpd: `show neighbors`, and `show interfaces` for its own names
    where its lldpd has that command (older ones do not: its ports keep their interface names)."""
    code, out, said = run([*lldpcli, "-f", "json", "show", "neighbors"])
    if code != 0:
        why = last_line(said, code)
        raise ClockfabricError(f"{where}: {' '.join(lldpcli)} show neighbors failed: {why} (is lldpd "
                               "running there, and may this user read its socket? give --lldpcli 'sudo lldpcli')")
    code, own, _ = run([*lldpcli, "-f", "json", "show", "interfaces"])
    return parse_lldpcli(out + ("\n" + own if code == 0 else ""), where)


def _dict(value: object, where: str) -> dict:
    if not isinstance(value, dict):
        raise ClockfabricError(f"{where}: not lldpcli's JSON (an object was expected, found {type(value).__name__})")
    return value


def _text(value: object) -> str:
    return value if isinstance(value, str) else "" if value is None else str(value)
