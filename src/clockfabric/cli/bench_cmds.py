"""`clockfabric bench ...`: benchmarks that run on a lab they build and remove."""

from __future__ import annotations

import time
from pathlib import Path

import typer
from rich.table import Table

from clockfabric.cli.output import err, out, print_json, require_root
from clockfabric.errors import ClockfabricError

app = typer.Typer(help="Benchmarks on a lab of their own, against a baseline in the same run.", no_args_is_help=True)


def _fmt(value, suffix: str = "") -> str:
    return "-" if value is None else f"{value:g}{suffix}"


@app.command()
def failover(scenarios: str = typer.Option("flap-1s,flap-20s,flap-120s,spine-silent,flaps-10,isolated",
                                           "--scenarios", help="Comma-separated scenarios to run."),
             agents: str = typer.Option("both", "--agents", help="Run with agents: both, on or off."),
             timeouts: str = typer.Option("30s,default", "--timeouts",
                                          help="Collective timeouts to run: 30s (like RDMA), default (gloo's)."),
             soak: float = typer.Option(0.0, "--soak", help="Instead: this many seconds on a healthy fabric under "
                                                           "background TCP, counting false reroutes."),
             hold_down: float = typer.Option(5.0, "--hold-down", help="The agents' hold-down, seconds."),
             script: Path = typer.Option(Path("examples/ddp_train.py"), "--script", help="The DDP job."),
             out_dir: Path = typer.Option(Path("bench/results"), "--out", help="Where JSON and job logs go."),
             as_json: bool = typer.Option(False, "--json", help="Print JSON for scripts.")) -> None:
    """A real DDP job through link and NIC failures, without and with the agents."""
    from clockfabric.bench import failover as fb

    require_root()
    modes = {"both": [False, True], "on": [True], "off": [False]}.get(agents)
    if modes is None:
        raise ClockfabricError(f"--agents must be both, on or off (got {agents!r})")
    chosen_timeouts = [t.strip() for t in timeouts.split(",") if t.strip()]
    if bad := [t for t in chosen_timeouts if t not in fb.TIMEOUTS]:
        raise ClockfabricError(f"--timeouts: {bad[0]!r} is not one of {', '.join(fb.TIMEOUTS)}")
    started = time.monotonic()

    def progress(line: str) -> None:
        err.print(f"[dim]{time.monotonic() - started:6.0f}s[/] {line}", highlight=False)

    if soak > 0:
        report = fb.soak(soak, out_dir=out_dir, hold_down_s=hold_down, progress=progress)
        if as_json:
            print_json(report)
        else:
            out.print(f"soak {soak:g} s: {report['moves']} reroutes on a healthy fabric; "
                      f"decisions {report['decisions'] or 'none'}; throughput {report['throughput_mbps']} Mbit/s")
        return
    report = fb.run([s.strip() for s in scenarios.split(",") if s.strip()], agent_modes=modes,
                    timeouts=chosen_timeouts, out_dir=out_dir, script=script, hold_down_s=hold_down,
                    progress=progress)
    if as_json:
        print_json(report)
        return
    table = Table(title=f"failover: DDP job on 4 hosts, no-failure training {report['baseline']['training_s']:.1f} s, "
                        f"median step {report['baseline']['median_step_s']:.3f} s")
    for col in ("scenario", "agents", "timeout", "outcome", "detection", "reroute", "worst step / median",
                "training / no-failure", "longest stall", "moves"):
        table.add_column(col)
    for r in report["runs"]:
        table.add_row(r["scenario"], "on" if r["agent"] else "off", r["timeout"], r["outcome"],
                      _fmt(r["detection_s"], " s"), _fmt(r["reroute_s"], " s"), _fmt(r["worst_step_over_median"], "x"),
                      _fmt(r["total_over_baseline"], "x"), _fmt(r["longest_stall_s"], " s"), str(r["moves"]))
    out.print(table)
    err.print(f"JSON and job logs in {out_dir}")
