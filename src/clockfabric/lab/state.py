"""Where a lab lives on this machine: its namespaces, and a folder under /run/clockfabric
holding its topology, its host clocks and the background processes it started.

/run is emptied at boot, as are namespaces, so a lab's record never outlives the lab.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from clockfabric.clock.vclock import CLOCK_ENV, VirtualClock
from clockfabric.errors import ClockfabricError
from clockfabric.lab import process
from clockfabric.lab.exec import command
from clockfabric.lab.naming import check_lab_name, netns_name, netns_prefix, parse_netns
from clockfabric.topology import Topology, load

if TYPE_CHECKING:
    from clockfabric.lab.hosts import LabHost


def run_dir() -> Path:
    return Path(os.environ.get("CLOCKFABRIC_RUN_DIR", "/run/clockfabric")) / "labs"


def lab_names() -> list[str]:
    """Labs with a record, and labs whose namespaces remain after a crash."""
    from clockfabric.lab import netns  # not at the top: pyroute2 is slow to import and agents never need it

    names = {p.name for p in run_dir().glob("*") if p.is_dir()}
    names |= {parsed[0] for ns in netns.listed() if (parsed := parse_netns(ns))}
    return sorted(names)


@dataclass
class Lab:
    name: str
    dir: Path
    topology: Topology

    @classmethod
    def open(cls, name: str | None = None) -> Lab:
        """The named lab, or the only one if no name is given."""
        if name is None:
            names = lab_names()
            if not names:
                raise ClockfabricError("no lab is up; start one with: clockfabric lab up TOPOLOGY.yaml")
            if len(names) > 1:
                raise ClockfabricError(f"several labs are up ({', '.join(names)}); pick one with --lab NAME")
            name = names[0]
        check_lab_name(name)
        folder = run_dir() / name
        if not (folder / "topology.yaml").exists():
            if name in lab_names():
                raise ClockfabricError(f"lab {name!r} is incomplete (a crash?); remove it: clockfabric lab down {name}")
            raise ClockfabricError(f"no lab named {name!r}; `clockfabric lab status` lists the labs that are up")
        return cls(name, folder, load(folder / "topology.yaml"))

    # ---- nodes --------------------------------------------------------------------------
    def ns(self, node: str) -> str:
        return netns_name(self.name, node)

    def node(self, name: str) -> str:
        """Check a node name given by a person; explain what exists if it is wrong."""
        if name in self.topology.hosts or name in self.topology.switches:
            return name
        hosts = list(self.topology.hosts)
        sample = ", ".join(hosts[:4]) + (", ..." if len(hosts) > 4 else "")
        raise ClockfabricError(f"no host or switch {name!r} in lab {self.name}; hosts are {sample}")

    def host(self, name: str) -> LabHost:
        """A node as a Host: a lab is a Fleet (hosts.Fleet) the product can run on."""
        from clockfabric.lab.hosts import LabHost  # it builds on this module

        return LabHost(self, name)

    def host_env(self, host: str) -> dict[str, str]:
        """Environment for a process running on a lab host: which lab, which host, which clock."""
        env = {"CLOCKFABRIC_LAB": self.name, "CLOCKFABRIC_NODE": host}
        if host in self.topology.hosts:
            env[CLOCK_ENV] = str(self.clock_path(host))
        extra = self.dir / "env" / f"{host}.json"
        return env | (json.loads(extra.read_text()) if extra.exists() else {})

    def set_host_env(self, host: str, env: dict[str, str]) -> None:
        """Extra environment for everything later run on the host (say, a PYTHONPATH that gives it
        other package versions than the rest: the lab's hosts share one filesystem). {} clears it."""
        path = self.dir / "env" / f"{host}.json"
        if not env:
            path.unlink(missing_ok=True)
            return
        path.parent.mkdir(exist_ok=True)
        path.write_text(json.dumps(env))

    # ---- clocks -------------------------------------------------------------------------
    def clock_path(self, host: str) -> Path:
        return self.dir / "clocks" / f"{host}.json"

    def clocks(self) -> dict[str, VirtualClock]:
        """Every host's clock model: the ground truth. For evaluation tools, not agents."""
        return {h: VirtualClock.load(self.clock_path(h)) for h in self.topology.hosts}

    def save_clock(self, clock: VirtualClock) -> None:
        path = self.clock_path(clock.host)
        path.parent.mkdir(exist_ok=True)
        tmp = path.with_suffix(".tmp")
        tmp.write_text(clock.to_json())
        tmp.replace(path)  # agents may be reading it: swap whole files only

    # ---- failed links: what the fabric's routing avoids, and silent ones it cannot see ----
    def failed_links(self) -> frozenset[int]:
        return self._links("failed_links")

    def save_failed_links(self, failed: frozenset[int]) -> None:
        self._save_links("failed_links", failed)

    def silent_links(self) -> frozenset[int]:
        return self._links("silent_links")

    def save_silent_links(self, silent: frozenset[int]) -> None:
        self._save_links("silent_links", silent)

    def _links(self, what: str) -> frozenset[int]:
        path = self.dir / f"{what}.json"
        return frozenset(json.loads(path.read_text())) if path.exists() else frozenset()

    def _save_links(self, what: str, links: frozenset[int]) -> None:
        tmp = self.dir / f"{what}.tmp"
        tmp.write_text(json.dumps(sorted(links)))
        tmp.replace(self.dir / f"{what}.json")

    # ---- cables swapped by `lab swap`: NIC -> the NIC whose cable it now has ---------------
    def cables(self) -> dict[str, str]:
        path = self.dir / "cables.json"
        return json.loads(path.read_text()) if path.exists() else {}

    def save_cables(self, cables: dict[str, str]) -> None:
        tmp = self.dir / "cables.tmp"
        tmp.write_text(json.dumps(cables))
        tmp.replace(self.dir / "cables.json")

    # ---- background processes (flaps, traffic, agents) -----------------------------------
    def spawn(self, node: str, argv: list[str], what: str, *, log: Path | None = None,
              **popen) -> subprocess.Popen:
        """Start argv on a node, recorded as `what` so that `lab down` and `lab status` know it."""
        proc = process.spawn(command(self, node, argv), log=log, **popen)
        self.register(proc.pid, what)
        return proc

    def register(self, pid: int, what: str) -> None:
        procs = self.dir / "procs"
        procs.mkdir(exist_ok=True)
        (procs / f"{pid}.json").write_text(json.dumps({"pid": pid, "what": what, "started": time.time()}))

    def processes(self) -> list[dict]:
        """Background processes of this lab that are still running."""
        out = []
        for f in sorted((self.dir / "procs").glob("*.json")):
            rec = json.loads(f.read_text())
            if is_ours(rec["pid"], self.name):
                out.append(rec)
            else:
                f.unlink(missing_ok=True)
        return out


def is_ours(pid: int, lab: str) -> bool:
    """A live clockfabric process working on this lab (guards against reused pids)."""
    try:
        argv = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
    except OSError:
        return False
    return any(b"clockfabric" in a for a in argv) and lab.encode() in argv


def create_record(name: str, topo_yaml: str) -> Path:
    folder = run_dir() / name
    folder.parent.mkdir(parents=True, exist_ok=True)
    try:
        folder.mkdir()  # atomic: two `lab up` of one name cannot both pass
    except FileExistsError:
        raise ClockfabricError(f"lab {name!r} already exists; remove it first: clockfabric lab down {name}") from None
    (folder / "topology.yaml").write_text(topo_yaml)
    return folder


def remove_record(name: str) -> None:
    shutil.rmtree(run_dir() / name, ignore_errors=True)


def lab_namespaces(name: str) -> list[str]:
    from clockfabric.lab import netns

    return netns.listed(netns_prefix(name))
