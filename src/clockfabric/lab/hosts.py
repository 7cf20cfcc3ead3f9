"""The lab's side of the hosts seam: a lab host is its namespace, entered with `ip netns exec`
(which also mounts the namespace's own /sys), running on its virtual clock.

Processes started here are recorded with the lab, so `lab status` lists them and `lab down`
stops them with everything else in its namespaces.
"""

from __future__ import annotations

import sys
from pathlib import Path

from clockfabric.audit.gather import MODULE, Transport
from clockfabric.clock.vclock import ClockSource, VirtualClock
from clockfabric.hosts import Completed, Host, Hosts, Proc
from clockfabric.hosts.local import PopenProc, popen, run_argv
from clockfabric.lab.exec import command
from clockfabric.lab.state import Lab


class LabHost(Host):
    def __init__(self, lab: Lab, name: str):
        self.lab, self.name = lab, lab.node(name)
        node = lab.topology.hosts.get(name)
        self.address = str(node.address) if node else name  # a switch has no address of its own

    def argv(self, argv: list[str], env: dict[str, str] | None = None) -> list[str]:
        """The local argv that runs argv on this host, with the lab's environment for it."""
        extra = [f"{k}={v}" for k, v in (env or {}).items()]
        return command(self.lab, self.name, [*(["env", *extra] if extra else []), *argv])

    def spawn(self, argv: list[str], *, env: dict[str, str] | None = None, log: Path | None = None,
              pipes: bool = False) -> Proc:
        proc = PopenProc(popen(self.argv(argv, env), log=log, pipes=pipes, where=self._where()))
        self.lab.register(proc.pid, f"{_what(argv)} on {self.name}")
        return proc

    def run(self, argv: list[str], *, input: bytes | None = None, timeout_s: float = 30.0) -> Completed:
        return run_argv(self.argv(argv), input=input, timeout_s=timeout_s, where=self._where())

    def clock(self) -> ClockSource:
        return VirtualClock.load(self.lab.clock_path(self.name))

    def _where(self) -> str:
        return f"{self.name} (lab {self.lab.name})"


def lab_hosts(lab: Lab) -> Hosts:
    """Every host of the lab (switches are reached with LabHost(lab, name) directly)."""
    return Hosts({h: LabHost(lab, h) for h in lab.topology.hosts}, f"lab {lab.name}")


def lab_transport(lab: Lab) -> Transport:
    """The audit's command transport for a lab: each host's report runs in its namespace."""
    return lambda host: command(lab, host, [sys.executable, *MODULE])


def lab_audit(lab: Lab) -> dict:
    """audit()'s keywords for a lab: its transport, its hosts for the active checks' workers, and
    its switches speaking LLDP while the hosts report."""
    from clockfabric.lab.lldp import speaking  # pyroute2 is slow to import: only audits need it

    return {"transport": lab_transport(lab), "machines": lab, "during": speaking(lab)}


def _what(argv: list[str]) -> str:
    """What `lab status` calls a process: its module (python -m ...), or its program."""
    if "-m" in argv[:-1]:
        return argv[argv.index("-m") + 1]
    return Path(argv[0]).name
