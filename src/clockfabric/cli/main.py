"""The `clockfabric` command."""

from __future__ import annotations

import sys

import typer

from clockfabric import __version__
from clockfabric.cli import (
    audit_cmds,
    bench_cmds,
    clock_cmds,
    lab_cmds,
    monitor_cmds,
    path_cmds,
    topology_cmds,
)
from clockfabric.cli.output import err
from clockfabric.errors import ClockfabricError

app = typer.Typer(help="clockfabric: synced clocks, one-way delays and path control for AI cluster fabrics.",
                  no_args_is_help=True, pretty_exceptions_enable=False, add_completion=False)
app.add_typer(topology_cmds.app, name="topology")
app.add_typer(lab_cmds.app, name="lab")
app.add_typer(bench_cmds.app, name="bench")
app.command()(clock_cmds.agent)
app.command()(clock_cmds.sync)
app.command()(clock_cmds.owd)
app.command()(monitor_cmds.controller)
app.command(name="switch-agent")(monitor_cmds.switch_agent)
app.command()(monitor_cmds.events)
app.command()(monitor_cmds.monitor)
app.command()(audit_cmds.audit)
app.command()(path_cmds.paths)


@app.command()
def version() -> None:
    """Print the version."""
    print(__version__)


def main() -> None:
    try:
        app()
    except ClockfabricError as e:
        for line in str(e).splitlines():
            err.print(f"[red]error:[/] {line}", highlight=False, markup=True, soft_wrap=True)  # one line, whatever the width
        sys.exit(2)
    except KeyboardInterrupt:
        err.print("interrupted")
        sys.exit(130)
