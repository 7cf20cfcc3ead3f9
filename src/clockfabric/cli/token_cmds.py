"""`clockfabric token`: credentials derived from the fleet token."""

from __future__ import annotations

from pathlib import Path

import typer

from clockfabric.auth.credential import host_token
from clockfabric.controller.token import read_token
from clockfabric.errors import ClockfabricError

app = typer.Typer(help="Credentials derived from the fleet token: a host's own, to push as that host only.",
                  no_args_is_help=True)


@app.command("host")
def host(name: str = typer.Argument(..., help="The host (or switch) as the fleet topology names it."),
         token_file: Path = typer.Option(..., "--token-file", help="The fleet token file."),
         out: Path = typer.Option(None, "--out", "-o", help="Write it to this file (mode 600), not to stdout.")
         ) -> None:
    """Print (or write) NAME's push credential: give it to NAME's agent as its --token-file."""
    if not name or any(c.isspace() or c == ":" or not c.isprintable() for c in name):
        raise ClockfabricError(f"host name {name!r}: give it as the topology names it (no spaces, colons or "
                               "control characters)")
    credential = host_token(read_token(token_file), name)
    if out is None:
        print(credential)
        return
    out.parent.mkdir(parents=True, exist_ok=True)
    out.touch(mode=0o600)
    out.write_text(credential + "\n")
