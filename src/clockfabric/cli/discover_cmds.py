"""`clockfabric discover`: a fleet file from what the running agents hear.

Each agent pushes its interfaces' LLDP neighbours and its address to the controller; this
reads them back (`/api/v1/hosts`, `/api/v1/neighbours`), assembles the topology they
describe (topology/discover.py) and writes it in the topology file format, ready for
`clockfabric controller --topology`, the audit and the lab.
"""

from __future__ import annotations

from pathlib import Path

import typer

from clockfabric.console import err
from clockfabric.controller.client import api
from clockfabric.lab.controller import lab_controller
from clockfabric.lab.state import Lab
from clockfabric.topology import dumps, save
from clockfabric.topology.discover import assemble, heard_from_samples


def discover(lab_name: str = typer.Option(None, "--lab", "-l", help="Lab name (default: the only lab that is up)."),
             controller_url: str = typer.Option(None, "--controller", help="Controller URL (default: the lab's)."),
             token_file: Path = typer.Option(None, "--token-file", help="File holding the fleet token."),
             output: Path = typer.Option(None, "--output", "-o", help="Write the fleet file here (default: print it)."),
             name: str = typer.Option("discovered", "--name", help="The topology's name.")) -> None:
    """Build a fleet file from the LLDP neighbours and addresses the running agents report."""
    lab = Lab.open(lab_name) if not (controller_url and token_file) else None
    ctl = lab_controller(lab, controller_url, token_file)
    rows = api(ctl, "/api/v1/hosts")["items"]
    pushing = {r["host"]: r["info"] or {} for r in rows if r["state"] == "ok"}
    if quiet := sorted(r["host"] for r in rows if r["state"] != "ok"):
        more = " ..." if len(quiet) > 5 else ""
        err.print(f"left out {len(quiet)} nodes not pushing now: {', '.join(quiet[:5])}{more}")
    samples = [s for s in api(ctl, "/api/v1/neighbours")["items"] if s["host"] in pushing]
    topo = assemble(pushing, heard_from_samples(samples), name)
    summary = (f"{len(topo.hosts)} hosts, {len(topo.switches)} switches, {len(topo.links)} links "
               f"on {len(topo.planes)} planes")
    if output is None:
        print(dumps(topo), end="")
        err.print(summary)
        return
    save(topo, output)
    err.print(f"{summary}: wrote {output}")
