"""`clockfabric token`: credentials derived from the fleet token; `token revoke` refuses a host's."""

from __future__ import annotations

from pathlib import Path

import typer

from clockfabric.auth.credential import host_token
from clockfabric.cli.job_cmds import ControllerOpt, JsonOpt, LabOpt, TokenOpt, _controller
from clockfabric.console import out, print_json
from clockfabric.controller.client import api
from clockfabric.controller.token import read_token
from clockfabric.errors import ClockfabricError

app = typer.Typer(help="Credentials derived from the fleet token: a host's own, to push as that host only.",
                  no_args_is_help=True)


@app.command("host")
def host(name: str = typer.Argument(..., help="The host (or switch) as the fleet topology names it."),
         token_file: Path = typer.Option(..., "--token-file", help="The fleet token file."),
         epoch: int = typer.Option(0, "--epoch", min=0,
                                   help="The epoch `token revoke` gave the host (0: never revoked)."),
         to: Path = typer.Option(None, "--out", "-o", help="Write it to this file (mode 600), not to stdout.")
         ) -> None:
    """Print (or write) NAME's push credential: give it to NAME's agent as its --token-file."""
    if not name or any(c.isspace() or c in ":#" or not c.isprintable() for c in name):
        raise ClockfabricError(f"host name {name!r}: give it as the topology names it (no spaces, colons, # or "
                               "control characters)")
    credential = host_token(read_token(token_file), name, epoch)
    if to is None:
        print(credential)
        return
    to.parent.mkdir(parents=True, exist_ok=True)
    to.touch(mode=0o600)
    to.write_text(credential + "\n")


@app.command()
def revoke(names: list[str] = typer.Argument(..., help="The hosts whose credentials to refuse from now on."),
           lab_name: str = LabOpt, controller_url: str = ControllerOpt, token_file: Path = TokenOpt,
           as_json: bool = JsonOpt) -> None:
    """Refuse hosts' credentials from now on (a stolen one, a host retired); every other host's works on.
    Each host then needs a new credential, of the epoch printed."""
    result = api(_controller(lab_name, controller_url, token_file), "/api/v1/hosts/revoke", body={"hosts": names})
    if as_json:
        print_json(result)
        return
    for h, epoch in result["revoked"].items():
        out.print(f"{h}: revoked; its new credential: clockfabric token host {h} --epoch {epoch} "
                  f"--token-file FLEET_TOKEN -o {h}.token", highlight=False)
