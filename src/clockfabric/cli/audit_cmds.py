"""`clockfabric audit`: is this cluster configured right, before a week-long job starts?"""

from __future__ import annotations

import sys
from pathlib import Path

import typer
from rich.table import Table

from clockfabric.console import err, out, print_json, progress_bar, require_root
from clockfabric.controller.token import read_token
from clockfabric.errors import ClockfabricError


def _split(values: list[str]) -> list[str]:
    return [v.strip() for text in values for v in text.split(",") if v.strip()]


def audit(lab_name: str = typer.Option(None, "--lab", "-l", help="Audit a lab (default: the only lab up)."),
          hosts_file: Path = typer.Option(None, "--hosts", help="Audit real hosts: the fleet's topology YAML."),
          via: str = typer.Option(None, "--via", help="With --hosts: reach hosts through this command prefix instead "
                                                      "of ssh, e.g. 'kubectl exec {host} --' ({host}, {address})."),
          ssh_user: str = typer.Option(None, "--ssh-user",
                                       help="With --hosts: log in as this user (default: the hosts file's "
                                            "ssh.user, else ~/.ssh/config's User, else yours)."),
          ssh_port: int = typer.Option(None, "--ssh-port", help="With --hosts: the hosts' ssh port."),
          ssh_key: Path = typer.Option(None, "--ssh-key", help="With --hosts: this private key instead of "
                                                              "ssh-agent and ~/.ssh/id_*."),
          ssh_known_hosts: Path = typer.Option(None, "--ssh-known-hosts",
                                               help="With --hosts: trust the host keys in this file, "
                                                    "not ~/.ssh/known_hosts."),
          ssh_python: str = typer.Option(None, "--ssh-python",
                                         help="With --hosts: the command that runs Python on the hosts "
                                              "(default python3; e.g. 'sudo -n python3')."),
          only_hosts: list[str] = typer.Option([], "--host",
                                               help="Audit only this host of the fleet (repeat for more), e.g. a "
                                                    "Slurm prolog's own node; give --expect, since there is no "
                                                    "fleet majority to judge one host against."),
          only: list[str] = typer.Option([], "--only",
                                         help="Run only these categories or check ids (repeat or comma)."),
          skip: list[str] = typer.Option([], "--skip", help="Skip these categories or check ids."),
          passive: bool = typer.Option(False, "--passive", help="No traffic: skip pings and collective tests."),
          expect_file: Path = typer.Option(None, "--expect", help="Expectations YAML (versions, MTU, thresholds); "
                                                                  "unset values come from the fleet's majority."),
          as_json: bool = typer.Option(False, "--json", help="Print the report as JSON."),
          junit_file: Path = typer.Option(None, "--junit", help="Also write JUnit XML to this file."),
          list_checks: bool = typer.Option(False, "--list", help="List the checks and exit."),
          controller_url: str = typer.Option(None, "--controller", help="Store the report in this controller "
                                                                         "(default: the lab's kept one, if any)."),
          token_file: Path = typer.Option(None, "--token-file", help="With --controller: the fleet token.")) -> None:
    """Audit the fleet: configuration, front-end and back-end network, collectives.

    Exit code 0 ok, 1 warnings, 2 failures, 3 unknown (a check could not decide)."""
    from clockfabric.audit import expect
    from clockfabric.audit.registry import all_checks, select

    if list_checks:
        _list(all_checks(), as_json)
        return
    try:
        checks = select(_split(only), _split(skip), passive=passive)
    except ValueError as e:
        raise ClockfabricError(f"--only/--skip: {e}") from None
    if not checks:
        raise ClockfabricError("--only/--skip leave no check to run; `clockfabric audit --list` shows them")
    expectations = expect.load(expect_file)
    if hosts_file and bool(controller_url) != bool(token_file):
        raise ClockfabricError("give --controller URL and --token-file FILE together: where to store the report")
    if token_file:
        read_token(token_file)  # a wrong path is said now, not after the audit
    ssh = {"user": ssh_user, "port": ssh_port, "key": ssh_key and str(ssh_key),
           "known_hosts": ssh_known_hosts and str(ssh_known_hosts), "python": ssh_python}
    report, lab = _run(lab_name, hosts_file, via, ssh, checks, expectations, _split(only_hosts), quiet=as_json)
    if junit_file:
        from clockfabric.audit.render import junit

        try:
            junit_file.write_text(junit(report))
        except OSError as e:
            raise ClockfabricError(f"cannot write --junit {junit_file}: {e.strerror}") from None
    if as_json:
        print_json(report.as_dict())
    else:
        from clockfabric.audit.render import tree

        out.print(tree(report))
    _store(report, lab, controller_url, token_file)
    sys.exit(report.exit_code)


def _run(lab_name, hosts_file, via, ssh: dict, checks, expectations, only_hosts: list[str], *, quiet: bool):
    from clockfabric.audit.run import audit as run_audit

    if lab_name and hosts_file:
        raise ClockfabricError("give --lab or --hosts, not both")
    given = [f"--ssh-{k.replace('_', '-')}" for k, v in ssh.items() if v is not None]
    if not hosts_file and (via or given):
        raise ClockfabricError(f"{'--via' if via else given[0]} goes with --hosts FILE (a lab is reached through "
                               "its namespaces)")
    if via and given:
        raise ClockfabricError(f"--via reaches hosts instead of ssh: give it or {given[0]}, not both")
    if hosts_file:
        topo, transport = _hosts_transport(hosts_file, via, ssh)
        lab, fleet, reach = None, str(hosts_file), {"transport": transport}
    else:
        from clockfabric.lab.hosts import lab_audit
        from clockfabric.lab.state import Lab

        require_root()
        lab = Lab.open(lab_name)
        topo, fleet, reach = lab.topology, f"lab {lab.name}", lab_audit(lab)
    if unknown := [h for h in only_hosts if h not in topo.hosts]:
        raise ClockfabricError(f"--host {unknown[0]!r} is not a host of {fleet}; hosts are {', '.join(topo.hosts)}")
    with progress_bar("audit") as update:
        return run_audit(topo, sorted(only_hosts or topo.hosts), checks, **reach, expect=expectations,
                         fleet=fleet, progress=None if quiet else update), lab


def _hosts_transport(hosts_file: Path, via: str | None, ssh: dict):
    """Real hosts: over ssh (asyncssh), or through --via's command for hosts ssh does not reach."""
    from clockfabric.topology import load

    topo = load(hosts_file)
    if via:
        from clockfabric.audit.gather import template_transport

        return topo, template_transport(topo, via)
    from clockfabric.audit.ssh import SshTransport, options

    return topo, SshTransport(topo, options(topo, hosts_file, **ssh))


def _store(report, lab, url: str | None, token_file: Path | None) -> None:
    """Keep the report in the controller given, or else in the lab's kept one (`monitor --keep`), if any.
    A failure is one warning: the audit's verdict and exit code stand either way."""
    if not url and lab is None:
        return  # a fleet audit with nowhere to store it (a Slurm prolog): no HTTP client to load
    from clockfabric.controller.client import api
    from clockfabric.lab.controller import lab_controller, record_path

    if not url and not record_path(lab).exists():
        return
    try:
        ctl = lab_controller(lab, url, token_file)
        stored = api(ctl, "/api/v1/audits", body=report.as_dict())
    except (ClockfabricError, OSError, ValueError) as e:  # ValueError: no JSON either way
        err.print(f"audit not stored: {' '.join(str(e).split())}", style="yellow", markup=False, highlight=False,
                  soft_wrap=True)
        return
    err.print(f"stored as audit {stored['id']} on {ctl.url}", markup=False, highlight=False, soft_wrap=True)


def _list(checks, as_json: bool) -> None:
    if as_json:
        print_json([{"id": c.id, "category": c.category, "title": c.title, "active": c.active, "fix": c.fix}
                    for c in checks])
        return
    table = Table(title="audit checks")
    for col in ("id", "title", "sends traffic"):
        table.add_column(col)
    for c in checks:
        table.add_row(c.id, c.title, "yes" if c.active else "")
    out.print(table)
