"""Which host this is and its fleet, as `clockfabric agent` and `clockfabric doctor` both take them."""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

from clockfabric.errors import ClockfabricError
from clockfabric.lab.state import Lab
from clockfabric.topology import Topology, load


@dataclass(frozen=True)
class ThisHost:
    name: str
    topology: Topology
    lab: Lab | None  # a lab host's lab; None on a real fleet
    key_file: Path | None  # as given, or a lab host's lab key


def this_host(host: str | None, lab_name: str | None, topology: Path | None, key_file: Path | None,
              insecure: bool) -> ThisHost:
    """--host (or $CLOCKFABRIC_NODE), and --topology FILE or --lab NAME (or $CLOCKFABRIC_LAB)."""
    if lab_name and topology:
        raise ClockfabricError("give --lab NAME (a lab host) or --topology FILE (a real fleet), not both")
    host = host or os.environ.get("CLOCKFABRIC_NODE", "")
    lab_name = lab_name or os.environ.get("CLOCKFABRIC_LAB", "")
    if not host:
        raise ClockfabricError("which host is this? give --host NAME")
    if topology:
        return ThisHost(host, load(topology), None, key_file)
    if not lab_name:
        raise ClockfabricError("give --lab NAME (a lab host) or --topology FILE (a real fleet)")
    from clockfabric.lab.agents import lab_key

    lab = Lab.open(lab_name)
    if key_file is None and not insecure:
        key_file = lab_key(lab)  # a lab host: the lab's own key, as its other agents use
    return ThisHost(host, lab.topology, lab, key_file)
