"""`clockfabric bench clocksync-faults`: `bench clocksync`'s fault scenarios (faults.py) alone,
repeated, in a record of their own (by default bench/results/clocksync-faults.json)."""

from __future__ import annotations

from pathlib import Path

import typer

from clockfabric.bench.clocksync import command, faults
from clockfabric.bench.harness import BENCHMARKS, RESULTS

DEFAULT_JSON = RESULTS / "clocksync-faults.json"


@BENCHMARKS.register("clocksync-faults")
def main(sizes: str = typer.Option("8,32", help="Lab sizes (hosts), comma-separated: 8 and 32 are defined."),
         scenarios: str = typer.Option(",".join(faults.ORDER), help="Some of R0,K,L2,S,F."),
         repeats: int = typer.Option(5, min=1, max=20, help="Runs of each scenario; judged on the worst."),
         seconds: float = typer.Option(20.0, min=10, help="Seconds each sync runs beyond the agents' start-up."),
         prefix: str = typer.Option("csfault", "--lab-prefix", help="Name prefix of the labs it builds."),
         json_path: Path = typer.Option(DEFAULT_JSON, "--out", help="Where the record goes.")) -> None:
    """The clock sync fault scenarios at 8 and 32 hosts, repeated, against NTP-style and ptp4l."""
    command.run(sizes, scenarios, repeats, "8", seconds, False, prefix, json_path, record_as="clocksync-faults")
