"""A switch's LLDP table from SNMP: `snmpwalk` of LLDP-MIB (IEEE 802.1AB): lldpRemTable, what each
local port hears, and lldpLocPortTable and lldpLocSysName, the switch's own side (OIDs numeric, as
-On prints them, or by the MIB's names where it is loaded). Pure: text in, a SwitchTable out."""

from __future__ import annotations

import re
from collections.abc import Iterator

from clockfabric.errors import ClockfabricError
from clockfabric.topology.switch_table import Neighbour, SwitchTable, add, check_size, checked

# LLDP-MIB's LldpPortIdSubtype: interfaceAlias(1), interfaceName(5), local(7) are names
SNMP_NAMED_PORT_IDS = {1, 5, 7}
LLDP_MIB = "1.0.8802.1.1.2.1"
REM_TABLE = f"{LLDP_MIB}.4.1.1"  # lldpRemEntry: .column.timeMark.localPortNum.index
LOC_PORT_TABLE = f"{LLDP_MIB}.3.7.1"  # lldpLocPortEntry: .column.localPortNum
LOC_SYS_NAME = f"{LLDP_MIB}.3.3.0"
# lldpRemEntry's columns, and lldpLocPortEntry's, by the names a MIB-aware snmpwalk prints
REM_COLUMNS = {"lldpRemChassisId": 5, "lldpRemPortIdSubtype": 6, "lldpRemPortId": 7, "lldpRemPortDesc": 8,
               "lldpRemSysName": 9, "lldpRemSysCapEnabled": 12}
LOC_COLUMNS = {"lldpLocPortIdSubtype": 2, "lldpLocPortId": 3, "lldpLocPortDesc": 4}
BRIDGE_OR_ROUTER = 0x20 | 0x08  # LldpSystemCapabilitiesMap's bits bridge(2) and router(4), first octet
SNMP_LINE = re.compile(r"^(?P<oid>\S+)\s+=\s+(?:(?P<type>[A-Za-z0-9-]+):\s?)?(?P<value>.*)$")
_NUMERIC_OID = re.compile(r"^(?:\.?1|iso|\.?iso|SNMPv2-SMI::iso)\.(?P<rest>[0-9.]+)$")
_NAMED_OID = re.compile(r"^(?:LLDP-MIB::)?(?P<name>lldp[A-Za-z]+)\.(?P<index>[0-9.]+)$")


def parse_snmpwalk(text: str, where: str = "snmpwalk output") -> SwitchTable:
    """`snmpwalk` of LLDP-MIB (1.0.8802.1.1.2.1, or at least lldpRemTable; lldpLocPortTable and
    lldpLocSysName name the switch's own ports and itself), OIDs numeric or by the MIB's names."""
    check_size(text, where)
    values = dict(_snmp_values(text, where))
    rem: dict[tuple[str, str], dict[int, tuple[str, str]]] = {}  # (localPortNum, index) -> column -> value
    loc: dict[str, dict[int, tuple[str, str]]] = {}
    system = None
    for oid, typed in values.items():
        if oid == LOC_SYS_NAME:
            system = _snmp_text(typed)
        elif oid.startswith(REM_TABLE + "."):
            parts = oid[len(REM_TABLE) + 1:].split(".")
            if len(parts) == 4:  # column, timeMark, localPortNum, index
                rem.setdefault((parts[2], parts[3]), {})[int(parts[0])] = typed
        elif oid.startswith(LOC_PORT_TABLE + "."):
            parts = oid[len(LOC_PORT_TABLE) + 1:].split(".")
            if len(parts) == 2:
                loc.setdefault(parts[1], {})[int(parts[0])] = typed
    if not rem and not loc and system is None:
        raise ClockfabricError(f"{where}: no LLDP-MIB rows (lldpRemTable, 1.0.8802.1.1.2.1.4.1): walk "
                               "1.0.8802.1.1.2.1 on the switch")
    ports = {num: _snmp_port(cols.get(2), cols.get(3), cols.get(4)) for num, cols in loc.items()}
    neighbours: list[Neighbour] = []
    left_out: list[str] = []
    for (port_num, _index), cols in sorted(rem.items(), key=lambda kv: (int(kv[0][0]), int(kv[0][1]))):
        node = _snmp_text(cols[9]) if 9 in cols else _snmp_text(cols.get(5, ("", "")))
        caps = cols.get(12)
        switch = None if caps is None else bool(_snmp_bytes(caps)[:1] and _snmp_bytes(caps)[0] & BRIDGE_OR_ROUTER)
        add(neighbours, left_out, ports.get(port_num) or f"port {port_num}", node,
             _snmp_port(cols.get(6), cols.get(7), cols.get(8)), switch)
    return checked(system, neighbours, left_out)


def _snmp_values(text: str, where: str) -> Iterator[tuple[str, tuple[str, str]]]:
    """(numeric OID, (type, value)) per variable; a value snmpwalk wrapped over lines is joined."""
    oid, kind, value = "", "", ""
    for number, line in enumerate(text.splitlines(), 1):
        match = SNMP_LINE.match(line)
        if match is None:
            if not oid or not line.strip():
                if line.strip():
                    raise ClockfabricError(f"{where}: line {number} is not snmpwalk's OID = TYPE: VALUE")
                continue
            value += " " + line.strip()  # a long Hex-STRING goes on over the next lines
            continue
        if oid:
            yield oid, (kind, value)
        oid, kind, value = _numeric(match["oid"]), match["type"] or "", match["value"]
    if oid:
        yield oid, (kind, value)


def _numeric(oid: str) -> str:
    """An OID as dotted numbers: `.1.0.8802...`, `iso.0.8802...` and `LLDP-MIB::lldpRemSysName.0.5.1`
    all say it; one this reader has no number for is kept as printed (and read as nothing)."""
    if match := _NUMERIC_OID.match(oid):
        return "1." + match["rest"]
    if match := _NAMED_OID.match(oid):
        if (column := REM_COLUMNS.get(match["name"])) is not None:
            return f"{REM_TABLE}.{column}.{match['index']}"
        if (column := LOC_COLUMNS.get(match["name"])) is not None:
            return f"{LOC_PORT_TABLE}.{column}.{match['index']}"
        if match["name"] == "lldpLocSysName":
            return LOC_SYS_NAME
    return oid


def _snmp_bytes(typed: tuple[str, str]) -> bytes:
    kind, value = typed
    if kind == "Hex-STRING" or (not kind and re.fullmatch(r"([0-9A-Fa-f]{2}\s*)+", value.strip() or "x")):
        try:
            return bytes.fromhex(value)
        except ValueError:
            return b""
    text = value.strip()
    if len(text) >= 2 and text[0] == text[-1] == '"':
        text = text[1:-1].replace('\\"', '"')
    return text.encode("latin-1", errors="replace")


def _snmp_text(typed: tuple[str, str]) -> str:
    """A DisplayString as text; a Hex-STRING is text where its bytes are printable, else hex."""
    raw = _snmp_bytes(typed).rstrip(b"\0")
    text = raw.decode("utf-8", errors="replace")
    return text if text.isprintable() else raw.hex(":")


def _snmp_port(subtype: tuple[str, str] | None, port_id: tuple[str, str] | None,
               descr: tuple[str, str] | None) -> str:
    """A port's name from its ID (where its subtype says it is a name) or else its description."""
    try:
        named = subtype is not None and int(subtype[1].split("(")[-1].rstrip(")")) in SNMP_NAMED_PORT_IDS
    except ValueError:
        named = subtype is not None and any(w in subtype[1] for w in ("interfaceName", "local", "interfaceAlias"))
    if port_id is not None and named:
        return _snmp_text(port_id)
    if descr is not None and _snmp_text(descr):
        return _snmp_text(descr)
    return _snmp_text(port_id) if port_id is not None else ""


def snmpwalk_argv(address: str, community: str) -> list[str]:
    """The walk of LLDP-MIB that `parse_snmpwalk` reads (SNMP v2c, numeric OIDs)."""
    return ["snmpwalk", "-v2c", "-c", community, "-On", address, LLDP_MIB]
