"""`clockfabric controller`, `switch-agent`, `events`, `monitor`: fleet monitoring.

On a lab, `monitor` starts the whole stack inside it: the controller on the reference host
(listening on its lab address, so every push crosses the lab's own fabric), a switch agent
on every switch, and a clock agent on every host that pushes to the controller.
"""

from __future__ import annotations

import re
import time
from contextlib import nullcontext
from pathlib import Path
from typing import TYPE_CHECKING

import typer
from rich.live import Live
from rich.table import Table

from clockfabric.console import err, out, print_json, progress_bar, require_root
from clockfabric.controller.client import fetch_all
from clockfabric.controller.token import read_token
from clockfabric.errors import ClockfabricError
from clockfabric.lab.controller import lab_controller
from clockfabric.lab.state import Lab
from clockfabric.logs import LOG_FORMAT_HELP, setup_logging
from clockfabric.units import parse_duration

if TYPE_CHECKING:  # `controller` and `switch-agent` start faster without the fleet runner's imports
    from clockfabric.controller.alertmanager_embedded import EmbeddedAlertmanager
    from clockfabric.controller.series.path import SeriesPath
    from clockfabric.controller.series.vmalert import RuleOptions
    from clockfabric.lab.monitoring import LabFleet

LabOpt = typer.Option(None, "--lab", "-l", help="Lab name (default: the only lab that is up).")
JsonOpt = typer.Option(False, "--json", help="Print JSON for scripts.")
ControllerOpt = typer.Option(None, "--controller", help="Controller URL (default: the lab's controller).")
TokenOpt = typer.Option(None, "--token-file", help="File holding the fleet token.")
LogFormatOpt = typer.Option("text", "--log-format", help=LOG_FORMAT_HELP)
AlertmanagerOpt = typer.Option(None, "--alertmanager",
                               help="Alertmanager URL to post alerts to; repeat it for each of an HA pair "
                                    "(default: start one on loopback).")


def _listen(text: str) -> tuple[str, int]:
    host, _, port = text.rpartition(":")
    if not host or not port.isdigit() or not 0 < int(port) < 65536:
        raise ClockfabricError(f"--listen {text!r}: give ADDRESS:PORT, e.g. 127.0.0.1:7400")
    return host, int(port)


def controller(db: str = typer.Option("clockfabric.db", "--db", help="sqlite file or path, or postgresql://..."),
               listen: str = typer.Option("127.0.0.1:7400", "--listen", help="ADDRESS:PORT (loopback by default)."),
               token_file: Path = typer.Option(..., "--token-file", help="Fleet token file (--new-token makes one)."),
               new_token: bool = typer.Option(False, "--new-token",
                                              help="Write a new random token if the file is missing."),
               viewer_token_file: Path = typer.Option(None, "--viewer-token-file",
                                                      help="A read-only token for the dashboard and API reads."),
               topology: Path = typer.Option(None, "--topology",
                                             help="Fleet topology: its hosts and switches are enrolled."),
               lab_name: str = typer.Option(None, "--lab",
                                            help="Enroll a lab's hosts and switches (run it on a lab host)."),
               config: Path = typer.Option(None, "--config",
                                           help="Detector thresholds (YAML, see docs/monitoring.md)."),
               alertmanager: list[str] = AlertmanagerOpt,
               tls_cert: Path = typer.Option(None, "--tls-cert"), tls_key: Path = typer.Option(None, "--tls-key"),
               enroll: str = typer.Option(None, "--enroll", metavar="topology|pending|any",
                                          help="Who may push: the topology's nodes and those approved (topology, the "
                                               "default with --topology or --lab); those, and others held until an "
                                               "operator approves them (pending: `clockfabric hosts`); anyone with "
                                               "a host credential (any, the default without a topology)."),
               enroll_unknown: bool = typer.Option(False, "--enroll-unknown",
                                                   help="Accept hosts not in the topology (--enroll any)."),
               stale: float = typer.Option(5.0, "--stale", min=0.5,
                                           help="Seconds without a push before a host is stale."),
               series_retention: str = typer.Option("90d", "--series-retention",
                                                    help="How long the embedded engine keeps samples "
                                                         "(VictoriaMetrics' -retentionPeriod: 30d, 1y)."),
               series_url: str = typer.Option(None, "--series-url",
                                              help="A VictoriaMetrics already running (default: start one, "
                                                   "its data beside the database)."),
               series_port: int = typer.Option(None, "--series-port", min=1, max=65535,
                                               help="Where hosts write samples, on the --listen address "
                                                    "(default: the --listen port + 1)."),
               rules: list[Path] = typer.Option(None, "--rules",
                                                help="Rules files vmalert evaluates instead of the shipped ones "
                                                     "(repeat it; see docs/alerts.md)."),
               no_rules: bool = typer.Option(False, "--no-rules",
                                             help="Start no vmalert: your own vmalert or Prometheus evaluates "
                                                  "the rules."),
               rules_interval: float = typer.Option(30.0, "--rules-interval", min=0.1,
                                                    help="Seconds between vmalert's evaluations."),
               log_format: str = LogFormatOpt,
               verbose: bool = typer.Option(False, "--verbose", "-v")) -> None:
    """Run the controller: agents push to it; it stores, detects and alerts, and serves the API.
    Several may run on one PostgreSQL database (replicas): the lease holder runs the detectors."""
    from clockfabric.controller.alertmanager import check_url
    from clockfabric.controller.config import load_config
    from clockfabric.controller.detectors import DetectorSet
    from clockfabric.controller.fleet import Fleet
    from clockfabric.controller.monitor import Monitor
    from clockfabric.controller.series.vmalert import RuleOptions  # noqa: F811 - at run time
    from clockfabric.controller.server import Listen, server
    from clockfabric.controller.storage.open import open_storage
    from clockfabric.topology import load

    if topology and lab_name:
        raise ClockfabricError("give --topology FILE or --lab NAME (whose nodes to enroll), not both")
    enroll = _enroll(enroll, enroll_unknown, bool(topology or lab_name))
    setup_logging(log_format, verbose=verbose)
    for url in alertmanager or []:  # now, not when a replica takes the lease and builds its monitor
        check_url(url)
    host, port = _listen(listen)
    _series_options(series_url, series_retention)
    _rules_options(rules or [], no_rules)
    listen_at = Listen(host, port, tls_cert, tls_key)
    listen_at.check()
    detector_config = load_config(config) if config else None  # a mistake is one line, before anything starts
    token = read_token(token_file, create=new_token)
    viewer_token = read_token(viewer_token_file) if viewer_token_file else None
    topo = load(topology) if topology else (Lab.open(lab_name).topology if lab_name else None)
    nodes = sorted(topo.hosts) + sorted(topo.switches) if topo else []
    storage = open_storage(db)
    embedded = None
    replica = None
    series: SeriesPath | None = None
    try:
        embedded = None if alertmanager else _embedded_alertmanager(db)
        urls = [embedded.url] if embedded else list(alertmanager)
        rule_options = None if no_rules else RuleOptions(tuple(urls), tuple(rules or ()), rules_interval,
                                                         listen_at.url)
        series = path = start_series(db, token, series_url, host, series_port or port + 1,
                                     (tls_cert, tls_key) if tls_cert and tls_key else None,
                                     [h.name for h in storage.hosts()], series_retention, rule_options)

        def make_monitor() -> Monitor:
            return Monitor.create(storage, topology=topo, config=detector_config, alertmanagers=urls,
                                  generator_url=f"{listen_at.url}/dashboard/", series=path.series)

        if db.startswith(("postgresql://", "postgres://")):  # maybe one of several replicas: the leader detects
            from clockfabric.controller.lease import Lease
            from clockfabric.controller.replica import Replica

            replica = Replica(storage, Lease(db), make_monitor)
        monitor = None if replica else make_monitor()
        fleet = Fleet(storage, hosts=nodes, stale_s=stale, enroll=enroll, monitor=monitor, replica=replica,
                      series=path, asks=DetectorSet(detector_config, topo).asks())
        err.print(f"controller on {listen_at.url} (dashboard {listen_at.url}/dashboard/), storage {db}, "
                  f"series {path.url} (hosts write at port {path.write_port}), {len(nodes)} enrolled nodes"
                  + {"pending": ", others held for approval", "any": ", others enrolled as they push"}.get(enroll, "")
                  + (", a replica: detectors run on the lease holder" if replica else "")
                  + f"; alerts to Alertmanager {', '.join(urls)}" + (" (started here)" if embedded else "")
                  + (f"; rules by vmalert {path.rules.url}" if path.rules else "; no rules evaluated here"))
        server(fleet, token, listen_at, viewer_token).run()
    finally:
        if replica:
            replica.close()
        if series:
            series.stop()
        storage.close()
        if embedded:
            embedded.stop()


def _enroll(given: str | None, unknown: bool, topology: bool) -> str:
    """--enroll, checked before anything starts (--enroll-unknown says `any`)."""
    from clockfabric.controller.fleet import ENROLL_MODES

    if given is not None and given not in ENROLL_MODES:
        raise ClockfabricError(f"--enroll {given!r}: give one of {', '.join(ENROLL_MODES)}")
    if unknown and given not in (None, "any"):
        raise ClockfabricError(f"--enroll-unknown and --enroll {given} contradict each other: give one")
    return "any" if unknown else given or ("topology" if topology else "any")


def _embedded_alertmanager(db: str) -> EmbeddedAlertmanager:
    """One prometheus-alertmanager on loopback, its data beside the database; its URL is written
    there too (`url`), for a tool on this host."""
    from clockfabric.controller.alertmanager_embedded import EmbeddedAlertmanager, data_dir  # noqa: F811 - at run time

    embedded = EmbeddedAlertmanager(data_dir(db)).start()
    (embedded.data / "url").write_text(embedded.url + "\n")
    return embedded


def _series_options(url: str | None, retention: str) -> None:
    """The series options, checked before anything starts."""
    if url is not None and not url.startswith(("http://", "https://")):
        raise ClockfabricError(f"--series-url {url!r}: give http(s)://HOST:PORT of a VictoriaMetrics")
    if not re.fullmatch(r"\d+[hdwy]?", retention):
        raise ClockfabricError(f"--series-retention {retention!r}: give a number with h, d, w or y, e.g. 90d")


def _rules_options(files: list[Path], none: bool) -> None:
    """The rules options, checked before anything starts."""
    if none and files:
        raise ClockfabricError("--rules and --no-rules: give the files vmalert evaluates, or run no vmalert, not both")
    for f in files:
        if not f.is_file():
            raise ClockfabricError(f"--rules {f}: no such file; give a rules file (YAML groups, as "
                                   "deploy/prometheus/clockfabric-rules.yml)")


def start_series(db: str, token: str, url: str | None, address: str, port: int, tls: tuple[Path, Path] | None,
                 hosts: list[str], retention: str, rules: RuleOptions | None = None) -> SeriesPath:
    """The series engine (started here when no URL is given, its data beside the database), the
    gate the hosts write through, on the controller's address, and vmalert on the engine (`rules`)."""
    from clockfabric.controller.series.engine import beside
    from clockfabric.controller.series.path import SeriesPath

    series = SeriesPath(data_dir=beside(db), fleet_token=token, url=url, gate_address=address, gate_port=port,
                        tls=tls, retention=retention, rules=rules)
    series.start(hosts)
    if series.rules is not None:  # for a tool on this host, as the Alertmanager's
        (series.data_dir / "vmalert" / "url").write_text(series.rules.url + "\n")
    return series


def switch_agent(switch: str = typer.Option(..., "--switch", help="This switch's name."),
                 lab_name: str = LabOpt, controller_url: str = ControllerOpt, token_file: Path = TokenOpt,
                 ca_file: str = typer.Option(None, "--ca-file"), log_format: str = LogFormatOpt) -> None:
    """Watch a switch's links by netlink and push their events to the controller (the lab's switches)."""
    from clockfabric.agent.switch import SwitchAgent
    setup_logging(log_format)
    lab = Lab.open(lab_name)
    if switch not in lab.topology.switches:
        raise ClockfabricError(f"{switch!r} is not a switch of lab {lab.name}")
    ctl = lab_controller(lab, controller_url, token_file)
    ports = sorted({lk.port(switch).iface for lk in lab.topology.links if switch in (lk.a.node, lk.b.node)})
    SwitchAgent(switch, ports, ctl.url, ctl.token, ca_file=ca_file,
                event_log=lab.dir / "switch-events" / f"{switch}.events").run()


# ---- reading ----------------------------------------------------------------------------------
def events(lab_name: str = LabOpt, controller_url: str = ControllerOpt, token_file: Path = TokenOpt,
           since: str = typer.Option(None, "--since", help="Only newer events: a duration like 5m or 30s."),
           host: str = typer.Option(None, "--host"), kind: str = typer.Option(None, "--kind"),
           limit: int = typer.Option(1000, "--limit", min=1), as_json: bool = JsonOpt) -> None:
    """Events the controller has stored (link downs and ups, agent starts, drops), oldest first."""
    lab = Lab.open(lab_name) if not (controller_url and token_file) else None
    ctl = lab_controller(lab, controller_url, token_file)
    since_ns = None
    if since:
        try:
            since_ns = time.time_ns() - int(parse_duration(since) * 1e9)
        except ValueError as e:
            raise ClockfabricError(f"--since: {e}") from None
    rows = fetch_all(ctl, "/api/v1/events", cursor="after_id", start=0, most=limit,
                     since_ns=since_ns, host=host, kind=kind)
    if as_json:
        print_json(rows)
        return
    t = Table(title=f"{len(rows)} events")
    for col in ("time (UTC)", "host", "kind", "device", "synced"):
        t.add_column(col)
    for ev in rows:
        stamp = time.strftime("%H:%M:%S", time.gmtime(ev["t_ns"] / 1e9)) + f".{ev['t_ns'] % 10**9 // 10**6:03d}"
        t.add_row(stamp, ev["host"], ev["kind"], ev["device"], "yes" if ev["synced"] else "no")
    out.print(t)


def monitor(lab_name: str = LabOpt, seconds: str = typer.Option("30s", "--seconds", "-s", help="How long to watch."),
            config: Path = typer.Option(None, "--config", help="Detector thresholds (YAML)."),
            alertmanager: list[str] = AlertmanagerOpt,
            keep: bool = typer.Option(False, "--keep",
                                      help="Leave controller and agents running; `lab down` stops them."),
            as_json: bool = JsonOpt) -> None:
    """Watch a lab live: nodes, links, flaps, worst paths, alerts. Starts the controller and agents
    on it unless a kept monitor is already running there."""
    from clockfabric.lab.monitoring import LabFleet

    require_root()
    lab = Lab.open(lab_name)
    try:
        duration = parse_duration(seconds)
    except ValueError as e:
        raise ClockfabricError(f"--seconds: {e}") from None
    fleet = LabFleet(lab, config=config, alertmanagers=alertmanager or [])
    started = not fleet.running()
    if started:
        err.print(f"starting the controller on {fleet.host} ({fleet.url}), switch agents and host agents")
        fleet.start()
        _wait_pushing(fleet)
    err.print(f"dashboard: {fleet.url}/dashboard/ on the lab's network (a browser there: `clockfabric lab exec "
              f"{fleet.host} --lab {lab.name} -- chromium ...`); token in {fleet.token_file}")
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


def _wait_pushing(fleet: LabFleet) -> None:
    nodes = len(fleet.lab.topology.hosts) + len(fleet.lab.topology.switches)
    timeout_s = 90.0
    with progress_bar("agents") as update:
        ok = fleet.wait_pushing(timeout_s, progress=update)
    if ok < nodes:
        err.print(f"[yellow]only {ok} of {nodes} nodes push after {timeout_s:.0f} s; logs in {fleet.logs}")


def _view(lab: Lab, fleet: LabFleet) -> dict:
    def get(path: str, **params) -> dict:
        return fleet.api(path, **params)

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
        t.add_row(f"link {lk['host']}:{lk['device']}",
                  f"{'up' if lk['up'] else 'DOWN'}, {lk['transitions']} transitions")
    for p in view["worst_paths"]:
        t.add_row(f"path {p['src']}->{p['dst']} {p['path']}", f"p99 {p['owd_ns'] / 1e3:.1f} µs")
    for a in view["alerts"]:
        t.add_row(f"[red]alert {a['kind']}", a["message"])
    return t
