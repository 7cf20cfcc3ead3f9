"""The chaos soak's faults against what agents hold and who they claim to be: an agent killed
-9 while it holds events (with the controller up, and with it down), a host pushing as another,
malformed-but-JSON details and audits, and the controller's disk filled. Each returns, as the
others in chaos_faults.py, whether the fleet did what it promises within its time: the held
events delivered under their original boot, the forged and malformed pushes refused and not
stored, /readyz failing within a second of the first refused write and the storage alert kept
open while the disk stays full."""

from __future__ import annotations

import errno
import math
import os
import signal
import time
from collections.abc import Callable
from pathlib import Path

from clockfabric.bench.monitoring.chaos_faults import Faults
from clockfabric.bench.monitoring.chaos_malformed import bad_audit, bad_event
from clockfabric.clock.evaluate import read_states
from clockfabric.lab import impair
from clockfabric.topology import Link

READY_AFTER_REFUSAL_S = 1.0  # /readyz must fail within this of the first refused write
DELIVERED_S = 30.0  # an agent's held events must reach the controller within this of its restart
ON_DISK_S = 3.0  # a link_down must be in its agent's log on disk within this of the carrier's drop


class AllFaults(Faults):
    KINDS = (*Faults.KINDS, "agent_kill", "agent_kill_held", "push_as_other", "bad_detail", "disk_full")
    # one round of the soak: every kind once, the agent kills (events held) twice
    ROUND = (*KINDS, "agent_kill", "agent_kill_held")

    def kinds(self) -> tuple[str, ...]:
        """The kinds this fleet can take: disk_full needs the database on a disk of its own."""
        return tuple(k for k in self.ROUND if k != "disk_full" or os.path.ismount(self.db.parent))

    # ---- helpers -------------------------------------------------------------------------------
    def _events(self, **params) -> list[dict]:
        items: list[dict] = []
        after = 0
        while True:
            r = self.http("GET", "/api/v1/events", params={**params, "after_id": after, "limit": 1000})
            if r is None or r.status_code != 200:
                return items
            page = r.json()
            items += page["items"]
            if page["next"] is None:
                return items
            after = page["next"]

    def _boot(self, host: str) -> str | None:
        """The boot of the host's agent run now: its newest agent_start."""
        starts = self._events(host=host, kind="agent_start")
        return starts[-1]["boot"] if starts else None

    def _host_link(self) -> tuple[str, Link, str]:
        """A host other than the controller's, one of its links, and that link's device on it."""
        host = self.rng.choice([h for h in self.fleet.agents.hosts if h != self.fleet.host])
        link = self.rng.choice([lk for lk in self.lab.topology.links if host in (lk.a.node, lk.b.node)])
        return host, link, (link.a if link.a.node == host else link.b).iface

    def _held_then_killed(self, controller_down: bool) -> tuple[bool, str]:
        """A link of a host flaps, its agent notes the down and is killed -9 before it has been
        acknowledged (the link is down, or the controller is); the restarted agent must deliver
        that link_down under the boot that numbered it."""
        host, link, device = self._host_link()
        boot = self._boot(host)
        before = {e["id"] for e in self._events(host=host, kind="link_down")}  # by id: t_ns is the host's time
        if controller_down:
            os.kill(self.fleet.procs[0].pid, signal.SIGKILL)
            self.fleet.procs[0].wait(10)
        log_file = self.fleet.agents.state_dir / f"{host}.events"
        logged = _logged_downs(log_file, device)
        down_at = time.monotonic()
        impair.set_link(self.lab, link, up=False)
        time.sleep(self.rng.uniform(0.05, 0.9))  # the agent has seen the carrier drop, maybe not pushed it
        # held: in the agent's log on disk (what the log promises to keep; its window is said in agent/eventlog.py)
        if not self.wait(lambda: _logged_downs(log_file, device) > logged, ON_DISK_S):
            impair.set_link(self.lab, link, up=True)
            return False, f"{host} {device} down: not in its agent's log on disk within {ON_DISK_S:.0f} s"
        held_after = time.monotonic() - down_at
        back = self._restart_agent(host, meanwhile=lambda: impair.set_link(self.lab, link, up=True))
        if controller_down:
            self.fleet.procs[0] = self.fleet.restart_controller()

        def delivered() -> list[dict]:
            return [e for e in self._events(host=host, kind="link_down")
                    if e["id"] not in before and e["device"] == device]
        self.wait(lambda: bool(delivered()), DELIVERED_S)
        found = delivered()
        boots = sorted({e["boot"] for e in found})
        ok = back and bool(found) and boots == [boot]
        said = f"under boot {boots}" if found else "not delivered"
        return ok, (f"{host} {device} down, on disk by {held_after:.2f} s, agent killed -9 holding it"
                    f"{' with the controller down' if controller_down else ''}: {said} (boot then {boot})")

    def _restart_agent(self, host: str, meanwhile: Callable[[], object]) -> bool:
        """Kill -9 the host's agent, do `meanwhile`, start it again; whether it is back (its state
        names the new pid)."""
        agents = self.fleet.agents
        i = agents.hosts.index(host)
        os.kill(agents.procs[i].pid, signal.SIGKILL)
        agents.procs[i].wait(10)
        meanwhile()
        self.sleep(self.rng.uniform(0.2, 2.0))
        agents.procs[i] = self.lab.spawn(host, agents.argv(host), f"clock agent on {host}", log=agents.log(host))
        new_pid = agents.procs[i].pid
        return self.wait(lambda: read_states(agents.state_dir).get(host, {}).get("pid") == new_pid, 30.0)

    def _unready_after(self, refused_at: float | None, within_s: float = 5.0) -> float:
        """Seconds from the first refused write to the sending of the first /readyz that fails
        (inf if none within_s): polled back to back, the check's own round trip not counted."""
        assert refused_at is not None
        deadline = time.monotonic() + within_s
        while time.monotonic() < deadline:
            sent = time.monotonic()
            if not self.ready():
                return sent - refused_at
        return math.inf

    # ---- the faults ----------------------------------------------------------------------------
    def agent_kill(self) -> tuple[bool, str]:
        return self._held_then_killed(controller_down=False)

    def agent_kill_held(self) -> tuple[bool, str]:
        return self._held_then_killed(controller_down=True)

    def push_as_other(self) -> tuple[bool, str]:
        """A host's credential pushing as another host (with that host's live boot and the next
        sequence numbers), and a switch's pushing as a host: both refused, nothing stored."""
        liar, victim = self.rng.sample([h for h in self.hosts if h != self.witness_host], 2)
        switch = self.rng.choice(sorted(self.lab.topology.switches))
        boot = self._boot(victim) or "unknown"
        forged = [{"seq": 1_000_000 + n, "t_ns": time.time_ns(), "kind": "link_down", "device": "eth0"}
                  for n in range(5)]
        codes = []
        for credential in (liar, switch):
            r = self.http("POST", "/api/v1/push", json={"host": victim, "boot": boot, "events": forged},
                          headers=self.as_host(credential))
            codes.append(r.status_code if r is not None else None)
        stored = [e for e in self._events(host=victim, kind="link_down") if e["seq"] >= 1_000_000]
        ok = codes == [403, 403] and not stored
        return ok, f"{liar} and {switch} pushed as {victim}: HTTP {codes}, {len(stored)} stored"

    def bad_detail(self) -> tuple[bool, str]:
        """A declared kind's detail, then an audit's finding, with one field of the wrong JSON type
        (chaos_malformed.py, read from the door's schemas): each 422 naming that field."""
        host = self.rng.choice([h for h in self.hosts if h != self.witness_host])
        kind, field, event = bad_event(self.rng, 2_000_000 + self.rng.randrange(10**6), time.time_ns())
        r = self.http("POST", "/api/v1/push", json={"host": host, "boot": "chaos-malformed", "events": [event]},
                      headers=self.as_host(host))
        finding, report = bad_audit(self.rng, time.time_ns())
        a = self.http("POST", "/api/v1/audits", json=report)
        said = [(x.status_code, x.json()["detail"][0]["loc"][-1] if x.status_code == 422 else None) if x is not None
                else (None, None) for x in (r, a)]
        ok = said == [(422, field), (422, finding)]
        return ok, f"{kind} detail.{field} and an audit finding's {finding} of the wrong type: {said}"

    def disk_full(self) -> tuple[bool, str]:
        """The controller's disk filled: /readyz 503 within a second of the first refused write,
        the storage alert open while it stays full, ready again once room is made."""
        fill = self.db.parent / "chaos-fill"
        _fill(fill)
        try:
            if not self.wait(lambda: self.refused_at is not None, 15.0):
                return False, "the disk filled, but no write was refused within 15 s"
            unready_after = self._unready_after(self.refused_at)
            alert_seen = resolved_early = False
            deadline = time.monotonic() + self.rng.uniform(3.0, 6.0)
            while time.monotonic() < deadline:
                open_now = self.storage_alert("full", "io")
                resolved_early |= alert_seen and not open_now
                alert_seen |= open_now
                self.sleep(0.3)
        finally:
            fill.unlink()
        back = self.wait(self.ready, 20.0)
        ok = unready_after <= READY_AFTER_REFUSAL_S and alert_seen and not resolved_early and back
        return ok, (f"/readyz failed {unready_after:.2f} s after the first refused write; storage alert "
                    f"{'seen' if alert_seen else 'not seen'}{', resolved while full' if resolved_early else ''}; "
                    f"{'ready' if back else 'not ready'} once room was made")


def _logged_downs(log_file: Path, device: str) -> int:
    """link_down records of `device` in an agent's event log file (appended, compacted at its start)."""
    try:
        lines = log_file.read_text().splitlines()
    except FileNotFoundError:
        return 0
    return sum('"kind":"link_down"' in line and f'"device":"{device}"' in line for line in lines)


def _fill(path: Path) -> None:
    """Write zeros to path until the filesystem has no room left, down to its last 4 KiB."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    try:
        for size in (1 << 20, 1 << 16, 1 << 12):
            block = bytes(size)
            while True:
                try:
                    os.write(fd, block)
                except OSError as e:
                    if e.errno != errno.ENOSPC:
                        raise
                    break
    finally:
        os.close(fd)
