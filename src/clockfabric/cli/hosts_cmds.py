"""`clockfabric hosts pending`, `hosts approve NAME...`, `hosts reject NAME...`: hosts a controller
run with `--enroll pending` holds until an operator says which belong to the fleet."""

from __future__ import annotations

import time
from pathlib import Path

import typer
from rich.table import Table

from clockfabric.cli.job_cmds import ControllerOpt, JsonOpt, LabOpt, TokenOpt, _controller
from clockfabric.console import err, out, print_json
from clockfabric.controller.client import api
from clockfabric.errors import ClockfabricError

app = typer.Typer(help="Hosts waiting for approval: list them, approve them into the fleet, or reject them.",
                  no_args_is_help=True)


@app.command()
def pending(lab_name: str = LabOpt, controller_url: str = ControllerOpt, token_file: Path = TokenOpt,
            as_json: bool = JsonOpt) -> None:
    """Hosts waiting for approval (and those rejected): address, what each NIC hears, last push."""
    found = api(_controller(lab_name, controller_url, token_file), "/api/v1/pending")
    if as_json:
        print_json(found["items"])
        return
    waiting = [h for h in found["items"] if h["state"] == "pending"]
    t = Table(title=f"{len(waiting)} hosts wait for approval"
                    + ("" if found.get("enroll") == "pending" else
                       f" (the controller runs with --enroll {found.get('enroll')}: it holds no new ones)"))
    for col in ("host", "state", "address", "LLDP neighbours", "last push"):
        t.add_column(col)
    now = time.time_ns()
    for h in found["items"]:
        heard = ", ".join(f"{d} {n or '-'}" for d, n in sorted(h["neighbours"].items())) or "-"
        t.add_row(h["host"], h["state"], h["address"] or "-", heard, f"{(now - h['last_seen_ns']) / 1e9:.0f} s ago")
    out.print(t)


@app.command()
def approve(names: list[str] = typer.Argument(None, help="The hosts, as `clockfabric hosts pending` lists them."),
            every: bool = typer.Option(False, "--all", help="Every host waiting now (they are listed)."),
            lab_name: str = LabOpt, controller_url: str = ControllerOpt, token_file: Path = TokenOpt,
            as_json: bool = JsonOpt) -> None:
    """Admit hosts into the fleet: their next pushes are stored."""
    _decide("approve", "approved", names or [], every, _controller(lab_name, controller_url, token_file), as_json)


@app.command()
def reject(names: list[str] = typer.Argument(None, help="The hosts, as `clockfabric hosts pending` lists them."),
           lab_name: str = LabOpt, controller_url: str = ControllerOpt, token_file: Path = TokenOpt,
           as_json: bool = JsonOpt) -> None:
    """Refuse hosts' pushes from now on (`hosts approve` admits them later still)."""
    _decide("reject", "rejected", names or [], False, _controller(lab_name, controller_url, token_file), as_json)


def _decide(verb: str, done: str, names: list[str], every: bool, ctl, as_json: bool) -> None:
    if every and names:
        raise ClockfabricError("give host names or --all, not both")
    if every:
        names = [h["host"] for h in api(ctl, "/api/v1/pending")["items"] if h["state"] == "pending"]
        if not names:
            err.print("no host waits for approval")
    elif not names:
        raise ClockfabricError("which hosts? give their names (`clockfabric hosts pending` lists them)"
                               + (" or --all" if verb == "approve" else ""))
    result = api(ctl, f"/api/v1/pending/{verb}", body={"hosts": names}) if names else {done: []}
    if as_json:
        print_json(result)
        return
    for h in result[done]:
        out.print(f"{h}: {done}")
