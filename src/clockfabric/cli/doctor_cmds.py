"""`clockfabric doctor`: is this host ready for its agent?"""

from __future__ import annotations

from pathlib import Path

import typer

from clockfabric.agent.config import METRICS_PORT, AgentConfig
from clockfabric.cli.host_options import this_host
from clockfabric.console import out, print_json


def doctor(host: str = typer.Option(None, "--host", help="This host's name (default $CLOCKFABRIC_NODE)."),
           lab_name: str = typer.Option(None, "--lab", help="A lab host (default $CLOCKFABRIC_LAB)."),
           topology: Path = typer.Option(None, "--topology", help="Fleet topology YAML, as the agent is given it."),
           key_file: Path = typer.Option(None, "--key-file", help="The fleet keys the agent is given."),
           insecure: bool = typer.Option(False, "--insecure", help="The agent runs without a key file."),
           controller: str = typer.Option(None, "--controller",
                                          help="The controller URL(s) the agent pushes to, comma-separated."),
           token_file: Path = typer.Option(None, "--token-file", help="This host's push credential file."),
           ca_file: str = typer.Option(None, "--ca-file", help="CA to verify an https controller."),
           metrics_port: int = typer.Option(METRICS_PORT, "--metrics-port", min=0, max=65535,
                                            help="The agent's /metrics port (0: none)."),
           user: str = typer.Option(None, "--user", help="The agent's service user: the key and credential must be "
                                                         "readable by it (default: whoever runs doctor)."),
           unit: Path = typer.Option(None, "--unit", help="A systemd unit file: its ExecStart program must exist."),
           as_json: bool = typer.Option(False, "--json", help="Print JSON for scripts.")) -> None:
    """Check this host is ready for its agent: key, credential, clock, NICs, routes, controller, ports."""
    from clockfabric.doctor.base import Setup, failed, run
    from clockfabric.doctor.readable import user_ids

    here = this_host(host, lab_name, topology, key_file, insecure)
    if user:
        user_ids(user)  # an unknown user: one line, before any check
    # the agent's own configuration: whatever it would refuse, doctor refuses the same way
    cfg = AgentConfig(here.name, here.topology, Path("/run/clockfabric/agent"), controller=controller,
                      ca_file=ca_file, key_file=here.key_file, insecure=insecure, metrics_port=metrics_port)
    outcomes = run(Setup(cfg, token_file=token_file, user=user, unit=unit))
    if as_json:
        print_json({"host": here.name, "failed": failed(outcomes), "checks": [o.as_dict() for o in outcomes]})
    else:
        for o in outcomes:
            out.print(o.line(), highlight=False, markup=False, soft_wrap=True)
    if failed(outcomes):
        raise typer.Exit(1)
