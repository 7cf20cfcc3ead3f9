"""`clockfabric controller`, `switch-agent`, `events`, `monitor`: fleet monitoring.

On a lab, `monitor` starts the whole stack inside it: the controller on the reference host
(listening on its lab address, so every push crosses the lab's own fabric), a switch agent
on every switch, and a clock agent on every host that pushes to the controller.
"""

from __future__ import annotations

import json
import logging
import os
import signal
import subprocess
import sys
import time
import urllib.parse
from contextlib import nullcontext
from pathlib import Path

import httpx
import typer
from rich.live import Live
from rich.table import Table

from clockfabric.cli.output import err, out, print_json, progress_bar, require_root
from clockfabric.controller.token import read_token
from clockfabric.errors import ClockfabricError
from clockfabric.lab.exec import command
from clockfabric.lab.state import Lab, is_ours
from clockfabric.units import parse_duration

LabOpt = typer.Option(None, "--lab", "-l", help="Lab name (default: the only lab that is up).")
JsonOpt = typer.Option(False, "--json", help="Print JSON for scripts.")
ControllerOpt = typer.Option(None, "--controller", help="Controller URL (default: the lab's controller).")
TokenOpt = typer.Option(None, "--token-file", help="File holding the fleet token.")
PY = [sys.executable, "-m", "clockfabric.cli"]


def _listen(text: str) -> tuple[str, int]:
    host, _, port = text.rpartition(":")
    if not host or not port.isdigit() or not 0 < int(port) < 65536:
        raise ClockfabricError(f"--listen {text!r}: give ADDRESS:PORT, e.g. 127.0.0.1:7400")
    return host, int(port)


def controller(db: str = typer.Option("clockfabric.db", "--db", help="sqlite file or path, or postgresql://..."),
               listen: str = typer.Option("127.0.0.1:7400", "--listen", help="ADDRESS:PORT (loopback by default)."),
               token_file: Path = typer.Option(..., "--token-file", help="Fleet token file (--new-token makes one)."),
               new_token: bool = typer.Option(False, "--new-token", help="Write a new random token if the file is missing."),
               topology: Path = typer.Option(None, "--topology", help="Fleet topology: its hosts and switches are enrolled."),
               lab_name: str = typer.Option(None, "--lab", help="Enroll a lab's hosts and switches (run it on a lab host)."),
               config: Path = typer.Option(None, "--config", help="Detector thresholds (YAML, see docs/monitoring.md)."),
               webhook: str = typer.Option(None, "--webhook", help="POST alerts (JSON) to this URL."),
               tls_cert: Path = typer.Option(None, "--tls-cert"), tls_key: Path = typer.Option(None, "--tls-key"),
               enroll_unknown: bool = typer.Option(False, "--enroll-unknown", help="Accept hosts not in the topology."),
               stale: float = typer.Option(5.0, "--stale", min=0.5, help="Seconds without a push before a host is stale."),
               verbose: bool = typer.Option(False, "--verbose", "-v")) -> None:
    """Run the controller: agents push to it; it stores, detects and alerts, and serves the API."""
    from clockfabric.controller.fleet import Fleet
    from clockfabric.controller.monitor import Monitor
    from clockfabric.controller.server import Listen, server
    from clockfabric.controller.storage.open import open_storage
    from clockfabric.topology import load

    logging.basicConfig(level=logging.DEBUG if verbose else logging.INFO, format="%(asctime)s %(message)s")
    host, port = _listen(listen)
    listen_at = Listen(host, port, tls_cert, tls_key)
    listen_at.check()
    token = read_token(token_file, create=new_token)
    topo = load(topology) if topology else (Lab.open(lab_name).topology if lab_name else None)
    nodes = sorted(topo.hosts) + sorted(topo.switches) if topo else []
    storage = open_storage(db)
    monitor = Monitor.create(storage, topology=topo, config=config, webhook=webhook)
    fleet = Fleet(storage, hosts=nodes, stale_s=stale, enroll_unknown=enroll_unknown or topo is None, monitor=monitor)
    err.print(f"controller on {listen_at.url}, storage {db}, {len(nodes)} enrolled nodes")
    try:
        server(fleet, token, listen_at).run()
    finally:
        storage.close()


def switch_agent(switch: str = typer.Option(..., "--switch", help="This switch's name."),
                 lab_name: str = LabOpt, controller_url: str = ControllerOpt, token_file: Path = TokenOpt,
                 ca_file: str = typer.Option(None, "--ca-file")) -> None:
    """Watch a switch's links by netlink and push their events to the controller (the lab's switches)."""
    from clockfabric.agent.switch import SwitchAgent
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(message)s")
    lab = Lab.open(lab_name)
    if switch not in lab.topology.switches:
        raise ClockfabricError(f"{switch!r} is not a switch of lab {lab.name}")
    url, token_path = _where(lab, controller_url, token_file)
    ports = sorted({lk.port(switch).iface for lk in lab.topology.links if switch in (lk.a.node, lk.b.node)})
    SwitchAgent(switch, ports, url, read_token(token_path), ca_file=ca_file).run()


# ---- the lab's controller --------------------------------------------------------------------
def _record(lab: Lab) -> Path:
    return lab.dir / "controller.json"


def _where(lab: Lab | None, url: str | None, token_file: Path | None) -> tuple[str, Path]:
    if url and token_file:
        return url, token_file
    if lab is None or not _record(lab).exists():
        raise ClockfabricError("no controller known: give --controller URL --token-file FILE, "
                               "or start one on the lab with `clockfabric monitor --lab NAME --keep`")
    rec = json.loads(_record(lab).read_text())
    return url or rec["url"], token_file or Path(rec["token_file"])


class LabFleet:
    """Controller, switch agents and pushing clock agents on a lab, started and stopped by pid."""

    PORT = 7400

    def __init__(self, lab: Lab, *, config: Path | None = None, webhook: str | None = None, peers: int = 10):
        from clockfabric.clock.evaluate import LabAgents

        self.lab = lab
        self.host = min(lab.topology.hosts)  # the reference host, as for clock sync
        self.url = f"http://{lab.topology.hosts[self.host].address}:{self.PORT}"
        self.token_file = lab.dir / "fleet.token"
        self.config, self.webhook = config, webhook
        self.agents = LabAgents(lab, peers=peers, extra=["--controller", self.url, "--token-file", str(self.token_file)])
        self.procs: list = []

    def running(self) -> bool:
        """A monitor kept on this lab (`--keep`) answers."""
        if not _record(self.lab).exists():
            return False
        try:
            api(self.lab, self.url, self.token_file, "/healthz")
            return True
        except (httpx.HTTPError, OSError, ClockfabricError):
            return False

    def start(self) -> None:
        self._stop_earlier()
        read_token(self.token_file, create=True)
        (self.lab.dir / "logs").mkdir(exist_ok=True)
        self.procs.append(self.restart_controller())
        _record(self.lab).write_text(json.dumps({"url": self.url, "token_file": str(self.token_file)}))
        for sw in sorted(self.lab.topology.switches):
            self.procs.append(self._spawn(sw, [*PY, "switch-agent", "--lab", self.lab.name, "--switch", sw],
                                          f"switch agent on {sw}", f"switch-{sw}.log"))
        self.agents.start()

    def wait_pushing(self, timeout_s: float = 90.0) -> None:
        """Until every node pushes (Python start-up of N agents on few cores takes a while)."""
        nodes = len(self.lab.topology.hosts) + len(self.lab.topology.switches)
        deadline = time.monotonic() + timeout_s
        with progress_bar("agents") as update:
            while time.monotonic() < deadline:
                ok = api(self.lab, self.url, self.token_file, "/api/v1/fleet")["ok"]
                update("pushing to the controller", ok, nodes)
                if ok == nodes:
                    return
                time.sleep(0.5)
        err.print(f"[yellow]only {ok} of {nodes} nodes push after {timeout_s:.0f} s; logs in {self.lab.dir / 'logs'}")

    def restart_controller(self):
        """Start the controller (again: same database and token) and wait until it answers."""
        argv = [*PY, "controller", "--db", str(self.lab.dir / "controller.db"), "--listen",
                f"{self.lab.topology.hosts[self.host].address}:{self.PORT}", "--token-file", str(self.token_file),
                "--lab", self.lab.name]
        argv += ["--config", str(self.config)] if self.config else []
        argv += ["--webhook", self.webhook] if self.webhook else []
        proc = self._spawn(self.host, argv, "controller", "controller.log")
        self._wait_ready(proc)
        return proc

    def _stop_earlier(self) -> None:
        """A dead kept monitor's processes may still hold the ports: stop them, by pid."""
        earlier = [p["pid"] for p in self.lab.processes()
                   if p["what"] == "controller" or p["what"].startswith("switch agent")]
        for pid in earlier:
            if is_ours(pid, self.lab.name):
                os.kill(pid, signal.SIGTERM)
        deadline = time.monotonic() + 5
        while any(is_ours(pid, self.lab.name) for pid in earlier) and time.monotonic() < deadline:
            time.sleep(0.05)

    def _spawn(self, node: str, argv: list[str], what: str, log_name: str):
        with open(self.lab.dir / "logs" / log_name, "w") as log:
            proc = subprocess.Popen(command(self.lab, node, argv), stdout=log, stderr=subprocess.STDOUT)
        self.lab.register(proc.pid, what)
        return proc

    def _wait_ready(self, proc, timeout_s: float = 30.0) -> None:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if proc.poll() is not None:
                log = (self.lab.dir / "logs" / "controller.log").read_text().strip().splitlines()
                raise ClockfabricError(f"the controller exited: {log[-1] if log else proc.returncode}")
            try:
                api(self.lab, self.url, self.token_file, "/healthz")
                return
            except (httpx.HTTPError, OSError, ClockfabricError):
                time.sleep(0.2)
        raise ClockfabricError(f"the controller did not answer on {self.url} within {timeout_s:.0f} s")

    def stop(self) -> None:
        self.agents.stop()
        for p in reversed(self.procs):
            if p.poll() is None:
                p.terminate()
        for p in self.procs:
            try:
                p.wait(10)
            except Exception:  # noqa: BLE001 - stuck: kill that one process, by its own handle
                p.kill()
        _record(self.lab).unlink(missing_ok=True)


def api(lab: Lab | None, url: str, token_file: Path, path: str, *, body: dict | None = None, **params) -> dict:
    """GET from the controller (POST, with a body); a controller listening on a lab host's address
    is reached from inside that host."""
    query = {k: v for k, v in params.items() if v is not None}
    full = f"{url.rstrip('/')}{path}" + (f"?{urllib.parse.urlencode(query)}" if query else "")
    headers = {"Authorization": f"Bearer {read_token(token_file)}"}

    def call() -> dict:
        try:
            if body is None:
                r = httpx.get(full, headers=headers, timeout=5.0)
            else:
                r = httpx.post(full, json=body, headers=headers, timeout=10.0)
        except httpx.HTTPError as e:
            raise ClockfabricError(f"controller {url}: {e}; is it running?") from None
        if r.status_code not in (200, 201):
            raise ClockfabricError(f"controller {url} answered HTTP {r.status_code}: {r.text[:200]}")
        return r.json()

    address = urllib.parse.urlsplit(url).hostname
    inside = [h for h, node in lab.topology.hosts.items() if str(node.address) == address] if lab else []
    if not inside:
        return call()
    from clockfabric.lab import netns

    with netns.entered(lab.ns(inside[0])):
        return call()


# ---- reading ----------------------------------------------------------------------------------
def events(lab_name: str = LabOpt, controller_url: str = ControllerOpt, token_file: Path = TokenOpt,
           since: str = typer.Option(None, "--since", help="Only newer events: a duration like 5m or 30s."),
           host: str = typer.Option(None, "--host"), kind: str = typer.Option(None, "--kind"),
           limit: int = typer.Option(1000, "--limit", min=1), as_json: bool = JsonOpt) -> None:
    """Events the controller has stored (link downs and ups, agent starts, drops), oldest first."""
    lab = Lab.open(lab_name) if not (controller_url and token_file) else None
    url, token_path = _where(lab, controller_url, token_file)
    since_ns = None
    if since:
        try:
            since_ns = time.time_ns() - int(parse_duration(since) * 1e9)
        except ValueError as e:
            raise ClockfabricError(f"--since: {e}") from None
    rows, after = [], 0
    while len(rows) < limit:
        page = api(lab, url, token_path, "/api/v1/events", since_ns=since_ns, host=host, kind=kind,
                   after_id=after, limit=min(1000, limit - len(rows)))
        rows += page["items"]
        if page["next"] is None:
            break
        after = page["next"]
    if as_json:
        print_json(rows)
        return
    t = Table(title=f"{len(rows)} events")
    for col in ("time (UTC)", "host", "kind", "device", "synced"):
        t.add_column(col)
    for e in rows:
        stamp = time.strftime("%H:%M:%S", time.gmtime(e["t_ns"] / 1e9)) + f".{e['t_ns'] % 10**9 // 10**6:03d}"
        t.add_row(stamp, e["host"], e["kind"], e["device"], "yes" if e["synced"] else "no")
    out.print(t)


def monitor(lab_name: str = LabOpt, seconds: str = typer.Option("30s", "--seconds", "-s", help="How long to watch."),
            config: Path = typer.Option(None, "--config", help="Detector thresholds (YAML)."),
            webhook: str = typer.Option(None, "--webhook", help="Also POST alerts to this URL."),
            keep: bool = typer.Option(False, "--keep", help="Leave controller and agents running; `lab down` stops them."),
            as_json: bool = JsonOpt) -> None:
    """Watch a lab live: nodes, links, flaps, worst paths, alerts. Starts the controller and agents
    on it unless a kept monitor is already running there."""
    require_root()
    lab = Lab.open(lab_name)
    try:
        duration = parse_duration(seconds)
    except ValueError as e:
        raise ClockfabricError(f"--seconds: {e}") from None
    fleet = LabFleet(lab, config=config, webhook=webhook)
    started = not fleet.running()
    if started:
        err.print(f"starting the controller on {fleet.host} ({fleet.url}), switch agents and host agents")
        fleet.start()
        fleet.wait_pushing()
    try:
        view = _view(lab, fleet)
        with Live(_table(view), console=out, auto_refresh=False, transient=False,
                  redirect_stderr=False) if out.is_terminal and not as_json else nullcontext() as live:
            end = time.monotonic() + duration
            while time.monotonic() < end:
                time.sleep(min(1.0, max(0.0, end - time.monotonic())))
                view = _view(lab, fleet)
                if live:
                    live.update(_table(view), refresh=True)
        if as_json:
            print_json(view)
        elif not out.is_terminal:
            out.print(_table(view))
    finally:
        if started and not keep:
            fleet.stop()


def _view(lab: Lab, fleet: LabFleet) -> dict:
    def get(path: str, **params) -> dict:
        return api(lab, fleet.url, fleet.token_file, path, **params)

    owd = sorted(get("/api/v1/owd", stat="p99")["items"], key=lambda r: -r["owd_ns"])
    return {"fleet": get("/api/v1/fleet"), "links": get("/api/v1/links")["items"],
            "alerts": get("/api/v1/alerts", open_only=True)["items"], "worst_paths": owd[:5]}


def _table(view: dict) -> Table:
    f = view["fleet"]
    t = Table(title=f"{f['ok']}/{f['hosts']} nodes pushing, stale: {', '.join(f['stale']) or 'none'}, "
                    f"open alerts: {f['open_alerts']}")
    t.add_column("what")
    t.add_column("detail")
    flapped = [lk for lk in view["links"] if lk["transitions"] or not lk["up"]]
    for lk in flapped:
        t.add_row(f"link {lk['host']}:{lk['device']}", f"{'up' if lk['up'] else 'DOWN'}, {lk['transitions']} transitions")
    for p in view["worst_paths"]:
        t.add_row(f"path {p['src']}->{p['dst']} {p['path']}", f"p99 {p['owd_ns'] / 1e3:.1f} µs")
    for a in view["alerts"]:
        t.add_row(f"[red]alert {a['kind']}", a["message"])
    return t
