"""`clockfabric discover`: a fleet file from what the running agents hear, and the switches' own
LLDP tables.

Each agent pushes its interfaces' LLDP neighbours and its address to the controller; this
reads them back (`/api/v1/hosts`, `/api/v1/neighbours`). Switches that run no agent of ours give
their LLDP tables: lldpd's (`lldpcli show neighbors`, run over ssh through the hosts seam, or in a
lab's switch), SNMP's (`snmpwalk` of LLDP-MIB, run here), or a saved copy of either
(topology/switch_lldp.py, switch_snmp.py). Discover assembles the topology they describe
together (topology/discover.py) and writes it in the topology file format, ready for `clockfabric
controller --topology`, the agents, the audit and the lab.
"""

from __future__ import annotations

import shlex
from pathlib import Path

import typer

from clockfabric.console import err
from clockfabric.controller.client import api
from clockfabric.errors import ClockfabricError
from clockfabric.hosts import Host, LocalHost, SshHost
from clockfabric.hosts.options import SshOptions
from clockfabric.lab.controller import lab_controller
from clockfabric.lab.state import Lab
from clockfabric.topology import dumps, save
from clockfabric.topology.discover import assemble, heard_from_samples, with_switches
from clockfabric.topology.switch_lldp import parse_table, read_lldpcli
from clockfabric.topology.switch_snmp import parse_snmpwalk, snmpwalk_argv
from clockfabric.topology.switch_table import MAX_TEXT, SwitchTable, last_line

SWITCH_TIMEOUT_S = 30.0


def _pairs(values: list[str], option: str, *, need_value: bool) -> list[tuple[str, str]]:
    """NAME[=VALUE] items, comma-separated lists allowed; VALUE defaults to NAME unless it is needed."""
    out = []
    for item in (part.strip() for value in values for part in value.split(",")):
        name, sep, value = item.partition("=")
        if not name or (need_value and not value) or (sep and not value):
            shape = "NAME=FILE" if need_value else "NAME[=ADDRESS]"
            raise ClockfabricError(f"{option} {item!r}: give {shape}")
        out.append((name, value or name))
    return out


def discover(lab_name: str = typer.Option(None, "--lab", "-l", help="Lab name (default: the only lab that is up)."),
             controller_url: str = typer.Option(None, "--controller", help="Controller URL (default: the lab's)."),
             token_file: Path = typer.Option(None, "--token-file", help="File holding the fleet token."),
             output: Path = typer.Option(None, "--output", "-o", help="Write the fleet file here (default: print it)."),
             name: str = typer.Option("discovered", "--name", help="The topology's name."),
             switches: list[str] = typer.Option([], "--switch", metavar="NAME[=ADDRESS]",
                                                help="Read this switch's LLDP table from its lldpd, over ssh "
                                                     "(in a lab: in the switch); repeatable, or comma-separated."),
             lldpcli: str = typer.Option("lldpcli", "--lldpcli",
                                         help="The command that prints the table on a switch ({name}: the "
                                              "switch's), e.g. 'sudo lldpcli'."),
             files: list[str] = typer.Option([], "--lldp-file", metavar="NAME=FILE",
                                             help="A switch's table saved as `lldpcli -f json show neighbors` (and "
                                                  "`show interfaces`), -f keyvalue, or snmpwalk of LLDP-MIB "
                                                  "1.0.8802.1.1.2.1 prints it; repeatable."),
             snmp: list[str] = typer.Option([], "--snmp", metavar="NAME[=ADDRESS]",
                                            help="Read this switch's LLDP-MIB with snmpwalk from here (SNMP v2c); "
                                                 "repeatable, or comma-separated."),
             community: str = typer.Option("public", "--snmp-community", help="The switches' SNMP community."),
             ssh_user: str = typer.Option(None, "--ssh-user", help="With --switch: the user to log in as."),
             ssh_port: int = typer.Option(None, "--ssh-port", help="With --switch: the switches' ssh port."),
             ssh_key: Path = typer.Option(None, "--ssh-key", help="With --switch: this private key instead of "
                                                                  "ssh-agent and ~/.ssh/id_*."),
             ssh_known_hosts: Path = typer.Option(None, "--ssh-known-hosts",
                                                  help="With --switch: this known_hosts file.")) -> None:
    """Build a fleet file from what the running agents hear by LLDP and the switches' own LLDP tables."""
    command = shlex.split(lldpcli)
    if not command:
        raise ClockfabricError("--lldpcli '': give the command that runs lldpcli on a switch, e.g. 'sudo lldpcli'")
    by_ssh, saved, by_snmp = (_pairs(switches, "--switch", need_value=False),
                              _pairs(files, "--lldp-file", need_value=True), _pairs(snmp, "--snmp", need_value=False))
    given = [n for n, _ in [*by_ssh, *saved, *by_snmp]]
    if twice := sorted({n for n in given if given.count(n) > 1}):
        raise ClockfabricError(f"switch {twice[0]} is given twice: read each switch one way")
    tables: dict[str, SwitchTable] = {}
    for switch, saved_file in saved:  # first: a mistake in one is told before anything is asked of the fleet
        if not Path(saved_file).is_file():
            raise ClockfabricError(f"--lldp-file: no such file {saved_file}")
        with open(saved_file, errors="replace") as f:
            text = f.read(MAX_TEXT + 1)  # more is refused: no table is that long
        tables[switch] = parse_table(text, f"switch {switch} ({saved_file})")
    lab = Lab.open(lab_name) if lab_name or not (controller_url and token_file) else None
    ctl = lab_controller(lab, controller_url, token_file)
    rows = api(ctl, "/api/v1/hosts")["items"]
    pushing = {r["host"]: r["info"] or {} for r in rows if r["state"] == "ok"}
    if quiet := sorted(r["host"] for r in rows if r["state"] != "ok"):
        more = " ..." if len(quiet) > 5 else ""
        err.print(f"left out {len(quiet)} nodes not pushing now: {', '.join(quiet[:5])}{more}")
    samples = [s for s in api(ctl, "/api/v1/neighbours")["items"] if s["host"] in pushing]
    ssh = SshOptions(user=ssh_user, port=ssh_port, key=str(ssh_key) if ssh_key else None,
                     known_hosts=str(ssh_known_hosts) if ssh_known_hosts else None)
    for switch, address in by_ssh:
        host = _switch_host(lab, switch, address, ssh)
        argv = [part.replace("{name}", switch) for part in command]
        tables[switch] = read_lldpcli(_runner(host), argv, f"switch {switch}")
    for switch, address in by_snmp:
        code, text, said = _runner(LocalHost())(snmpwalk_argv(address, community))
        if code != 0:
            raise ClockfabricError(f"switch {switch}: snmpwalk {address} failed: {last_line(said, code)}")
        tables[switch] = parse_snmpwalk(text, f"switch {switch} (SNMP {address})")
    nodes, heard, notes = with_switches(pushing, heard_from_samples(samples), tables)
    for line in notes:
        err.print(line, highlight=False, markup=False)
    topo = assemble(nodes, heard, name)
    summary = (f"{len(topo.hosts)} hosts, {len(topo.switches)} switches, {len(topo.links)} links "
               f"on {len(topo.planes)} planes")
    if output is None:
        print(dumps(topo), end="")
        err.print(summary)
        return
    save(topo, output)
    err.print(f"{summary}: wrote {output}")


def _switch_host(lab: Lab | None, switch: str, address: str, ssh: SshOptions) -> Host:
    """How a switch is reached: a lab's switch in its namespace, any other over ssh."""
    if lab is not None and switch in lab.topology.switches and address == switch:
        from clockfabric.lab.hosts import LabHost

        return LabHost(lab, switch)
    return SshHost(switch, address, ssh)


def _runner(host: Host):
    def run(argv: list[str]) -> tuple[int, str, str]:
        done = host.run(argv, timeout_s=SWITCH_TIMEOUT_S)
        return done.returncode, done.stdout.decode(errors="replace"), done.stderr.decode(errors="replace")
    return run
