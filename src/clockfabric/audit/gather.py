"""Gather every host's report at once, each under its own timeout: one hung host is named
and never holds up the rest.

A transport is how the report's command reaches a host. Two kinds:
- a *command* transport: host -> the argv that runs `python -m clockfabric.audit.host` there,
  run as a local subprocess (a lab's `ip netns exec`, from above; `--via` for launchers like `kubectl exec`);
- a *session* transport, which talks to the host itself: `audit/ssh.py` (asyncssh, a whole
  fleet at once in-process), or `HostsSession` over the hosts seam (a host as every other
  command reaches it: a drained host's re-admission audit).
"""

from __future__ import annotations

import asyncio
import json
import os
import shlex
import signal
from collections.abc import Awaitable, Callable, Mapping
from typing import Protocol, runtime_checkable

from clockfabric.errors import ClockfabricError
from clockfabric.hosts import Host
from clockfabric.topology import Topology, interfaces

Command = Callable[[str], list[str]]  # host -> the argv that runs `python -m clockfabric.audit.host` there
Progress = Callable[[str, int, int], None]
MODULE = ["-m", "clockfabric.audit.host"]
PARALLEL = 32  # command transports: one local process per host at a time


@runtime_checkable
class Session(Protocol):
    """A transport that reaches hosts itself: runs the report with stdin on host, within timeout_s."""
    parallel: int  # how many hosts at once

    async def run(self, host: str, stdin: bytes, timeout_s: float) -> tuple[bytes | None, str]:
        """(the report's stdout, "") or (None, why it could not be had, in one line)."""


Transport = Command | Session


class HostsSession:
    """The report run through each host's own `Host.run` (ssh, local, a lab's), in threads."""
    parallel = 16  # each host a client process at a time

    def __init__(self, hosts: Mapping[str, Host], python: Callable[[str], list[str]]):
        self.hosts, self.python = hosts, python

    async def run(self, host: str, stdin: bytes, timeout_s: float) -> tuple[bytes | None, str]:
        try:
            done = await asyncio.to_thread(self.hosts[host].run, [*self.python(host), *MODULE], input=stdin,
                                           timeout_s=timeout_s)
        except ClockfabricError as e:  # unreachable, refused, timed out: that host's line
            return None, str(e)
        if done.returncode != 0:
            return None, failed(done.stderr, f"exit {done.returncode}")
        return done.stdout, ""


def template_transport(topo: Topology, template: str, python: str = "python3") -> Transport:
    """`kubectl exec {host} --` and the like: {host} and {address} are filled in per host."""
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
        reach = {n.name: [plan[(p, peer_nic.name)] for p in hosts
                          if p != h and (peer_nic := topo.hosts[p].nic(n.plane)) and (p, peer_nic.name) in plan]
                 for n in nics} if pings else {}
        out[h] = {"host": h, "nics": [{"name": n.name, "plane": n.plane} for n in nics], "names": names,
                  "reach": reach, "sources": {n.name: plan.get((h, n.name)) for n in nics},
                  "pings": pings, "lldp_wait_s": lldp_wait_s}
    return out


async def _command(argv: list[str], stdin: bytes, timeout_s: float) -> tuple[bytes | None, str]:
    try:
        # its own session: on a timeout the whole group goes, even a wrapper's children holding the pipes
        proc = await asyncio.create_subprocess_exec(*argv, stdin=asyncio.subprocess.PIPE,
                                                    stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
                                                    start_new_session=True)
    except OSError as e:
        return None, f"cannot start {argv[0]}: {e.strerror}"
    try:
        out, err = await asyncio.wait_for(proc.communicate(stdin), timeout_s)
    except asyncio.TimeoutError:  # TimeoutError itself from Python 3.11 on
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        try:
            await asyncio.wait_for(proc.wait(), 5)
        except asyncio.TimeoutError:
            pass  # unkillable (stuck in the kernel): named below all the same
        return None, f"no answer within {timeout_s:g} s"
    if proc.returncode != 0:
        return None, failed(err, f"exit {proc.returncode}")
    return out, ""


def failed(stderr: bytes, otherwise: str) -> str:
    """Why a report failed: the last line it wrote on stderr (the error; warnings come first)."""
    last = (stderr.decode(errors="replace").strip().splitlines() or [otherwise])[-1]
    return f"its report failed: {last[:300]}"


def gather(specs_by_host: dict[str, dict], transport: Transport, *, timeout_s: float, parallel: int | None = None,
           progress: Progress | None = None) -> tuple[dict[str, dict], dict[str, str]]:
    """(reports by host, why each missing host is missing)."""
    call: Callable[[str, bytes, float], Awaitable[tuple[bytes | None, str]]]
    if isinstance(transport, Session):
        call, at_once = transport.run, transport.parallel
    else:
        call, at_once = (lambda h, data, t: _command(transport(h), data, t)), PARALLEL

    async def main() -> list[tuple[str, bytes | None, str]]:
        gate = asyncio.Semaphore(parallel or at_once)
        done = 0

        async def guarded(host: str) -> tuple[str, bytes | None, str]:
            nonlocal done
            async with gate:
                out, why = await call(host, json.dumps(specs_by_host[host]).encode(), timeout_s)
            done += 1
            if progress:
                progress("hosts reporting", done, len(specs_by_host))
            return host, out, why

        return await asyncio.gather(*(guarded(h) for h in specs_by_host))

    reports, missing = {}, {}
    for host, out, why in asyncio.run(main()):
        if out is None:
            missing[host] = why
            continue
        try:
            reports[host] = json.loads(out)
        except ValueError:
            missing[host] = "its report was not JSON"
    return reports, missing
