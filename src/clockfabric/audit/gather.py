"""Gather every host's report at once, each under its own timeout: one hung host is named
and never holds up the rest.

A transport is how a command reaches a host: `ip netns exec` on a lab, or ssh (or anything
that takes a command: pdsh, kubectl exec) on a real fleet, given as a template.
"""

from __future__ import annotations

import asyncio
import json
import os
import shlex
import signal
import sys
from collections.abc import Callable

from clockfabric.topology import Topology, interfaces

Transport = Callable[[str], list[str]]  # host -> the argv that runs `python -m clockfabric.audit.host` there
Progress = Callable[[str, int, int], None]
MODULE = ["-m", "clockfabric.audit.host"]


def lab_transport(lab) -> Transport:
    from clockfabric.lab.exec import command

    return lambda host: command(lab, host, [sys.executable, *MODULE])


def template_transport(topo: Topology, template: str, python: str = "python3") -> Transport:
    """`ssh -o BatchMode=yes {address}` and the like: {host} and {address} are filled in per host."""
    def argv(host: str) -> list[str]:
        words = [w.format(host=host, address=topo.hosts[host].address) for w in shlex.split(template)]
        return [*words, python, *MODULE]
    return argv


def specs(topo: Topology, hosts: list[str], *, pings: int, lldp_wait_s: float) -> dict[str, dict]:
    """What each host is asked: its NICs, the names to resolve, the rail peers to ping (none if pings is 0)."""
    plan = {(p.node, p.iface): str(i.address.ip) for p, i in interfaces(topo).items() if p.node in topo.hosts}
    names = {h: str(topo.hosts[h].address) for h in topo.hosts}
    out = {}
    for h in hosts:
        nics = topo.hosts[h].nics
        reach = {n.name: [plan[(p, topo.hosts[p].nic(n.plane).name)] for p in hosts
                          if p != h and topo.hosts[p].nic(n.plane) and (p, topo.hosts[p].nic(n.plane).name) in plan]
                 for n in nics} if pings else {}
        out[h] = {"host": h, "nics": [{"name": n.name, "plane": n.plane} for n in nics], "names": names,
                  "reach": reach, "sources": {n.name: plan.get((h, n.name)) for n in nics},
                  "pings": pings, "lldp_wait_s": lldp_wait_s}
    return out


async def _one(host: str, argv: list[str], spec: dict, timeout_s: float) -> tuple[str, dict | None, str]:
    try:
        # its own session: on a timeout the whole group goes, even a wrapper's children holding the pipes
        proc = await asyncio.create_subprocess_exec(*argv, stdin=asyncio.subprocess.PIPE,
                                                    stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
                                                    start_new_session=True)
    except OSError as e:
        return host, None, f"cannot start {argv[0]}: {e.strerror}"
    try:
        out, err = await asyncio.wait_for(proc.communicate(json.dumps(spec).encode()), timeout_s)
    except asyncio.TimeoutError:
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        try:
            await asyncio.wait_for(proc.wait(), 5)
        except asyncio.TimeoutError:
            pass  # unkillable (stuck in the kernel): named below all the same
        return host, None, f"no answer within {timeout_s:g} s"
    if proc.returncode != 0:
        last = (err.decode(errors="replace").strip().splitlines() or [f"exit {proc.returncode}"])[-1]
        return host, None, f"its report failed: {last[:300]}"
    try:
        return host, json.loads(out), ""
    except ValueError:
        return host, None, "its report was not JSON"


def gather(specs_by_host: dict[str, dict], transport: Transport, *, timeout_s: float, parallel: int = 32,
           progress: Progress | None = None) -> tuple[dict[str, dict], dict[str, str]]:
    """(reports by host, why each missing host is missing)."""
    async def main() -> list[tuple[str, dict | None, str]]:
        gate = asyncio.Semaphore(parallel)
        done = 0

        async def guarded(host: str) -> tuple[str, dict | None, str]:
            nonlocal done
            async with gate:
                result = await _one(host, transport(host), specs_by_host[host], timeout_s)
            done += 1
            if progress:
                progress("hosts reporting", done, len(specs_by_host))
            return result

        return await asyncio.gather(*(guarded(h) for h in specs_by_host))

    reports, missing = {}, {}
    for host, report, why in asyncio.run(main()):
        if report is None:
            missing[host] = why
        else:
            reports[host] = report
    return reports, missing
