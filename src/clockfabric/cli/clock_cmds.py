"""`clockfabric agent`, `clockfabric sync`, `clockfabric owd`: the clock on every host."""

from __future__ import annotations

import os
import re
import shutil
import time
from pathlib import Path

import typer
from rich.table import Table

from clockfabric.agent.agent import Agent
from clockfabric.agent.config import METRICS_PORT, AgentConfig
from clockfabric.agent.service import SERVICES
from clockfabric.cli.host_options import this_host
from clockfabric.clock.evaluate import Sampler, coverage, frame_line, read_states, since, summary
from clockfabric.console import err, out, print_json, require_root
from clockfabric.errors import ClockfabricError
from clockfabric.lab.agents import LabAgents
from clockfabric.lab.state import Lab
from clockfabric.logs import LOG_FORMAT_HELP, setup_logging
from clockfabric.telemetry.base import COLLECTORS
from clockfabric.topology.classes import PRIORITY_DSCP
from clockfabric.units import parse_duration

MISSES_SHOWN = 20  # the samples a report lists where the bound missed the error

LabOpt = typer.Option(None, "--lab", "-l", help="Lab name (default: the only lab that is up).")
JsonOpt = typer.Option(False, "--json", help="Print JSON for scripts.")
PeersOpt = typer.Option(10, "--peers", min=1, help="Peers each host probes (K).")
WindowOpt = typer.Option(2.0, "--window", min=0.2, help="Seconds of probes in each pair fit.")
LogFormatOpt = typer.Option("text", "--log-format", help=LOG_FORMAT_HELP)
ProbeRateOpt = typer.Option(20.0, "--probe-rate", min=1.0, max=1000.0,
                            help="Exchanges per second each host starts, over all its peers (the agent's CPU "
                                 "grows with it; slowed on slow links by --probe-budget).")
DisableOpt = typer.Option([], "--disable", metavar="SERVICE",
                          help=f"Do not run this agent service (repeatable): {', '.join(SERVICES.names())}.")


def _seconds(text: str, what: str) -> float:
    try:
        return parse_duration(text)
    except ValueError as e:
        raise ClockfabricError(f"{what}: {e}") from None


def agent(host: str = typer.Option(None, "--host", help="This host's name (default $CLOCKFABRIC_NODE; with "
                                                         "--discover, else the hostname)."),
          lab_name: str = typer.Option(None, "--lab", help="Run on a lab host (default $CLOCKFABRIC_LAB)."),
          topology: Path = typer.Option(None, "--topology", help="Fleet topology YAML, for real hosts."),
          discover: bool = typer.Option(False, "--discover",
                                        help="No fleet file yet: run LLDP on the NICs, telemetry and pushes to "
                                             "--controller, which holds the host for approval (`controller "
                                             "--enroll pending`); no probes, clock or failover."),
          nics: list[str] = typer.Option([], "--nic", metavar="NAME",
                                         help="With --discover: a NIC to run LLDP on (repeatable; default: the "
                                              "Ethernet NICs with a device behind them)."),
          address: str = typer.Option(None, "--address",
                                      help="With --discover: the address this host is known by (default: the one "
                                           "it reaches the controller from)."),
          state_dir: Path = typer.Option(None, "--state-dir", help="Where to publish state (default per lab, "
                                                                    "or /run/clockfabric/agent)."),
          peers: int = PeersOpt, window: float = WindowOpt,
          update: float = typer.Option(1.0, "--update", min=0.1, help="Seconds between fits and reports."),
          probe_rate: float = ProbeRateOpt,
          quiet_rate: float = typer.Option(10.0, "--quiet-rate", min=1.0, max=1000.0,
                                           help="Exchanges per second while the clock is settled and the fabric "
                                                "idle (at most --probe-rate; equal to it: never slow down)."),
          metrics_port: int = typer.Option(METRICS_PORT, "--metrics-port", min=0, max=65535,
                                           help="Serve Prometheus /metrics on this port of the host's address "
                                                "(0: none)."),
          controller: str = typer.Option(None, "--controller",
                                         help="Push events and summaries to this controller URL, or to one of its "
                                              "replicas' URLs, comma-separated (by host name; the next on failure)."),
          token_file: Path = typer.Option(None, "--token-file", help="The fleet token for --controller."),
          ca_file: str = typer.Option(None, "--ca-file", help="CA to verify an https controller."),
          event_log: Path = typer.Option(None, "--event-log",
                                         help="Where events wait until the controller has them, across restarts "
                                              "(default STATE_DIR/HOST.events; on persistent disk to outlast a "
                                              "reboot)."),
          key_file: Path = typer.Option(None, "--key-file",
                                        help="The fleet keys (`id:hexkey` lines) that seal probes, heartbeats and "
                                             "control messages; reloaded on change or SIGHUP."),
          insecure: bool = typer.Option(False, "--insecure",
                                        help="Run without a key file: any host on the fabric can then forge probe "
                                             "replies and clock maps. Only for a trusted, isolated fabric."),
          probe_budget: float = typer.Option(0.0005, "--probe-budget", min=1e-6, max=0.01,
                                             help="Share of the slowest link the probes may use."),
          probe_dscp: int = typer.Option(PRIORITY_DSCP, "--probe-dscp", min=0, max=63,
                                         help="DSCP on probes and control messages: the fabric's strict-priority "
                                              "class (46, EF, as PTP usually runs; 0: best-effort)."),
          reference: str = typer.Option(None, "--reference", help="Host that runs the solver (and whose "
                                                                  "clock global time starts on)."),
          solvers: str = typer.Option("", "--solvers", metavar="HOST,...",
                                      help="Hosts that take over the clock solve, in order, when the solving "
                                           "agent falls silent (default: every other host by name; one without "
                                           "the solver extra is passed over)."),
          utc_system: bool = typer.Option(False, "--utc-system",
                                          help="This host's system clock is UTC (GPS, NTP or PTP): global time "
                                               "is steered to it, slowly."),
          failover: bool = typer.Option(None, "--failover/--no-failover",
                                        help="Move traffic off failed planes (default: on for hosts with 2+ NICs)."),
          hold_down: float = typer.Option(5.0, "--hold-down", min=0.0,
                                          help="Seconds a recovered plane must stay healthy before traffic returns."),
          steer: bool = typer.Option(False, "--steer/--no-steer",
                                     help="Transparent mode: move single TCP flows off a plane congested toward "
                                          "their peer (needs failover)."),
          lldp_interval: float = typer.Option(5.0, "--lldp-interval", min=0.0,
                                              help="Seconds between LLDP announcements on each NIC; 0: only "
                                                   "listen (where lldpd already announces)."),
          collectors: list[str] = typer.Option([], "--collector", metavar="NAME",
                                               help="Also run this telemetry collector (repeatable)."),
          no_collectors: list[str] = typer.Option([], "--no-collector", metavar="NAME",
                                                  help="Do not run this telemetry collector (repeatable)."),
          disabled: list[str] = DisableOpt,
          qos_file: Path = typer.Option(None, "--qos-file",
                                        help="Enforce the QoS policies in this JSON file (a list of {jobid, class, "
                                             "weight}), read again when it changes, instead of the controller's."),
          log_format: str = LogFormatOpt,
          verbose: bool = typer.Option(False, "--verbose", "-v")) -> None:
    """Run the host agent: probe peers, keep the clock mapping, publish state."""
    setup_logging(log_format, verbose=verbose)
    if both := sorted(set(collectors) & set(no_collectors)):
        raise ClockfabricError(f"--collector {both[0]} and --no-collector {both[0]}: choose one")
    if discover:
        from clockfabric.agent.discovery import DiscoveryAgent, host_nics, source_address

        name, token, given = _discovering(host, lab_name, topology, address, controller, token_file)
        COLLECTORS.enabled(tuple(collectors), tuple(no_collectors))  # an unknown name: one line naming the known
        state = state_dir or Path("/run/clockfabric/agent")
        state.mkdir(parents=True, exist_ok=True)
        assert controller  # _discovering: it is given
        DiscoveryAgent(name, nics or host_nics(), controller, token, address=given or source_address(controller),
                       metrics_port=metrics_port, collectors=tuple(collectors), no_collectors=tuple(no_collectors),
                       interval_s=update, ca_file=ca_file, lldp_interval_s=lldp_interval,
                       event_log=event_log or state / f"{name}.events").run()
        return
    if nics or address:
        raise ClockfabricError(f"{'--nic' if nics else '--address'} is for --discover: the fleet file names this "
                               "host's NICs and address")
    here = this_host(host, lab_name, topology, key_file, insecure)
    host, topo = here.name, here.topology
    state = state_dir or (here.lab.dir / "agents" if here.lab else Path("/run/clockfabric/agent"))
    state.mkdir(parents=True, exist_ok=True)
    token = ""
    if controller:
        from clockfabric.auth.credential import make_own, not_own
        from clockfabric.controller.token import read_token

        token = read_token(token_file)
        if problem := not_own(token, host, f"--token-file {token_file}"):
            raise ClockfabricError(f"{problem}; give this host its own: {make_own(host, token_file)}")
    successors = tuple(h.strip() for h in solvers.split(",") if h.strip())
    Agent(AgentConfig(host, topo, state, peers=peers, reference=reference, solvers=successors, window_s=window,
                      update_s=update, probe_rate=probe_rate, quiet_rate=quiet_rate, probe_budget=probe_budget,
                      metrics_port=metrics_port, probe_dscp=probe_dscp, utc_system=utc_system,
                      controller=controller, token=token, ca_file=ca_file, event_log=event_log,
                      failover=failover, hold_down_s=hold_down, steer=steer, lldp_interval_s=lldp_interval,
                      collectors=tuple(collectors), no_collectors=tuple(no_collectors),
                      disabled=tuple(disabled), key_file=here.key_file, insecure=insecure,
                      qos_file=qos_file)).run()


def _discovering(host: str | None, lab_name: str | None, topology: Path | None, address: str | None,
                 controller: str | None, token_file: Path | None) -> tuple[str, str, str | None]:
    """`agent --discover` (agent/discovery.py), its options checked: this host's name, its own push
    credential, and its address if given."""
    import ipaddress
    import socket

    from clockfabric.auth.credential import make_own, not_own
    from clockfabric.controller.token import read_token
    from clockfabric.topology.schema import NODE_NAME

    if topology or lab_name:
        raise ClockfabricError(f"--discover runs without a fleet file: drop {'--topology' if topology else '--lab'}")
    if not (controller and token_file):
        raise ClockfabricError("--discover pushes what the host hears to a controller: give --controller URL "
                               "--token-file FILE (this host's credential)")
    name = host or os.environ.get("CLOCKFABRIC_NODE") or socket.gethostname()
    if not re.match(NODE_NAME, name):
        raise ClockfabricError(f"host name {name!r}: give --host NAME as the fleet file will name it (letters, "
                               "digits, '-', '_', dots between labels)")
    if address is not None:
        try:
            address = str(ipaddress.ip_address(address))
        except ValueError:
            raise ClockfabricError(f"--address {address!r}: give an IPv4 or IPv6 address") from None
    token = read_token(token_file)
    if problem := not_own(token, name, f"--token-file {token_file}"):
        raise ClockfabricError(f"{problem}; give this host its own: {make_own(name, token_file)}")
    return name, token, address


def sync(lab_name: str = LabOpt, seconds: str = typer.Option("20s", "--seconds", "-s", help="How long to run."),
         peers: int = PeersOpt, window: float = WindowOpt, probe_rate: float = ProbeRateOpt,
         ptp4l: bool = typer.Option(True, "--ptp4l/--no-ptp4l", help="Run linuxptp ptp4l beside, as a baseline."),
         keep: bool = typer.Option(False, "--keep",
                                   help="Leave the agents running (for `owd`); `lab down` stops them."),
         survive_death: bool = typer.Option(False, "--survive-death",
                                            help="An agent that exits (a drill kills one) is reported, not fatal."),
         as_json: bool = JsonOpt) -> None:
    """Start agents on every lab host, run, and report every host's error against the truth."""
    require_root()
    lab = Lab.open(lab_name)
    duration = _seconds(seconds, "--seconds")
    if len(lab.topology.hosts) < 2:
        raise ClockfabricError("clock sync needs at least two hosts")
    scenario = {"lab": lab.name, "hosts": len(lab.topology.hosts), "peers": min(peers, len(lab.topology.hosts) - 1),
                "window_s": window, "probe_rate": probe_rate, "seconds": duration,
                "background": [p["what"] for p in lab.processes()] or ["none (idle)"]}
    agents = LabAgents(lab, peers=peers, window_s=window, probe_rate=probe_rate)
    mesh = _ptp4l_mesh(lab, agents.reference) if ptp4l else None
    sampler = Sampler(lab, agents.state_dir, agents.reference)
    agents.start()
    try:
        if mesh:
            mesh.start()
        died = _run(sampler, agents, duration, as_json, survive_death)
    finally:
        if mesh:
            mesh.stop()
        if not keep:
            agents.stop()
    report = {**_report(sampler, scenario, mesh, agents.reference, duration), "agents_died": died}
    if as_json:
        print_json(report)
    else:
        _print_report(report)


def _ptp4l_mesh(lab: Lab, master: str):
    if shutil.which("ptp4l") is None:
        err.print("ptp4l is not installed (apt-get install linuxptp, or make setup): its baseline is skipped")
        return None
    from clockfabric.clock.ptp4l import Ptp4lMesh

    slaves = [h for h in sorted(lab.topology.hosts) if h != master]
    return Ptp4lMesh(lab, master, slaves, work_dir=lab.dir / "ptp4l")


def _run(sampler: Sampler, agents: LabAgents, duration: float, quiet: bool, survive_death: bool) -> dict:
    """Sample until the time is up; the agents that died meanwhile (host -> seconds, last line)."""
    end = time.monotonic() + duration
    last_line = 0.0
    died: dict = {}
    while time.monotonic() < end:
        time.sleep(0.25)
        if dead := [d for d in agents.failed() if d.split(":", 1)[0] not in died]:
            if not survive_death:
                raise ClockfabricError(f"an agent died: {dead[0]} (full log in {agents.lab.dir / 'logs'})")
            for d in dead:
                died[d.split(":", 1)[0]] = {"after_s": time.monotonic() - sampler.start, "last_line": d}
        errors = sampler.sample()
        now = time.monotonic()
        if not quiet and now - last_line >= 2.0:
            last_line = now
            known = [abs(e) for h, e in errors.items() if e is not None and h != agents.reference]
            worst = f"worst |error| {max(known):,.0f} ns" if known else "no mapping yet"
            err.print(f"  {now - sampler.start:5.1f} s  {len(known)}/{len(errors) - 1} hosts synced, {worst}")
    return died


def _report(sampler: Sampler, scenario: dict, mesh, reference: str, duration: float) -> dict:
    # judged from convergence plus two windows, once each pair's drift has some history
    window = scenario["window_s"]
    settle = sampler.converged_s + 2 * window if sampler.converged_s is not None else duration / 2
    methods = {"clockfabric": summary(since(sampler.ours, settle)),
               "ntp_min_rtt": summary(since(sampler.ntp, settle))}
    if mesh is not None:
        samples = mesh.samples()
        methods["ptp4l"] = summary([off for s in samples.values() for t, off in s[len(s) // 4:]])
    else:
        methods["ptp4l"] = {"skipped": "ptp4l not run"}
    per_host: dict[str, list] = {}
    for t, h, e, b in sampler.judged:
        if t >= settle:
            per_host.setdefault(h, []).append((t, h, e, b))
    judged = [j for j in sampler.judged if j[0] >= settle]
    states = sampler.last_states
    probe_bytes = sum(s.get("counters", {}).get("wire_bytes_sent", 0) for s in states.values())
    return {"scenario": scenario, "reference": reference, "converged_s": sampler.converged_s,
            "stats_from_s": settle, "methods": methods,
            "hosts": {h: {**summary([e for _, _, e, _ in v]), **_bound(v)} for h, v in sorted(per_host.items())},
            "bound": _bound(judged),
            "unsynced": {h: {"after_s": t, "reason": why} for h, (t, why) in sorted(sampler.named.items())},
            "frame": sampler.frame_report(),
            "timeline": sampler.timeline(),
            "probe_bytes_per_host_per_s": probe_bytes / max(1, len(states)) / duration,
            "timestamping": next(iter(states.values()), {}).get("timestamping")}


def _bound(judged: list) -> dict:
    """The bound's coverage (share of samples with |error| <= bound), its size, and the first
    samples it missed (seconds, host, error, bound), to see when and where."""
    c = coverage(judged)
    missed = [[round(t, 1), h, round(e), round(b)] for t, h, e, b in judged if abs(e) > b][:MISSES_SHOWN]
    return {"coverage": c["coverage"], "bound_p50_ns": c["bound_p50_ns"], "bound_p99_ns": c["bound_p99_ns"],
            "missed": missed}


def _ns(v) -> str:
    return "-" if v is None else f"{v:,.0f}"


def _print_report(r: dict) -> None:
    s = r["scenario"]
    conv = f"converged in {r['converged_s']:.1f} s" if r["converged_s"] is not None else "did not converge to 1 µs"
    out.print(f"lab {s['lab']}: {s['hosts']} hosts, {s['peers']} peers each, {s['seconds']:.0f} s, "
              f"reference {r['reference']}; {conv}; load: {', '.join(s['background'])}")
    table = Table(title=f"|error| against the truth (after {r['stats_from_s']:.1f} s)")
    for col in ("method", "p50 ns", "p99 ns", "max ns", "samples"):
        table.add_column(col, justify="right")
    for name, m in r["methods"].items():
        if "skipped" in m:
            table.add_row(name, m["skipped"], "", "", "")
        else:
            table.add_row(name, _ns(m["p50_ns"]), _ns(m["p99_ns"]), _ns(m["max_ns"]), str(m["samples"]))
    out.print(table)
    b = r["bound"]
    if b["coverage"] is not None:
        out.print(f"bound: covers the error in {b['coverage']:.1%} of samples; median {_ns(b['bound_p50_ns'])} ns, "
                  f"p99 {_ns(b['bound_p99_ns'])} ns")
    out.print(frame_line(r["frame"]))
    for h, d in r.get("agents_died", {}).items():
        out.print(f"{h}'s agent exited {d['after_s']:.1f} s into the run")
    for h, u in r["unsynced"].items():
        out.print(f"{h} not synced from {u['after_s']:.1f} s: {u['reason']}")
    out.print(f"probe traffic {r['probe_bytes_per_host_per_s'] * 8 / 1e3:.1f} kbit/s per host; "
              f"timestamps: {r['timestamping']}")


def owd(lab_name: str = LabOpt, as_json: bool = JsonOpt) -> None:
    """One-way delays between lab hosts from the agents' latest state (run `sync --keep` first)."""
    require_root()
    lab = Lab.open(lab_name)
    states = read_states(lab.dir / "agents")
    rows = [row for st in states.values() for row in st.get("owd", [])]
    if not rows:
        raise ClockfabricError(f"no one-way delays in lab {lab.name} yet; "
                               f"run: clockfabric sync --lab {lab.name} --keep")
    newest = max(p.stat().st_mtime for p in (lab.dir / "agents").glob("*.json"))
    age = time.time() - newest
    if as_json:
        print_json({"lab": lab.name, "age_s": age, "paths": rows})
        return
    cells: dict[tuple[str, str], dict] = {}
    for r in rows:  # the matrix shows each direction's best path; --json has every path
        key = (r["src"], r["dst"])
        if key not in cells or r["p50_ns"] < cells[key]["p50_ns"]:
            cells[key] = r
    hosts = sorted(lab.topology.hosts)
    table = Table(title=f"lab {lab.name}: one-way delay p50 in µs, row -> column "
                        f"(state {age:.0f} s old; floor in --json)")
    table.add_column("from \\ to")
    for h in hosts:
        table.add_column(h, justify="right")
    for a in hosts:
        table.add_row(a, *[("" if a == b else f"{cells[(a, b)]['p50_ns'] / 1e3:.1f}" if (a, b) in cells else "·")
                           for b in hosts])
    out.print(table)
