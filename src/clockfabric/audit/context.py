"""What every check sees: the fleet's topology, each host's report, the expectations, and
what earlier checks learned (NICs already found broken are not blamed again downstream)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from clockfabric.audit import expect
from clockfabric.hosts import Fleet
from clockfabric.topology import Nic, Topology, interfaces


@dataclass
class Context:
    topology: Topology
    hosts: list[str]  # the hosts audited
    reports: dict[str, dict]  # host -> what it reported: facts, reachability, LLDP neighbours
    missing: dict[str, str]  # host -> why it reported nothing
    expect: dict = field(default_factory=expect.defaults)
    machines: Fleet | None = None  # where active tests start their workers (None: they cannot)
    derived: dict[str, Any] = field(default_factory=dict)  # expectations taken from the fleet, for the report
    broken: dict[tuple[str, str], str] = field(default_factory=dict)  # (host, nic) -> which check failed it

    def reporting(self) -> list[str]:
        return [h for h in self.hosts if h in self.reports]

    def nics(self, host: str) -> tuple[Nic, ...]:
        return self.topology.hosts[host].nics

    def facts(self, host: str, section: str) -> Any:
        """One section of a host's report; None if it is missing or its reader failed."""
        value = self.reports.get(host, {}).get(section)
        return None if isinstance(value, dict) and set(value) == {"error"} else value

    def expected(self, section: str, key: str, values: dict[str, Any], how: str = "majority") -> tuple[Any, bool]:
        """The expectation for section.key: written down, else the fleet's majority (or median).

        Returns (value, firm): firm is False when the fleet has no clear majority to go by."""
        written = self.expect.get(section, {}).get(key)
        if written is not None:
            return written, True
        if how == "median":
            value, firm = expect.median(values.values()), True
        else:
            value, firm = expect.majority(values.values())
        self.derived[f"{section}.{key}"] = value
        return value, firm

    def interface_addresses(self) -> dict[tuple[str, str], str]:
        """(host, nic) -> the NIC's address in the topology's plan."""
        return {(p.node, p.iface): str(itf.address.ip) for p, itf in interfaces(self.topology).items()
                if p.node in self.topology.hosts}

    def mark_broken(self, host: str, nic: str, check_id: str) -> None:
        self.broken.setdefault((host, nic), check_id)
