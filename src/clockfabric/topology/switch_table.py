"""A switch's LLDP table, whichever way it was read (lldpd: switch_lldp.py, SNMP: switch_snmp.py):
what each of its ports hears, and the switch's own name where the table says it.

Names follow what the neighbours hear, so one cable reads the same from either end: a port is
named by the port ID it announces where that ID is a name (subtype interface name or locally
assigned), else by its interface name; a neighbour is named by its system name, else its chassis ID,
and its port by its port ID where that is a name, else by the port description (lldpd on a Linux
host announces its MAC as port ID and the interface name as description). The text comes from a
switch: its size and its neighbours are bounded, and a name that would not fit a topology file is
left out with a note, never passed on.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass, field

from clockfabric.errors import ClockfabricError
from clockfabric.topology.schema import NODE_NAME, PORT_NAME

MAX_TEXT = 16 * 2**20  # a switch's table: thousands of neighbours fit many times over
MAX_NEIGHBOURS = 10_000  # per switch
Run = Callable[[list[str]], tuple[int, str, str]]  # argv -> (exit status, stdout, stderr)


@dataclass(frozen=True)
class Neighbour:
    port: str  # the switch's own port it is heard on
    node: str  # the neighbour's system name (or chassis ID)
    node_port: str  # the neighbour's port
    switch: bool | None = None  # whether it says it bridges or routes; None where it does not say


@dataclass(frozen=True)
class SwitchTable:
    system: str | None  # the switch's own LLDP system name, where the text tells it
    neighbours: tuple[Neighbour, ...]
    left_out: tuple[str, ...] = field(default=())  # what could not be named, one line each


def last_line(said: str, code: int) -> str:
    """What a failed command said last, printable (it comes from a switch), or its exit status."""
    line = (said.strip().splitlines() or [f"exit {code}"])[-1][:200]
    return "".join(c if c.isprintable() else "?" for c in line)


_NODE = re.compile(NODE_NAME)
_PORT = re.compile(PORT_NAME)


def add(neighbours: list[Neighbour], left_out: list[str], port: str, node: str, node_port: str,
         switch: bool | None) -> None:
    """One row of a table, where its names fit a fleet file and the table has room; else a line in `left_out`."""
    if len(neighbours) >= MAX_NEIGHBOURS:
        if len(left_out) < 1 or not left_out[-1].startswith("more than"):
            left_out.append(f"more than {MAX_NEIGHBOURS} neighbours: the rest left out")
        return
    bad = [f"{what} {text[:64]!r}" for what, text, pattern in (
        ("port", port, _PORT), ("neighbour", node, _NODE), ("neighbour port", node_port, _PORT))
        if not pattern.match(text)]
    if bad:
        left_out.append(f"{port[:64]!r} hears {node[:64]!r}:{node_port[:64]!r}: {', '.join(bad)} is not a "
                        "name a fleet file takes")
        return
    neighbours.append(Neighbour(port, node, node_port, switch))


def checked(system: str | None, neighbours: list[Neighbour], left_out: list[str]) -> SwitchTable:
    """The table its rows make: the system name only if a fleet file takes it, each neighbour once."""
    if system is not None and not _NODE.match(system):
        left_out.append(f"its own system name {system[:64]!r} is not a name a fleet file takes")
        system = None
    # one entry per (port, neighbour): lldpd lists a neighbour twice where two agents on it announce
    unique: dict[tuple[str, str, str], Neighbour] = {}
    for n in neighbours:
        seen = unique.get((n.port, n.node, n.node_port))
        said = [s for s in (n.switch, seen.switch if seen else None) if s is not None]
        unique[n.port, n.node, n.node_port] = Neighbour(n.port, n.node, n.node_port, any(said) if said else None)
    return SwitchTable(system, tuple(unique.values()), tuple(left_out))


def check_size(text: str, where: str) -> None:
    """One line refusing text no switch's table is as long as."""
    if len(text) > MAX_TEXT:
        raise ClockfabricError(f"{where}: {len(text)} characters, more than a switch's LLDP table takes "
                               f"({MAX_TEXT}); is it the right output?")
