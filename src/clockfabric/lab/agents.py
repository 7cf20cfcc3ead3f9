"""`clockfabric agent` on every host of a lab, started together and stopped by their own handles.

Each lab has a fleet key of its own (made on first use, in the lab's folder), which its agents
are given: a lab's agents seal their datagrams as a fleet's do."""

from __future__ import annotations

import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path

from clockfabric.auth.keys import new_key_file
from clockfabric.clock.evaluate import read_states
from clockfabric.errors import ClockfabricError
from clockfabric.lab import process
from clockfabric.lab.state import Lab, is_ours


def lab_key(lab: Lab) -> Path:
    """The lab's fleet key file, made the first time it is wanted."""
    path = lab.dir / "fleet.key"
    return path if path.exists() else new_key_file(path)


class LabAgents:
    """An agent per lab host; each publishes its state as a file in `state_dir`."""

    def __init__(self, lab: Lab, *, peers: int = 10, window_s: float = 2.0, update_s: float = 1.0,
                 probe_rate: float = 20.0, probe_budget: float = 0.0005, reference: str | None = None,
                 extra: Sequence[str] = (), per_host: Callable[[str], Sequence[str]] | None = None,
                 discover: bool = False):
        """`extra`: arguments every agent is given; `per_host(host)`: those one host's agent is given.
        `discover`: agents in discovery mode, as on a fleet with no fleet file yet (no lab, no
        topology: LLDP, telemetry and pushes only)."""
        self.lab = lab
        self.per_host = per_host
        self.discover = discover
        self.hosts = sorted(lab.topology.hosts)
        self.reference = reference or self.hosts[0]
        self.state_dir = lab.dir / "agents"
        if discover:
            self.args = ["--discover", "--lldp-interval", "1", "--update", str(update_s),
                         "--state-dir", str(self.state_dir), *extra]
        else:
            self.args = ["--peers", str(peers), "--window", str(window_s), "--update", str(update_s),
                         "--probe-rate", str(probe_rate), "--probe-budget", str(probe_budget),
                         "--reference", self.reference,
                         "--state-dir", str(self.state_dir), "--key-file", str(lab_key(lab)), *extra]
        self.procs: list[subprocess.Popen] = []

    def start(self) -> None:
        self._stop_earlier()
        self.state_dir.mkdir(exist_ok=True)
        for f in self.state_dir.glob("*.json"):
            f.unlink()
        for h in self.hosts:
            self.procs.append(self.lab.spawn(h, self.argv(h), f"clock agent on {h}", log=self.log(h)))

    def argv(self, host: str) -> list[str]:
        """The command line of `host`'s agent (a test restarting one uses it too)."""
        lab = [] if self.discover else ["--lab", self.lab.name]
        return [sys.executable, "-m", "clockfabric.cli", "agent", *lab, "--host", host, *self.args,
                *(self.per_host(host) if self.per_host else ())]

    def log(self, host: str) -> Path:
        return self.lab.dir / "logs" / f"agent-{host}.log"

    def _stop_earlier(self) -> None:
        """Agents left running by an earlier `sync --keep` hold the ports: stop them first."""
        earlier = [p["pid"] for p in self.lab.processes() if p["what"].startswith("clock agent")]
        process.stop_pids(earlier, ours=lambda pid: is_ours(pid, self.lab.name), grace_s=5.0)

    def wait_heartbeats(self, timeout_s: float = 90.0) -> None:
        """Until every agent's failover hears every other host (raises if one fails or time runs out)."""
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            states = read_states(self.state_dir)
            if len(states) == len(self.hosts) and all(
                    s.get("failover", {}).get("peers_heard") == len(self.hosts) - 1 for s in states.values()):
                return
            if failed := self.failed():
                raise ClockfabricError(f"agent failed: {failed[0]}")
            time.sleep(0.2)
        raise ClockfabricError(f"agents did not all hear each other's heartbeats within {timeout_s:g} s")

    def wait_publishing(self, timeout_s: float = 90.0) -> None:
        """Until every agent has published its state (raises if one fails or time runs out)."""
        deadline = time.monotonic() + timeout_s
        while len(read_states(self.state_dir)) < len(self.hosts):
            if failed := self.failed():
                raise ClockfabricError(f"agent failed: {failed[0]}")
            if time.monotonic() > deadline:
                raise ClockfabricError(f"the agents were not all publishing within {timeout_s:g} s")
            time.sleep(0.2)

    def failed(self) -> list[str]:
        """Hosts whose agent exited, with the last line it wrote."""
        out = []
        for h, p in zip(self.hosts, self.procs, strict=False):
            if p.poll() is not None:
                text = self.log(h).read_text().strip().splitlines()
                out.append(f"{h}: {text[-1] if text else f'exit {p.returncode}'}")
        return out

    def stop(self) -> None:
        process.stop(self.procs, grace_s=5.0)
        self.procs.clear()
