"""`clockfabric jobs`, `clockfabric job show ID`, `clockfabric job run --name N -- CMD`: the jobs on
the fleet and their flows, as the controller has them; a command run as a named job."""

from __future__ import annotations

import time
from pathlib import Path

import typer
from rich.table import Table

from clockfabric.cli.job_why_view import show_why
from clockfabric.console import out, print_json
from clockfabric.controller.client import Controller, api, fetch_all
from clockfabric.lab.controller import lab_controller
from clockfabric.lab.state import Lab

LabOpt = typer.Option(None, "--lab", "-l", help="Lab name (default: the only lab that is up).")
ControllerOpt = typer.Option(None, "--controller", help="Controller URL (default: the lab's controller).")
TokenOpt = typer.Option(None, "--token-file", help="File holding the fleet token.")
JsonOpt = typer.Option(False, "--json", help="Print JSON for scripts.")

app = typer.Typer(help="One job: run a command as a named job, or show a job and its flows.",
                  no_args_is_help=True)


def _controller(lab_name: str | None, url: str | None, token_file: Path | None) -> Controller:
    lab = Lab.open(lab_name) if not (url and token_file) else None
    return lab_controller(lab, url, token_file)


def _bits(bps: float | None) -> str:
    if bps is None:
        return "-"
    for unit, scale in (("Gbit/s", 1e9), ("Mbit/s", 1e6), ("kbit/s", 1e3)):
        if bps >= scale:
            return f"{bps / scale:.1f} {unit}"
    return f"{bps:.0f} bit/s"


def _delay(ns: float) -> str:
    return f"{ns / 1e6:.2f} ms" if abs(ns) >= 1e6 else f"{ns / 1e3:.0f} us"


def _owd(owd: dict) -> str:
    """"out 4.81 ms / 5.02 ms, in 31 us / 40 us": each direction's p50 / p99; RTT/2 where marked."""
    parts = []
    for direction in ("out", "in"):
        if (stats := (owd or {}).get(direction)) is None:
            continue
        if stats["source"] == "inband":
            parts.append(f"{direction} {_delay(stats['p50_ns'])} / {_delay(stats['p99_ns'])}")
        else:
            parts.append(f"{direction} {_delay(stats['p50_ns'])} (RTT/2)")
    return ", ".join(parts) or "-"


def _when(t_ns: int) -> str:
    return time.strftime("%Y-%m-%d %H:%M:%S", time.gmtime(t_ns / 1e9))


def jobs(lab_name: str = LabOpt, controller_url: str = ControllerOpt, token_file: Path = TokenOpt,
         active_only: bool = typer.Option(False, "--active", help="Only jobs that still run."),
         as_json: bool = JsonOpt) -> None:
    """The jobs the controller knows: hosts, ranks, start, and whether they still run."""
    ctl = _controller(lab_name, controller_url, token_file)
    rows = fetch_all(ctl, "/api/v1/jobs", cursor="after", start="", active_only=active_only)
    if as_json:
        print_json(rows)
        return
    t = Table(title=f"{len(rows)} jobs")
    for col in ("job", "source", "hosts", "ranks", "processes", "started (UTC)", "state"):
        t.add_column(col)
    for j in rows:
        t.add_row(j["jobid"], j["source"], ", ".join(j["hosts"]), ", ".join(map(str, j["ranks"])) or "-",
                  str(j["processes"]), _when(j["start_ns"]), "running" if j["active"] else "ended")
    out.print(t)


@app.command()
def show(jobid: str = typer.Argument(..., help="The job's id, as `clockfabric jobs` lists it."),
         lab_name: str = LabOpt, controller_url: str = ControllerOpt, token_file: Path = TokenOpt,
         as_json: bool = JsonOpt) -> None:
    """One job: its hosts and ranks, and its flows (peers, rate, RTT, in-band one-way delays, retransmits, cwnd)."""
    ctl = _controller(lab_name, controller_url, token_file)
    job = api(ctl, f"/api/v1/jobs/{jobid}")
    if as_json:
        print_json(job)
        return
    out.print(f"job [bold]{job['jobid']}[/] ({job['source']}), started {_when(job['start_ns'])} UTC, "
              f"{'running' if job['active'] else 'ended'}")
    for h in job["by_host"]:
        out.print(host_line(h))
    t = Table(title=f"{len(job['flows'])} flows")
    for col in ("host", "local", "peer", "remote", "connections", "sent", "received", "RTT", "OWD in-band",
                "retransmits", "cwnd", "state"):
        t.add_column(col)
    for f in job["flows"]:
        t.add_row(f["host"], f["local"], f["peer"] or "?", f["remote"], str(len(f.get("connections", []))),
                  _bits(f["tx_bps"]), _bits(f["rx_bps"]),
                  "-" if f["rtt_us"] is None else f"{f['rtt_us'] / 1e3:.2f} ms", _owd(f.get("owd")),
                  "-" if f["retransmits_total"] is None else str(int(f["retransmits_total"])),
                  "-" if f["cwnd"] is None else str(int(f["cwnd"])), "active" if f["active"] else "ended")
    out.print(t)


def host_line(h: dict) -> str:
    """A host of the job: its ranks and the pids its push names (an ended process has none)."""
    pids = ", ".join(str(p["pid"]) for p in h["processes"] if p["pid"] is not None) or "-"
    ended = sum(p["pid"] is None for p in h["processes"])
    return f"  {h['host']}: ranks {', '.join(map(str, h['ranks'])) or '-'}, pids {pids}" + (
        f", {ended} ended" if ended else "")


@app.command()
def why(jobid: str = typer.Argument(..., help="The job's id, as `clockfabric jobs` lists it."),
        since: str = typer.Option("5m", "--since", help="The window to judge: 30s, 5m, 1h."),
        lab_name: str = LabOpt, controller_url: str = ControllerOpt, token_file: Path = TokenOpt,
        as_json: bool = JsonOpt) -> None:
    """Why the job is slow: a verdict in one sentence, its evidence, and each flow against its siblings."""
    ctl = _controller(lab_name, controller_url, token_file)
    found = api(ctl, f"/api/v1/jobs/{jobid}/why", since=since)
    if as_json:
        print_json(found)
        return
    show_why(found)


@app.command(context_settings={"ignore_unknown_options": True})
def run(name: str = typer.Option(..., "--name", "-n", help="The job's name: how agents and the controller call it."),
        run_id: str = typer.Option(None, "--run-id", help="This run's id (default: a new random one)."),
        qos: str = typer.Option("", "--qos", help="The QoS class it asks for, CLASS or CLASS:WEIGHT (a policy "
                                                  "set with `clockfabric qos set` wins)."),
        command: list[str] = typer.Argument(..., help="The command, after --.")) -> None:
    """Run a command as job NAME (CLOCKFABRIC_JOB in its environment), passing signals and its exit status through."""
    from clockfabric.qos.policy import parse_asked
    from clockfabric.workload.run import run as run_job

    if qos:
        parse_asked(name, qos)  # a mistake is one line, before the command starts
    raise typer.Exit(run_job(name, command, run_id, qos))
