"""The `clockfabric` command."""

from __future__ import annotations

import importlib
import importlib.metadata
import logging
import signal
import sys
import warnings

import typer

from clockfabric import __version__
from clockfabric.console import err
from clockfabric.errors import ClockfabricError

# command -> (module in clockfabric.cli, its attribute, whether it is a group of commands).
# Only the module of the command given is imported: a lab starts one agent per host, and on
# a few cores their start-up (imports) is what a 32-host sync waits for.
COMMANDS = {
    "topology": ("topology_cmds", "app", True),
    "lab": ("lab_cmds", "app", True),
    "bench": ("bench_cmds", "app", True),
    "agent": ("clock_cmds", "agent", False),
    "sync": ("clock_cmds", "sync", False),
    "owd": ("clock_cmds", "owd", False),
    "controller": ("monitor_cmds", "controller", False),
    "switch-agent": ("monitor_cmds", "switch_agent", False),
    "events": ("monitor_cmds", "events", False),
    "monitor": ("monitor_cmds", "monitor", False),
    "audit": ("audit_cmds", "audit", False),
    "paths": ("path_cmds", "paths", False),
    "jobs": ("job_cmds", "jobs", False),
    "job": ("job_cmds", "app", True),
    "train": ("train_cmds", "app", True),
}


def installed_version() -> str:
    """The installed package's version; a source tree run without installing has only its own."""
    try:
        return importlib.metadata.version("clockfabric")
    except importlib.metadata.PackageNotFoundError:
        return __version__


def version() -> None:
    """Print the version."""
    print(installed_version())


def _print_version(value: bool) -> None:
    if value:
        print(f"clockfabric {installed_version()}")
        raise typer.Exit()


def _options(
    show_version: bool = typer.Option(False, "--version", "-V", is_eager=True, callback=_print_version,
                                      help="Print the version and exit."),
) -> None:
    """clockfabric: synced clocks, one-way delays and path control for AI cluster fabrics."""


def build_app(only: str | None = None) -> typer.Typer:
    """The command tree; with `only`, just that command (and `version`)."""
    app = typer.Typer(help="clockfabric: synced clocks, one-way delays and path control for AI cluster fabrics.",
                      no_args_is_help=True, pretty_exceptions_enable=False, add_completion=False)
    app.callback()(_options)
    for name, (module, attr, group) in COMMANDS.items():
        if only is not None and name != only:
            continue
        obj = getattr(importlib.import_module(f"clockfabric.cli.{module}"), attr)
        if group:
            app.add_typer(obj, name=name)
        else:
            app.command(name=name)(obj)
    app.command()(version)
    return app


def _interrupted(signum: int, frame) -> None:
    # the interrupt may land inside pyroute2's asyncio machinery (an event loop half made, a
    # coroutine never awaited, a task left pending): the complaints of their finalizers at exit
    # would bury the one line that says what was cleaned up
    sys.unraisablehook = lambda _: None
    warnings.simplefilter("ignore", RuntimeWarning)
    logging.getLogger("asyncio").disabled = True
    raise KeyboardInterrupt


def main() -> None:
    # `kill`, `timeout` or a service manager end a command as Ctrl-C does, so whatever it was
    # building (a lab, a bench's lab) is taken down on the way out; daemons (agent, controller)
    # install their own handlers for a graceful stop
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, _interrupted)
    first = sys.argv[1] if len(sys.argv) > 1 else None
    try:
        build_app(first if first in COMMANDS else None)()
    except ClockfabricError as e:
        for line in str(e).splitlines():
            # soft_wrap: one line, whatever the terminal's width
            err.print(f"[red]error:[/] {line}", highlight=False, markup=True, soft_wrap=True)
        sys.exit(2)
    except KeyboardInterrupt:  # before the command began
        err.print("interrupted")
        sys.exit(130)
    except SystemExit as e:
        if e.code == 130:  # typer's exit for an interrupted command, after its cleanup ran
            err.print("interrupted")
        raise
