"""The `clockfabric` command."""

from __future__ import annotations

import importlib
import importlib.metadata
import logging
import signal
import sys
import warnings
from typing import NoReturn

import typer
import typer.core
from rich.markup import escape

from clockfabric import __version__
from clockfabric.console import err
from clockfabric.errors import USAGE_EXIT, ClockfabricError

# installed with the `controller` extra only (pyproject.toml): a host with the agent alone lacks them
CONTROLLER_ONLY = frozenset({"fastapi", "starlette", "uvicorn", "psycopg"})

# the click typer runs on: newer typer carries its own copy, whose exceptions are the ones raised,
# and installs no other (nothing else may bring click to a host with the agent alone)
CLICK = (getattr(typer.core, "_click", None) or importlib.import_module("click")).exceptions

# command -> (module in clockfabric.cli, its attribute, whether it is a group of commands, its
# summary for `clockfabric --help`). Only the module of the command given is imported: a lab starts
# one agent per host, and on a few cores their start-up (imports) is what a 32-host sync waits
# for; a Slurm prolog has 2 s in all. The summaries are the commands' own (a unit test holds them
# to it), so the list of commands imports none of them.
COMMANDS = {
    "topology": ("topology_cmds", "app", True, "Write, show and validate topology files."),
    "lab": ("lab_cmds", "app", True, "The emulated cluster: network namespaces as hosts and switches."),
    "bench": ("bench_cmds", "app", True,
              "Benchmarks, each against a baseline or an expectation in the same run. With no name: the list."),
    "agent": ("clock_cmds", "agent", False, "Run the host agent: probe peers, keep the clock mapping, publish state."),
    "sync": ("clock_cmds", "sync", False,
             "Start agents on every lab host, run, and report every host's error against the truth."),
    "owd": ("clock_cmds", "owd", False,
            "One-way delays between lab hosts from the agents' latest state (run `sync --keep` first)."),
    "doctor": ("doctor_cmds", "doctor", False,
               "Check this host is ready for its agent: key, credential, clock, NICs, routes, controller, ports."),
    "key": ("key_cmds", "app", True, "Make the fleet key that seals what agents send each other."),
    "controller": ("monitor_cmds", "controller", False,
                   "Run the controller: agents push to it; it stores, detects and alerts, and serves the API. "
                   "Several may run on one PostgreSQL database (replicas): the lease holder runs the detectors."),
    "tls": ("tls_cmds", "app", True, "TLS for the controller: a private CA and its server certificate."),
    "token": ("token_cmds", "app", True,
              "Credentials derived from the fleet token: a host's own, to push as that host only."),
    "hosts": ("hosts_cmds", "app", True,
              "Hosts waiting for approval: list them, approve them into the fleet, or reject them."),
    "switch-agent": ("monitor_cmds", "switch_agent", False,
                     "Watch a switch's links by netlink and push their events to the controller (the lab's switches)."),
    "events": ("monitor_cmds", "events", False,
               "Events the controller has stored (link downs and ups, agent starts, drops), oldest first."),
    "monitor": ("monitor_cmds", "monitor", False,
                "Watch a lab live: nodes, links, flaps, worst paths, alerts. Starts the controller and agents "
                "on it unless a kept monitor is already running there."),
    "discover": ("discover_cmds", "discover", False,
                 "Build a fleet file from what the running agents hear by LLDP and the switches' own LLDP tables."),
    "audit": ("audit_cmds", "audit", False,
              "Audit the fleet: configuration, front-end and back-end network, collectives."),
    "paths": ("path_cmds", "paths", False,
              "Learn the distinct paths from one host to another, and a TCP source port for each (ECMP)."),
    "jobs": ("job_cmds", "jobs", False,
             "The jobs the controller knows: hosts, ranks, start, and whether they still run."),
    "job": ("job_cmds", "app", True, "One job: run a command as a named job, or show a job and its flows."),
    "qos": ("qos_cmds", "app", True, "Jobs' QoS: a class and weight per job, enforced from the hosts."),
    "train": ("train_cmds", "app", True,
              "Elastic training: spares take a lost rank's place, its state from peers' memory."),
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
    """The command tree: with `only`, that command in full (and `version`); without, every command
    by its summary, loaded only when it runs (what a bare `clockfabric --help` lists)."""
    app = typer.Typer(help="clockfabric: synced clocks, one-way delays and path control for AI cluster fabrics.",
                      no_args_is_help=True, pretty_exceptions_enable=False, add_completion=False)
    app.callback()(_options)
    for name, (module, attr, group, summary) in COMMANDS.items():
        if only is None:
            app.command(name=name, help=summary, add_help_option=False,
                        context_settings={"allow_extra_args": True, "ignore_unknown_options": True})(_deferred(name))
        elif name == only:
            obj = getattr(importlib.import_module(f"clockfabric.cli.{module}"), attr)
            if group:
                app.add_typer(obj, name=name)
            else:
                app.command(name=name)(obj)
    app.command()(version)
    return app


def _deferred(name: str):
    """A listed command: built and run with its arguments when it is called."""
    def run(ctx: typer.Context) -> object:
        return build_app(name)([name, *ctx.args], prog_name=ctx.find_root().info_name, standalone_mode=False)
    return run


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
    except ModuleNotFoundError as e:
        if (package := (e.name or "").split(".")[0]) not in CONTROLLER_ONLY:
            raise
        _error(f"`clockfabric {first}` needs {package}, which comes with the controller's install: "
               "pip install 'clockfabric[controller]'")
    except (KeyboardInterrupt, typer.Abort):  # before the command began
        err.print("interrupted")
        sys.exit(130)
    if code == 130:  # typer's exit for an interrupted command, after its cleanup ran
        err.print("interrupted")
    sys.exit(code if isinstance(code, int) else 0)  # typer.Exit(code) comes back as its code


def _error(message: str) -> NoReturn:
    """Bad input: USAGE_EXIT with the message, each of its lines as one line whatever the terminal's width."""
    for line in message.splitlines():  # the message as written: its brackets are not rich markup
        err.print(f"[red]error:[/] {escape(line)}", highlight=False, markup=True, soft_wrap=True)
    sys.exit(USAGE_EXIT)
