"""`clockfabric topology ...`: write example topologies, and show or validate a file."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import typer
from rich.table import Table

from clockfabric.console import err, out, print_json
from clockfabric.errors import ClockfabricError
from clockfabric.topology import TrafficClasses, dumps, format_rate, leafspine, load, multirail

app = typer.Typer(help="Write, show and validate topology files.", no_args_is_help=True)
generate = typer.Typer(help="Write a generated topology as YAML.", no_args_is_help=True)
app.add_typer(generate, name="generate")

Output = typer.Option(None, "-o", "--output", help="File to write (default: print to stdout).")
HOST_RATE_HELP = ("Host-to-leaf link speed (the lab forwards a few hundred Mbit/s in all on 2 cores: "
                  "keep rates where queues, not CPU, set the pace).")
BUFFER_HELP = "Port buffer per link direction, in full-sized frames (held as bytes)."
MTU_HELP = "Every cable's MTU in bytes (9000: jumbo frames, as AI fabrics run)."
ClassesOpt = typer.Option(False, "--classes/--no-classes",
                          help="Traffic classes by DSCP on every port (priority for control and time, the jobs' "
                               "collectives, best-effort; see docs/lab.md); default one FIFO a port.")


def _emit(topo, output: Path | None, classes: bool) -> None:
    if classes:
        topo = replace(topo, classes=TrafficClasses())
    text = dumps(topo)
    if output is None:
        out.print(text, end="", markup=False, highlight=False)
        return
    try:
        output.write_text(text)
    except OSError as e:
        raise ClockfabricError(f"cannot write {output}: {e.strerror}; give a file in an existing directory") from None
    err.print(f"wrote {output}: {len(topo.hosts)} hosts, {len(topo.switches)} switches, {len(topo.links)} links")


@generate.command("leafspine")
def gen_leafspine(hosts: int = typer.Option(8, help="Number of hosts."),
                  leaves: int = typer.Option(2, help="Leaf switches; hosts are spread evenly."),
                  spines: int = typer.Option(2, help="Spine switches; every leaf links to each."),
                  host_rate: str = typer.Option("100mbit", help=HOST_RATE_HELP),
                  fabric_rate: str = typer.Option(None, help="Leaf-to-spine link speed (default: host rate)."),
                  buffer: int = typer.Option(200, help=BUFFER_HELP),
                  mtu: int = typer.Option(1500, help=MTU_HELP),
                  name: str = typer.Option(None, help="Topology name."),
                  classes: bool = ClassesOpt,
                  output: Path = Output) -> None:
    """H hosts under L leaves, S spines, ECMP between leaves over all spines."""
    _emit(leafspine(hosts, leaves, spines, host_rate=host_rate, fabric_rate=fabric_rate, buffer=buffer,
                    mtu=mtu, name=name), output, classes)


@generate.command("multirail")
def gen_multirail(hosts: int = typer.Option(8, help="Number of hosts."),
                  planes: int = typer.Option(2, help="Planes (rails): NIC r of each host joins plane r."),
                  leaves: int = typer.Option(2, help="Leaf switches per plane."),
                  spines: int = typer.Option(2, help="Spine switches per plane."),
                  host_rate: str = typer.Option("100mbit", help=HOST_RATE_HELP),
                  fabric_rate: str = typer.Option(None, help="Leaf-to-spine link speed (default: host rate)."),
                  buffer: int = typer.Option(200, help=BUFFER_HELP),
                  mtu: int = typer.Option(1500, help=MTU_HELP),
                  name: str = typer.Option(None, help="Topology name."),
                  classes: bool = ClassesOpt,
                  output: Path = Output) -> None:
    """Multi-rail / dual-plane: each plane its own leaf-spine; hosts keep one stable address."""
    _emit(multirail(hosts, planes, leaves, spines, host_rate=host_rate, fabric_rate=fabric_rate,
                    buffer=buffer, mtu=mtu, name=name), output, classes)


@app.command("show")
def show(path: Path = typer.Argument(..., help="Topology YAML file."),
         as_json: bool = typer.Option(False, "--json", help="Print JSON.")) -> None:
    """Validate a topology file and summarise it (exit 64 and one line per problem if invalid)."""
    topo = load(path)
    hosts = list(topo.hosts)
    paths = topo.paths(hosts[0], hosts[-1]) if len(hosts) > 1 else []
    summary = {"name": topo.name, "hosts": len(topo.hosts), "switches": len(topo.switches),
               "links": len(topo.links), "planes": topo.planes,
               "host_pool": str(topo.host_pool), "fabric_pool": str(topo.fabric_pool),
               "rates": sorted({format_rate(lk.rate_bps) for lk in topo.links}), "mtu": topo.mtu,
               "paths_first_to_last": [{"plane": p.plane, "via": list(p.switches)} for p in paths]}
    if as_json:
        print_json(summary)
        return
    table = Table(title=f"topology {topo.name} (valid)", show_header=False)
    for key in ("hosts", "switches", "links", "planes", "host_pool", "fabric_pool", "rates", "mtu"):
        table.add_row(key, str(summary[key]))
    if paths:
        table.add_row(f"paths {hosts[0]}→{hosts[-1]}", "\n".join(f"plane {p.plane}: {' → '.join(p.nodes)}"
                                                                 for p in paths))
    out.print(table)
