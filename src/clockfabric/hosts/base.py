"""How the product reaches a host: run a command there, start one, read a file, know its clock.

A Host is all the product knows of a machine: this one, one over ssh, or (from above) a
lab's namespace. Code that takes Hosts never asks which.
"""

from __future__ import annotations

import signal as signals
import time
from abc import ABC, abstractmethod
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import IO, TYPE_CHECKING, Protocol

from clockfabric.errors import ClockfabricError

if TYPE_CHECKING:
    from clockfabric.clock.vclock import ClockSource
    from clockfabric.topology import Topology


@dataclass(frozen=True)
class Completed:
    returncode: int
    stdout: bytes
    stderr: bytes


class Proc(ABC):
    """A process started on a host, in a process group of its own."""

    pid: int  # its pid on its host (where known)
    # text pipes, when spawned with pipes=True; None otherwise
    stdin: IO[str] | None = None
    stdout: IO[str] | None = None
    stderr: IO[str] | None = None

    @abstractmethod
    def poll(self) -> int | None:
        """Its exit status, or None while it runs."""

    @abstractmethod
    def wait(self, timeout_s: float | None = None) -> int | None:
        """Its exit status once it ends; None if timeout_s passes first."""

    @abstractmethod
    def signal(self, sig: int) -> None:
        """Send sig to its whole process group, on its host; nothing if it is gone."""


class Host(ABC):
    name: str  # the fleet's name for it
    address: str  # the address peers and the fleet reach it at

    @abstractmethod
    def spawn(self, argv: list[str], *, env: dict[str, str] | None = None, log: Path | None = None,
              pipes: bool = False) -> Proc:
        """Start argv there in its own process group. log: a local file for its stdout and
        stderr; pipes: text pipes to its stdin, stdout and stderr instead; env: extra variables."""

    @abstractmethod
    def run(self, argv: list[str], *, input: bytes | None = None, timeout_s: float = 30.0) -> Completed:
        """Run argv there to completion. Raises ClockfabricError (one line) if the host cannot be
        reached or the command outlives timeout_s (it is killed then)."""

    def read_file(self, path: str) -> bytes:
        done = self.run(["cat", path])
        if done.returncode != 0:
            why = (done.stderr.decode(errors="replace").strip().splitlines() or [f"exit {done.returncode}"])[-1]
            raise ClockfabricError(f"{self.name}: cannot read {path}: {why}")
        return done.stdout

    def clock(self) -> ClockSource:
        """The clock software on this host reads."""
        from clockfabric.clock.vclock import SystemClock

        return SystemClock()

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.name!r}, {self.address!r})"


class Fleet(Protocol):
    """Hosts by name, with the topology they sit in."""
    name: str  # names the fleet in messages, and marks the processes started for it
    topology: Topology

    def host(self, name: str) -> Host: ...


class Hosts(dict[str, Host]):
    """Hosts by name; a name not among them is one clear error, saying where they come from."""

    def __init__(self, hosts: dict[str, Host], where: str):
        super().__init__(hosts)
        self.where = where

    def __missing__(self, name: str) -> Host:
        names = sorted(self)
        sample = ", ".join(names[:4]) + (", ..." if len(names) > 4 else "")
        raise ClockfabricError(f"{name!r} is not a host of {self.where}; hosts are {sample or 'none'}")


@dataclass
class HostFleet:
    """A Fleet from a fleet file (or any hosts at hand)."""
    name: str
    topology: Topology
    hosts: Hosts

    def host(self, name: str) -> Host:
        return self.hosts[name]


def stop(procs: Iterable[Proc], grace_s: float = 2.0) -> None:
    """SIGTERM each still running (its whole group), SIGKILL what outlives the grace period."""
    procs = list(procs)
    for sig in (signals.SIGTERM, signals.SIGKILL):
        running = [p for p in procs if p.poll() is None]
        if not running:
            return
        for p in running:
            p.signal(sig)
        deadline = time.monotonic() + grace_s
        while any(p.poll() is None for p in running) and time.monotonic() < deadline:
            time.sleep(0.02)
    for p in procs:
        p.wait(grace_s)
