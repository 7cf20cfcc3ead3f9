"""The options each `clockfabric` command accepts, read from its click command, so deploy files
(systemd units, Kubernetes manifests) are checked against the CLI as it is."""

from __future__ import annotations

import typer

from clockfabric.cli.main import COMMANDS, build_app


def accepted_options(command: str) -> set[str]:
    """Every option spelling `clockfabric COMMAND` accepts (--x, -x, --no-x)."""
    assert command in COMMANDS, f"no command {command!r}"
    group = typer.main.get_command(build_app(command))
    click_command = group.commands[command]  # type: ignore[attr-defined]
    return {opt for p in click_command.params for opt in (*p.opts, *p.secondary_opts)}


def used_options(argv: list[str]) -> list[str]:
    """The options an argument list passes (`--x=1` and `--x 1` both give --x)."""
    return [a.split("=", 1)[0] for a in argv if a.startswith("-")]


def unknown_options(argv: list[str]) -> list[str]:
    """Options in `clockfabric COMMAND ...` (argv without the program) the CLI does not accept."""
    known = accepted_options(argv[0])
    return [opt for opt in used_options(argv[1:]) if opt not in known]
