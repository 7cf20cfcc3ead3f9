"""`clockfabric paths`: which TCP source ports the fabric hashes onto which spine, learned by probing."""

from __future__ import annotations

import typer
from rich.table import Table

from clockfabric.cli.lab_cmds import JsonOpt, LabOpt
from clockfabric.console import out, print_json, require_root
from clockfabric.errors import ClockfabricError
from clockfabric.lab import netns
from clockfabric.lab.state import Lab
from clockfabric.probe.paths import spread
from clockfabric.topology import Port, Topology, interfaces


def _host(topo: Topology, name: str, flag: str) -> str:
    if name not in topo.hosts:
        hosts = list(topo.hosts)
        sample = ", ".join(hosts[:4]) + (", ..." if len(hosts) > 4 else "")
        raise ClockfabricError(f"{flag}: no host {name!r} in this lab; hosts are {sample}")
    return name


def _plane(topo: Topology, src: str, plane: int | None, nic: str | None) -> int:
    nics = topo.hosts[src].nics
    if nic is not None:
        match = [n for n in nics if n.name == nic]
        if not match:
            raise ClockfabricError(f"--nic: {src} has no NIC {nic!r}; it has {', '.join(n.name for n in nics)}")
        return match[0].plane
    if plane is None:
        return nics[0].plane
    if topo.hosts[src].nic(plane) is None:
        raise ClockfabricError(f"--plane: {src} has no NIC on plane {plane}; planes are {topo.planes}")
    return plane


def paths(lab_name: str = LabOpt,
          src: str = typer.Option(..., "--from", help="Host the flows leave from."),
          dst: str = typer.Option(..., "--to", help="Host the flows go to."),
          plane: int = typer.Option(None, "--plane", min=0, help="Plane to learn (default: the first NIC's)."),
          nic: str = typer.Option(None, "--nic", help="The source host's NIC, instead of --plane."),
          ports: int = typer.Option(4, "--ports", min=1, max=64, help="Source ports to find, spread over the paths."),
          dport: int = typer.Option(20000, "--dport", min=1, max=65535,
                                    help="The flows' destination port (part of the hash)."),
          ttl: int = typer.Option(2, "--ttl", min=1, max=64, help="Probe TTL: 2 reaches a leaf-spine's spines."),
          seed: int = typer.Option(0, "--seed", help="Seed for the candidate source ports, so runs repeat."),
          as_json: bool = JsonOpt) -> None:
    """Learn the distinct paths from one host to another, and a TCP source port for each (ECMP)."""
    if plane is not None and nic is not None:
        raise ClockfabricError("give --plane or --nic, not both")
    require_root()
    lab = Lab.open(lab_name)
    topo = lab.topology
    src, dst = _host(topo, src, "--from"), _host(topo, dst, "--to")
    if src == dst:
        raise ClockfabricError("--from and --to are the same host; pick two")
    plane = _plane(topo, src, plane, nic)
    if topo.hosts[dst].nic(plane) is None:
        raise ClockfabricError(f"--to: {dst} has no NIC on plane {plane}")
    ifaces = interfaces(topo)
    # the plane's own NIC addresses: a host routes them out of that plane's NIC only
    src_nic, dst_nic = topo.hosts[src].nic_on(plane), topo.hosts[dst].nic_on(plane)
    src_addr = str(ifaces[Port(src, src_nic.name)].address.ip)
    dst_addr = str(ifaces[Port(dst, dst_nic.name)].address.ip)
    with netns.entered(lab.ns(src)):
        found = spread(src_addr, dst_addr, dport, want=ports, ttl=ttl, seed=seed)
    owner = {str(itf.address.ip): itf.port.node for itf in ifaces.values()}
    hops: dict[str | None, list[int]] = {}
    for p in found:
        hops.setdefault(p.hop, []).append(p.sport)
    rows: list[dict] = [{"hop": hop, "switch": owner.get(hop) if hop else None, "sports": sports}
                        for hop, sports in hops.items()]
    if as_json:
        print_json({"lab": lab.name, "from": src, "to": dst, "plane": plane, "nic": src_nic.name, "src": src_addr,
                    "dst": dst_addr, "dport": dport, "ttl": ttl, "paths": rows})
        return
    table = Table(title=f"{src} {src_addr} → {dst} {dst_addr}:{dport}, plane {plane}, hop at TTL {ttl}")
    for col in ("hop", "switch", "source ports"):
        table.add_column(col)
    for r in rows:
        table.add_row(r["hop"] or "-", r["switch"] or ("(no switch answered)" if r["hop"] is None else "?"),
                      ", ".join(map(str, r["sports"])))
    out.print(table)
    out.print(f"{len(rows)} distinct path{'s' if len(rows) != 1 else ''}; TCP flows from {src_addr} on these source "
              f"ports to {dst_addr}:{dport} take them")
