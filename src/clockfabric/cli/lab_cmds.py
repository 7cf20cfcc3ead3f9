"""`clockfabric lab ...`: bring an emulated cluster up, poke it, check it, take it down."""

from __future__ import annotations

import subprocess
import sys
import time
from collections import defaultdict
from pathlib import Path

import typer
from rich.table import Table

from clockfabric.console import err, out, print_json, progress_bar, require_root, require_tool
from clockfabric.errors import ClockfabricError
from clockfabric.lab import build, check, impair, inspect, process, traffic
from clockfabric.lab.exec import exec_on
from clockfabric.lab.state import Lab, lab_names, lab_namespaces
from clockfabric.topology import Port, RateError, format_rate, load, parse_rate
from clockfabric.units import parse_duration

app = typer.Typer(help="The emulated cluster: network namespaces as hosts and switches.", no_args_is_help=True)
clock = typer.Typer(help="The hosts' virtual clocks (the ground truth for clock sync).", no_args_is_help=True)
link = typer.Typer(help="Take a link down or bring it back up.", no_args_is_help=True)
app.add_typer(clock, name="clock")
app.add_typer(link, name="link")

LabOpt = typer.Option(None, "--lab", "-l", help="Lab name (default: the only lab that is up).")
JsonOpt = typer.Option(False, "--json", help="Print JSON for scripts.")
BackgroundOpt = typer.Option(False, "--background", "-b",
                             help="Run detached; `lab down` stops it. Its output goes to the lab's folder.")


def _open(name: str | None) -> Lab:
    require_root()
    return Lab.open(name)


def _duration(text: str, what: str) -> float:
    try:
        return parse_duration(text)
    except ValueError as e:
        raise ClockfabricError(f"{what}: {e}") from None


def _rate(text: str) -> int:
    try:
        return parse_rate(text)
    except RateError as e:
        raise ClockfabricError(str(e)) from None


def _background(lab: Lab, what: str, argv: list[str]) -> None:
    """Start this same CLI detached on the lab, recorded so that `lab down` stops it."""
    log = lab.dir / "logs"
    log.mkdir(exist_ok=True)
    stamp = time.strftime("%H%M%S")
    with open(log / f"{what.split()[0]}-{stamp}.log", "ab") as f:  # two starts in one second share it
        proc = process.spawn([sys.executable, "-m", "clockfabric.cli", "lab", *argv, "--lab", lab.name],
                             new_session=True, stdin=subprocess.DEVNULL, stdout=f, stderr=subprocess.STDOUT)
    lab.register(proc.pid, what)
    err.print(f"started in the background (pid {proc.pid}): {what}; log in {log}")


# ---- life cycle ---------------------------------------------------------------------------
@app.command()
def up(topology: Path = typer.Argument(..., help="Topology YAML (see `clockfabric topology generate`)."),
       name: str = typer.Option(None, "--name", "-n", help="Lab name (default: the topology's name)."),
       max_offset: str = typer.Option("50ms", help="Host clock offsets drawn from ±this."),
       max_drift: float = typer.Option(100.0, help="Host clock drifts drawn from ±this, in ppm."),
       wander: str = typer.Option("0ns", help="Clock random walk: std of its change over one second."),
       seed: int = typer.Option(1, help="Seed for the clocks, so runs repeat."),
       as_json: bool = JsonOpt) -> None:
    """Build a lab from a topology file. On any failure nothing is left behind."""
    topo = load(topology)
    require_root()
    name = (name or topo.name).lower()
    settings = build.ClockSettings(round(_duration(max_offset, "--max-offset") * 1e9), max_drift,
                                   _duration(wander, "--wander") * 1e9, seed)
    started = time.monotonic()
    with progress_bar(f"lab {name}") as bar:
        lab = build.up(topo, name, settings, bar)
    took = time.monotonic() - started
    if as_json:
        print_json({"name": lab.name, "hosts": len(topo.hosts), "switches": len(topo.switches),
                    "links": len(topo.links), "seconds": round(took, 3), "state_dir": str(lab.dir)})
        return
    err.print(f"lab [bold]{lab.name}[/] is up: {len(topo.hosts)} hosts, {len(topo.switches)} switches, "
              f"{len(topo.links)} links in {took:.1f}s")


@app.command()
def down(name: str = typer.Argument(None, help="Lab to remove (default: the only lab)."),
         all_labs: bool = typer.Option(False, "--all", help="Remove every lab."),
         as_json: bool = JsonOpt) -> None:
    """Remove a lab: its processes, namespaces and record. Safe to repeat; cleans crashed labs too."""
    require_root()
    if all_labs:
        names = lab_names()
    elif name:
        names = [name]
    else:
        names = lab_names()
        if len(names) > 1:
            raise ClockfabricError(f"several labs are up ({', '.join(names)}); name one, or use --all")
    removed = {n: len(build.down(n)) for n in names}
    if as_json:
        print_json({"removed": removed})
        return
    if not removed:
        err.print("no lab is up; nothing to remove")
    for n, count in removed.items():
        err.print(f"lab {n}: removed {count} namespaces" if count else f"lab {n}: nothing left to remove")


@app.command()
def status(name: str = typer.Argument(None, help="Lab to describe (default: all labs)."),
           as_json: bool = JsonOpt) -> None:
    """Labs that are up; with a name (or one lab), its hosts, links and their live state."""
    require_root()
    known = lab_names()
    if name and name not in known:
        raise ClockfabricError(f"no lab named {name!r}; labs up: {', '.join(known) or 'none'}")
    names = [name] if name else known
    if len(names) != 1:
        rows = [_summary(n) for n in names]
        if as_json:
            print_json(rows)
            return
        if not rows:
            err.print("no lab is up; start one with: clockfabric lab up TOPOLOGY.yaml")
            return
        table = Table(title="labs")
        for col in ("lab", "state", "hosts", "switches", "links", "down", "age"):
            table.add_column(col)
        for r in rows:
            table.add_row(r["name"], r["state"], str(len(r["hosts"])), str(len(r["switches"])),
                          str(len(r["links"])), str(r["links_down"]), f"{r['age_s']}s" if r["age_s"] else "-")
        out.print(table)
        return
    s = _summary(names[0])
    if as_json:
        print_json(s)
        return
    if s["state"] == "incomplete":
        out.print(f"lab {s['name']} is incomplete (a crash?): {s['namespaces']} namespaces remain; "
                  f"remove it with: clockfabric lab down {s['name']}")
        return
    out.print(f"lab [bold]{s['name']}[/] ({s['state']}, up {s['age_s']}s): {len(s['hosts'])} hosts, "
              f"{len(s['switches'])} switches, {len(s['links'])} links ({s['links_down']} down)")
    hosts = Table(title="hosts")
    for col in ("host", "address", "NICs (plane)"):
        hosts.add_column(col)
    for h, info in s["hosts"].items():
        hosts.add_row(h, info["address"], ", ".join(f"{n} ({p})" for n, p in info["nics"].items()))
    out.print(hosts)
    links = Table(title="links")
    for col in ("a", "b", "state", "rate", "classes", "carrier changes"):
        links.add_column(col)
    for lk in s["links"]:
        state = "[green]up[/]" if lk["state"] == "up" else "[red]down[/]"
        rate = lk["rate"] or "?"
        if lk["rate"] != lk["rate_configured"]:
            rate += f" (topology: {lk['rate_configured']})"
        ends = {", ".join(c) or "one FIFO" for c in lk["classes"].values()}  # each end's, as the kernel has them
        links.add_row(lk["a"], lk["b"], state, rate, " / ".join(sorted(ends)), str(lk["carrier_changes"]))
    out.print(links)
    for p in s["processes"]:
        out.print(f"background pid {p['pid']}: {p['what']}")


def _summary(name: str) -> dict:
    try:
        return inspect.lab_status(Lab.open(name))
    except ClockfabricError:  # a crashed lab: no record, only namespaces; `lab down` removes it
        return {"name": name, "state": "incomplete", "hosts": {}, "switches": {}, "links": [], "links_down": 0,
                "age_s": None, "namespaces": len(lab_namespaces(name)), "processes": []}


# ---- using the lab ------------------------------------------------------------------------
@app.command("exec", context_settings={"allow_extra_args": True, "ignore_unknown_options": True})
def exec_(node: str = typer.Argument(..., help="Host or switch to run on."),
          command: list[str] = typer.Argument(..., help="The command, after --."),
          lab_name: str = LabOpt) -> None:
    """Run a command on a lab node: clockfabric lab exec h0 -- ping 10.0.0.2"""
    lab = _open(lab_name)
    exec_on(lab, lab.node(node), command)


@app.command("check")
def check_(lab_name: str = LabOpt, as_json: bool = JsonOpt,
           rounds: int = typer.Option(40, help="Most source ports tried per host pair and plane.")) -> None:
    """Every host reaches every other on every plane and every ECMP path (exit 1 if not)."""
    lab = _open(lab_name)
    started = time.monotonic()
    with progress_bar(f"lab {lab.name} check") as bar:
        results = check.check(lab, max_rounds=rounds, progress=lambda d, t: bar("pairs", d, t))
    took = time.monotonic() - started
    bad = [r for r in results if not r.ok]
    if as_json:
        print_json({"lab": lab.name, "ok": not bad, "pairs": len(results), "failed": len(bad),
                    "seconds": round(took, 2), "results": [r.as_dict() for r in results]})
        raise typer.Exit(1 if bad else 0)
    per: dict[tuple[str, int], list] = defaultdict(list)
    for r in results:
        per[(r.src, r.plane)].append(r)
    table = Table(title=f"lab {lab.name}: reachability over every plane and path")
    for col in ("host", "plane", "peers reached", "paths seen", "result"):
        table.add_column(col)
    for (host, plane), rs in sorted(per.items()):
        ok = all(r.ok for r in rs)
        table.add_row(host, str(plane), f"{sum(r.delivered for r in rs)}/{len(rs)}",
                      f"{sum(len(r.seen) for r in rs)}/{sum(len(r.expected) for r in rs)}",
                      "[green]ok[/]" if ok else "[red]FAIL[/]")
    out.print(table)
    for r in bad[:20]:
        why = "not delivered" if not r.delivered else ""
        if r.missing:
            why += ("; " if why else "") + "paths never seen: " + ", ".join("→".join(p) for p in r.missing)
        if r.unexpected:
            why += ("; " if why else "") + "unexpected paths: " + ", ".join("→".join(p) for p in r.unexpected)
        out.print(f"[red]FAIL[/] {r.src} → {r.dst} plane {r.plane}: {why}")
    if len(bad) > 20:
        out.print(f"... and {len(bad) - 20} more (see --json)")
    verdict = "[green]all reachable[/]" if not bad else f"[red]{len(bad)} of {len(results)} failed[/]"
    out.print(f"{verdict}: {len(results)} host pairs × planes, "
              f"{sum(len(r.expected) for r in results)} paths, {took:.2f}s")
    raise typer.Exit(1 if bad else 0)


# ---- impairments --------------------------------------------------------------------------
def _set_link(a: str, b: str, lab_name: str | None, up_: bool, silent: bool = False) -> None:
    lab = _open(lab_name)
    lk = impair.find_link(lab, a, b)
    impair.set_link(lab, lk, up=up_, silent=silent)
    err.print(f"link {lk.name} is {'up' if up_ else 'silently down' if silent else 'down'}")


SilentOpt = typer.Option(False, "--silent", help="Drop every packet but keep carrier: no link event, so the "
                                                 "fabric's routing never reacts (a grey failure).")


@link.command("down")
def link_down(a: str, b: str, lab_name: str = LabOpt, silent: bool = SilentOpt) -> None:
    """Fail the link between A and B (the far end drops: the near end sees carrier loss)."""
    _set_link(a, b, lab_name, False, silent)


@link.command("up")
def link_up(a: str, b: str, lab_name: str = LabOpt) -> None:
    """Restore the link between A and B, and the routes that used it."""
    _set_link(a, b, lab_name, True)


@app.command()
def flap(a: str, b: str, down_for: str = typer.Option("20s", "--down", help="How long each outage lasts."),
         up_for: str = typer.Option("10s", "--up", help="How long the link is up between outages."),
         count: int = typer.Option(3, help="How many outages."), lab_name: str = LabOpt,
         silent: bool = SilentOpt, background: bool = BackgroundOpt) -> None:
    """Take a link down for --down, up for --up, --count times; the link is always left up."""
    lab = _open(lab_name)
    lk = impair.find_link(lab, a, b)
    down_s, up_s = _duration(down_for, "--down"), _duration(up_for, "--up")
    if count < 1:
        raise ClockfabricError("--count must be at least 1")
    if background:
        _background(lab, f"flap {lk.name} {down_for} x{count}",
                    ["flap", a, b, "--down", down_for, "--up", up_for, "--count", str(count)]
                    + (["--silent"] if silent else []))
        return
    impair.flap(lab, lk, down_s=down_s, up_s=up_s, count=count, silent=silent,
                on_change=lambda i, is_up: err.print(f"{time.strftime('%H:%M:%S')} {lk.name} "
                                                     f"{'up' if is_up else 'down'} ({i + 1}/{count})"))


@app.command()
def rate(a: str, b: str, new_rate: str = typer.Argument(..., metavar="RATE", help="Like 200mbit or 10gbit."),
         lab_name: str = LabOpt) -> None:
    """Change the speed of the link between A and B, both directions."""
    lab = _open(lab_name)
    lk = impair.find_link(lab, a, b)
    bps = _rate(new_rate)
    impair.set_rate(lab, lk, bps)
    err.print(f"link {lk.name} now runs at {format_rate(bps)}")


@app.command()
def swap(a: str = typer.Argument(..., help="A host NIC, like h3:eth0."),
         b: str = typer.Argument(..., help="Another host's NIC, like h4:eth0."), lab_name: str = LabOpt) -> None:
    """Swap two hosts' cables (a cabling mistake: each NIC lands on the other's switch port); again to undo."""
    lab = _open(lab_name)
    try:
        ports = [Port.parse(x) for x in (a, b)]
    except ValueError as e:
        raise ClockfabricError(f"{e}; give HOST:NIC, like h3:eth0") from None
    impair.swap_cables(lab, *ports)
    state = "swapped" if lab.cables().get(a) == b else "back in place"
    err.print(f"cables of {a} and {b} {state}")


@app.command("traffic")
def traffic_(a: str = typer.Argument(..., help="Sending host."), b: str = typer.Argument(..., help="Receiving host."),
             seconds: float = typer.Option(10.0, help="How long to send."),
             udp_rate: str = typer.Option(None, "--udp", help="Send UDP at this rate instead of TCP."),
             streams: int = typer.Option(1, help="Parallel TCP streams."),
             lab_name: str = LabOpt, as_json: bool = JsonOpt, background: bool = BackgroundOpt) -> None:
    """Real iperf3 traffic from A to B (TCP by default)."""
    lab = _open(lab_name)
    require_tool("iperf3", "iperf3")
    bps = _rate(udp_rate) if udp_rate else None
    if seconds <= 0:
        raise ClockfabricError("--seconds must be above zero")
    if background:
        argv = ["traffic", a, b, "--seconds", str(seconds), "--streams", str(streams)]
        _background(lab, f"traffic {a}->{b} {seconds}s", argv + (["--udp", udp_rate] if udp_rate else []))
        return
    with err.status(f"iperf3 {a} → {b} for {seconds:g}s"):
        result = traffic.run(lab, a, b, seconds=seconds, rate_bps=bps, udp=bool(udp_rate), streams=streams)
    if as_json:
        print_json(result)
        return
    line = (f"{a} → {b} {result['protocol']}: received {result['received_bps'] / 1e6:.1f} Mbit/s "
            f"(sent {result['sent_bps'] / 1e6:.1f})")
    if result["protocol"] == "udp":
        line += f", lost {result['lost_percent']:.2f}%"
    else:
        line += f", {result['retransmits']} retransmits"
    out.print(line)


# ---- clocks -------------------------------------------------------------------------------
@clock.command("show")
def clock_show(lab_name: str = LabOpt, as_json: bool = JsonOpt) -> None:
    """Each host's clock model and its error against true time right now."""
    lab = _open(lab_name)
    now = time.time_ns()
    rows: list[dict] = [{"host": c.host, "offset_ns": c.offset_ns, "drift_ppm": c.drift_now_ppm,
             "wander_ns": c.wander_ns, "steps": len(c.steps), "error_now_ns": c.local_ns(now) - now}
                        for c in lab.clocks().values()]
    if as_json:
        print_json(rows)
        return
    table = Table(title=f"lab {lab.name}: host clocks (ground truth)")
    for col in ("host", "offset", "drift", "wander/√s", "steps", "error now"):
        table.add_column(col, justify="right")
    for r in rows:
        table.add_row(r["host"], f"{r['offset_ns'] / 1e6:+.3f} ms", f"{r['drift_ppm']:+.3f} ppm",
                      f"{r['wander_ns']:g} ns", str(r["steps"]), f"{r['error_now_ns'] / 1e6:+.3f} ms")
    out.print(table)


@clock.command("step")
def clock_step(host: str, size: str = typer.Argument(..., help="Step size, like 1ms or -250us."),
               lab_name: str = LabOpt) -> None:
    """Step a host's clock now, as a bad NTP slew or a VM pause would."""
    lab = _open(lab_name)
    if host not in lab.topology.hosts:
        raise ClockfabricError(f"{host!r} is not a host of lab {lab.name}")
    try:
        size_ns = round(parse_duration(size, allow_negative=True) * 1e9)
    except ValueError as e:
        raise ClockfabricError(str(e)) from None
    c = lab.clocks()[host]
    lab.save_clock(c.with_step(time.time_ns(), size_ns))
    err.print(f"{host}: clock stepped by {size_ns / 1e6:+.3f} ms")


@clock.command("rate")
def clock_rate(host: str, ppm: float = typer.Argument(..., help="The clock's drift from now on, in ppm (e.g. 500)."),
               lab_name: str = LabOpt) -> None:
    """Change a host's clock rate now, without a step, as a failing oscillator would."""
    lab = _open(lab_name)
    if host not in lab.topology.hosts:
        raise ClockfabricError(f"{host!r} is not a host of lab {lab.name}")
    if not abs(ppm) < 10_000:
        raise ClockfabricError(f"a drift of {ppm} ppm is not a clock's; give one within ±10000 ppm")
    lab.save_clock(lab.clocks()[host].with_rate(time.time_ns(), ppm))
    err.print(f"{host}: clock now runs at {ppm:+.3f} ppm")
