"""The monitoring stack on a lab: the controller on the reference host (listening on its lab
address, so every push crosses the lab's own fabric), a switch agent on every switch, and a
clock agent on every host that pushes to the controller. Started and stopped by pid.

The fleet token stays with the controller and the lab's commands; each agent, host's or switch's,
is handed its own push credential (derived from the fleet token: controller.token.host_token), in
`<lab>/tokens/NODE.token`, so it can push as itself only.

`discovering=True` makes the lab a fleet on its first day instead: the controller knows no node and
holds every host that pushes for approval (`--enroll pending`), the switches run real lldpd
(lab/lldpd.py) and no agent of ours, and the hosts' agents run in discovery mode, with no fleet
file: what `clockfabric discover` has to work from on a real fleet."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx

from clockfabric.auth.credential import host_token
from clockfabric.controller.client import api
from clockfabric.controller.token import read_token
from clockfabric.errors import ClockfabricError
from clockfabric.lab import lldpd, process
from clockfabric.lab.agents import LabAgents
from clockfabric.lab.controller import lab_controller, record_path
from clockfabric.lab.exec import command
from clockfabric.lab.state import Lab, is_ours

PY = [sys.executable, "-m", "clockfabric.cli"]

Progress = Callable[[str, int, int], None]  # (stage, done, total)


class LabFleet:
    """Controller, switch agents and pushing clock agents on a lab."""

    PORT = 7400

    def __init__(self, lab: Lab, *, config: Path | None = None, alertmanagers: list[str] | None = None,
                 peers: int = 10, db: Path | None = None, discovering: bool = False):
        """`alertmanagers`: their URLs, reachable from the reference host (none: the controller
        starts one on that host's loopback). `db`: the controller's database (in the lab's folder)."""
        self.lab = lab
        self.discovering = discovering
        self.db = db or lab.dir / ("discovery.db" if discovering else "controller.db")
        self.host = min(lab.topology.hosts)  # the reference host, as for clock sync
        self.url = f"http://{lab.topology.hosts[self.host].address}:{self.PORT}"
        self.token_file = lab.dir / "fleet.token"
        self.config, self.alertmanagers = config, alertmanagers or []
        self.agents = LabAgents(lab, peers=peers, extra=["--controller", self.url], discover=discovering,
                                per_host=lambda h: ["--token-file", str(self.node_token_file(h))])
        self.procs: list[subprocess.Popen] = []

    def node_token_file(self, node: str) -> Path:
        """Where a host's or switch's own push credential is kept."""
        return self.lab.dir / "tokens" / f"{node}.token"

    def _write_node_tokens(self) -> None:
        fleet_token = read_token(self.token_file, create=True)
        for node in [*self.lab.topology.hosts, *self.lab.topology.switches]:
            path = self.node_token_file(node)
            path.parent.mkdir(mode=0o700, exist_ok=True)
            path.touch(mode=0o600)
            path.write_text(host_token(fleet_token, node) + "\n")

    def api(self, path: str, *, body: dict | None = None, **params: Any) -> dict:
        """A call to this fleet's controller's API."""
        return api(lab_controller(self.lab, self.url, self.token_file), path, body=body, **params)

    def alertmanager_alerts(self) -> list[dict]:
        """The alerts the controller's Alertmanager holds (`GET /api/v2/alerts`), asked from the
        reference host, where the one the controller started listens on loopback."""
        url = (self.alertmanagers[0] if self.alertmanagers
               else (self.db.with_name(self.db.name + ".alertmanager") / "url").read_text().strip())
        script = ("import sys, urllib.request; "
                  "sys.stdout.write(urllib.request.urlopen(sys.argv[1], timeout=5).read().decode())")
        done = subprocess.run(command(self.lab, self.host, [sys.executable, "-c", script, f"{url}/api/v2/alerts"]),
                              capture_output=True, text=True, timeout=15)
        if done.returncode:
            raise ClockfabricError(f"Alertmanager {url} did not answer: {done.stderr.strip()[-300:]}")
        return json.loads(done.stdout)

    @property
    def logs(self) -> Path:
        return self.lab.dir / "logs"

    def running(self) -> bool:
        """A monitor kept on this lab (`--keep`) answers."""
        if not record_path(self.lab).exists():
            return False
        try:
            self.api("/healthz")
            return True
        except (httpx.HTTPError, OSError, ClockfabricError):
            return False

    def start(self) -> None:
        self._stop_earlier()
        self._write_node_tokens()
        self.procs.append(self.restart_controller())
        record_path(self.lab).write_text(json.dumps({"url": self.url, "token_file": str(self.token_file)}))
        if self.discovering:
            self.procs += lldpd.start(self.lab)
            self.agents.start()
            return
        for sw in sorted(self.lab.topology.switches):
            argv = [*PY, "switch-agent", "--lab", self.lab.name, "--switch", sw, "--controller", self.url,
                    "--token-file", str(self.node_token_file(sw))]
            self.procs.append(self.lab.spawn(sw, argv,
                                             f"switch agent on {sw}", log=self.logs / f"switch-{sw}.log"))
        self.agents.start()

    def wait_pushing(self, timeout_s: float = 90.0, progress: Progress | None = None) -> int:
        """Until every node pushes (Python start-up of N agents on few cores takes a while), or
        time runs out; returns how many do."""
        nodes = len(self.lab.topology.hosts) + len(self.lab.topology.switches)
        deadline = time.monotonic() + timeout_s
        ok = 0
        while time.monotonic() < deadline:
            ok = self.api("/api/v1/fleet")["ok"]
            if progress:
                progress("pushing to the controller", ok, nodes)
            if ok == nodes:
                break
            time.sleep(0.5)
        return ok

    def wait_pending(self, timeout_s: float = 90.0) -> list[dict]:
        """Until every host is held for approval (discovering), or time runs out; the hosts held."""
        deadline = time.monotonic() + timeout_s
        while True:
            held = self.api("/api/v1/pending")["items"]
            if len(held) == len(self.lab.topology.hosts) or time.monotonic() > deadline:
                return held
            if failed := self.agents.failed():
                raise ClockfabricError(f"agent failed: {failed[0]}")
            time.sleep(0.5)

    def restart_controller(self) -> subprocess.Popen:
        """Start the controller (again: same database and token) and wait until it answers."""
        argv = [*PY, "controller", "--db", str(self.db), "--listen",
                f"{self.lab.topology.hosts[self.host].address}:{self.PORT}", "--token-file", str(self.token_file),
                *(["--enroll", "pending"] if self.discovering else ["--lab", self.lab.name])]
        argv += ["--config", str(self.config)] if self.config else []
        argv += [arg for url in self.alertmanagers for arg in ("--alertmanager", url)]
        proc = self.lab.spawn(self.host, argv, "controller", log=self.logs / "controller.log")
        self._wait_ready(proc)
        return proc

    def _stop_earlier(self) -> None:
        """A dead kept monitor's processes may still hold the ports: stop them, by pid."""
        earlier = [p["pid"] for p in self.lab.processes()
                   if p["what"] == "controller" or p["what"].startswith("switch agent")]
        process.stop_pids(earlier, ours=lambda pid: is_ours(pid, self.lab.name), grace_s=5.0)

    def _wait_ready(self, proc: subprocess.Popen, timeout_s: float = 30.0) -> None:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if proc.poll() is not None:
                log = (self.logs / "controller.log").read_text().strip().splitlines()
                raise ClockfabricError(f"the controller exited: {log[-1] if log else proc.returncode}")
            try:
                self.api("/healthz")
                return
            except (httpx.HTTPError, OSError, ClockfabricError):
                time.sleep(0.2)
        raise ClockfabricError(f"the controller did not answer on {self.url} within {timeout_s:.0f} s")

    def stop(self) -> None:
        self.agents.stop()
        process.stop(reversed(self.procs), grace_s=10.0)
        record_path(self.lab).unlink(missing_ok=True)
