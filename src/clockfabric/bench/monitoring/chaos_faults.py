"""The faults the chaos soak injects into a lab fleet (lab.monitoring.LabFleet), one method
each, and how each is seen: every fault returns whether the fleet noticed it (an alert, an
event, a counter, a refusal) within its time. A witness pushes numbered events all along, and
keeps what the controller acknowledged, to be found again at the end. The faults an agent's
own events live through (killed while it holds them, a host pushing as another) are in
chaos_held.py."""

from __future__ import annotations

import math
import os
import random
import signal
import sqlite3
import time
from collections.abc import Callable
from typing import Any

import httpx

from clockfabric.agent.config import CONTROL_PORT
from clockfabric.auth.credential import host_token
from clockfabric.bench.auth import forge
from clockfabric.clock.evaluate import read_states
from clockfabric.controller.token import read_token
from clockfabric.lab import impair, netns
from clockfabric.lab.monitoring import LabFleet

WITNESS_KIND, WITNESS_BOOT = "chaos_witness", "chaos-witness"
STORAGE_ALERT_S = 10.0  # a storage fault must be alerted within this
ALERT_LATE = "(alert not within 10 s)"  # marks a storage fault's detail
PROBE_PORTS = "7300,7301,7302,7303,7304,7305,7306,7307"  # the agents' default probe ports, one NIC


class Faults:
    """Injects faults into a running fleet; `http` reaches its controller from the lab host it runs on."""

    KINDS: tuple[str, ...] = ("controller_kill", "db_lock", "db_delete", "link_flap", "garbage", "forged", "bad_push")

    def __init__(self, fleet: LabFleet, rng: random.Random):
        self.fleet, self.lab, self.rng = fleet, fleet.lab, rng
        self.db = fleet.db
        self.refused_at: float | None = None  # when the witness's last push was refused (503), monotonic
        self.headers = {"Authorization": f"Bearer {read_token(fleet.token_file)}"}
        self.fleet_token = read_token(fleet.token_file)
        self.hosts = sorted(self.lab.topology.hosts)
        self.witness_host = self.hosts[-1]
        self.pending: list[dict] = []  # witness events not yet acknowledged (an agent's buffer)
        self.acked: set[int] = set()
        self._seq = 0
        self.last_push = 0.0

    # ---- talking to the controller -----------------------------------------------------------
    def http(self, method: str, path: str, headers: dict | None = None, **kw: Any) -> httpx.Response | None:
        """The controller's answer, or None where it is away."""
        try:
            with netns.entered(self.lab.ns(self.fleet.host)):
                return httpx.request(method, self.fleet.url + path, headers={**self.headers, **(headers or {})},
                                     timeout=8.0, **kw)
        except httpx.HTTPError:
            return None

    def as_host(self, host: str) -> dict[str, str]:
        """The headers of a push as `host`: its own credential, which the fleet token is not."""
        return {"Authorization": f"Bearer {host_token(self.fleet_token, host)}"}

    def witness(self) -> None:
        """One more numbered event, and every one not yet acknowledged, in one push (at most 5 a second)."""
        if time.monotonic() - self.last_push < 0.2:
            return
        self.last_push = time.monotonic()
        self._seq += 1
        self.pending.append({"seq": self._seq, "t_ns": time.time_ns(), "kind": WITNESS_KIND,
                             "detail": {"n": self._seq}})
        body = {"host": self.witness_host, "boot": WITNESS_BOOT, "events": self.pending[:1000]}
        r = self.http("POST", "/api/v1/push", json=body, headers=self.as_host(self.witness_host))
        if r is not None and r.status_code == 200:
            self.acked.update(e["seq"] for e in self.pending[:1000])
            del self.pending[:1000]
            self.refused_at = None
        elif r is not None and r.status_code == 503 and self.refused_at is None:
            self.refused_at = time.monotonic()

    def wait(self, check: Callable[[], Any], timeout_s: float) -> bool:
        """Whether check() came true within timeout_s; the witness pushes meanwhile."""
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            self.witness()
            if check():
                return True
            time.sleep(0.1)
        return False

    def sleep(self, seconds: float) -> None:
        self.wait(lambda: False, seconds)

    def storage_alert(self, *faults: str) -> bool:
        """A storage alert is open for one of these faults (StorageError kinds)."""
        r = self.http("GET", "/api/v1/alerts", params={"open_only": True})
        return r is not None and r.status_code == 200 and any(
            a["kind"] == "storage" and a["detail"].get("fault") in faults for a in r.json()["items"])

    def ready(self) -> bool:
        r = self.http("GET", "/readyz")
        return r is not None and r.status_code == 200

    def rejected(self) -> int:
        """Datagrams every agent refused, by its state file."""
        return sum(n for s in read_states(self.fleet.agents.state_dir).values()
                   for by_reason in s.get("auth", {}).get("rejected", {}).values() for n in by_reason.values())

    # ---- the faults ----------------------------------------------------------------------------
    def controller_kill(self) -> tuple[bool, str]:
        proc = self.fleet.procs[0]
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait(10)
        self.sleep(self.rng.uniform(0.2, 3.0))
        self.fleet.procs[0] = self.fleet.restart_controller()
        return self.wait(self.ready, 15.0), "killed -9 and restarted"

    def storage_seen(self, faults: tuple[str, ...], within_s: float) -> tuple[bool, str]:
        """Whether a storage fault was seen within_s: /readyz failing (it reads no database) or the
        storage alert in the API (whose route may wait behind pushes waiting on storage); when each."""
        t0, when = time.monotonic(), {}

        def check() -> bool:
            for name, failing in (("readyz", lambda: not self.ready()), ("alert", lambda: self.storage_alert(*faults))):
                if name not in when and failing():
                    when[name] = time.monotonic() - t0
            return len(when) == 2
        self.wait(check, within_s)
        said = ", ".join(f"{k} after {v:.1f} s" for k, v in sorted(when.items())) or "nothing"
        late = when.get("alert", math.inf) > STORAGE_ALERT_S  # missing, or shown by a check answered late
        return bool(when), f"{said} {ALERT_LATE}" if late else said

    def db_lock(self) -> tuple[bool, str]:
        hold_s = self.rng.uniform(STORAGE_ALERT_S, STORAGE_ALERT_S + 2)  # well past the 5 s busy wait
        db = sqlite3.connect(self.db, timeout=10.0, isolation_level=None)
        try:
            db.execute("BEGIN EXCLUSIVE")
            seen, said = self.storage_seen(("busy", "io"), hold_s)
            db.execute("ROLLBACK")
        finally:
            db.close()
        return seen and self.wait(self.ready, 20.0), f"locked {hold_s:.1f} s: {said}"

    def db_delete(self) -> tuple[bool, str]:
        away = self.db.with_name(self.db.name + ".away")
        os.rename(self.db, away)  # as a deletion looks to the controller; put back (same inode) below
        try:
            seen, said = self.storage_seen(("deleted",), STORAGE_ALERT_S)
        finally:
            os.rename(away, self.db)
        return seen and self.wait(self.ready, 20.0), f"database file removed, then put back: {said}"

    def link_flap(self) -> tuple[bool, str]:
        link = self.rng.choice(self.lab.topology.links)
        r = self.http("GET", "/api/v1/events", params={"kind": "link_down", "limit": 1000})
        before = {e["id"] for e in r.json()["items"]} if r is not None and r.status_code == 200 else set()
        impair.set_link(self.lab, link, up=False)
        self.sleep(self.rng.uniform(0.3, 1.5))
        impair.set_link(self.lab, link, up=True)
        ends = {(link.a.node, link.a.iface), (link.b.node, link.b.iface)}

        def down_seen() -> bool:
            r = self.http("GET", "/api/v1/events", params={"kind": "link_down", "limit": 1000})
            return r is not None and r.status_code == 200 and any(
                e["id"] not in before and (e["host"], e["device"]) in ends for e in r.json()["items"])
        return self.wait(down_seen, 15.0), f"{link.name} down and up"

    def garbage(self) -> tuple[bool, str]:
        src, dst = self.rng.sample(self.hosts, 2)
        before = self.rejected()
        forge.on_host(self.lab, src, "garbage", "--to", str(self.lab.topology.hosts[dst].address),
                      "--ports", f"{CONTROL_PORT},{PROBE_PORTS}", "--count", "50")
        return self.wait(lambda: self.rejected() > before, 10.0), f"{src} -> {dst}: 50 random datagrams"

    def forged(self) -> tuple[bool, str]:
        src, dst = self.rng.sample(self.hosts, 2)
        to = str(self.lab.topology.hosts[dst].address)
        before = self.rejected()
        sent = forge.on_host(self.lab, src, "map", "--to", to, "--victim", dst, "--count", "10")
        sent += forge.on_host(self.lab, src, "reply", "--to", to, "--ports", PROBE_PORTS, "--count", "10")
        seen = self.wait(lambda: self.rejected() >= before + sent, 10.0)
        return seen, f"{src} -> {dst}: {sent} forged maps and replies"

    def bad_push(self) -> tuple[bool, str]:
        deep = b'{"d": ' * 100 + b"{}" + b"}" * 100  # nested past the controller's 32
        bodies = {"nan": b'{"host": "h0", "boot": "x", "samples": [{"name": "s", "value": NaN}]}',
                  "deep": b'{"host": "h0", "boot": "x", "info": ' + deep + b"}",
                  "huge_int": b'{"host": "h0", "boot": "x", "dropped_events": 99999999999999999999999}',
                  "too_large": b"[" + b"0," * 3_000_000 + b"0]", "not_json": os.urandom(64)}
        name = self.rng.choice(sorted(bodies))
        r = self.http("POST", "/api/v1/push", content=bodies[name],
                      headers={"content-type": "application/json", **self.as_host("h0")})
        refused = r is not None and r.status_code in (413, 422)
        return refused, f"{name}: HTTP {r.status_code if r is not None else 'none'}"
