"""The `clockfabric` command."""

from __future__ import annotations

import importlib
import importlib.metadata
import logging
import signal
import sys
import warnings
from typing import NoReturn

import click
import typer
import typer.core

from clockfabric import __version__
from clockfabric.console import err
from clockfabric.errors import USAGE_EXIT, ClockfabricError

# the click typer runs on: newer typer carries its own copy, whose exceptions are the ones raised
CLICK = getattr(typer.core, "_click", click).exceptions

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
    "discover": ("discover_cmds", "discover", False),
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
        # not standalone: usage errors come here, to be one line like every other bad input
        code = build_app(first if first in COMMANDS else None)(standalone_mode=False)
    except CLICK.NoArgsIsHelpError as e:
        e.show()  # the help, as a bare `clockfabric` or command group asks for it
        sys.exit(USAGE_EXIT)
    except CLICK.ClickException as e:
        hint = f" (see `{e.ctx.command_path} --help`)" if isinstance(e, CLICK.UsageError) and e.ctx else ""
        _error(f"{e.format_message()}{hint}")
    except ClockfabricError as e:
        _error(str(e))
    except (KeyboardInterrupt, typer.Abort):  # before the command began
        err.print("interrupted")
        sys.exit(130)
    if code == 130:  # typer's exit for an interrupted command, after its cleanup ran
        err.print("interrupted")
    sys.exit(code if isinstance(code, int) else 0)  # typer.Exit(code) comes back as its code


def _error(message: str) -> NoReturn:
    """Bad input: USAGE_EXIT with the message, each of its lines as one line whatever the terminal's width."""
    for line in message.splitlines():
        err.print(f"[red]error:[/] {line}", highlight=False, markup=True, soft_wrap=True)
    sys.exit(USAGE_EXIT)
