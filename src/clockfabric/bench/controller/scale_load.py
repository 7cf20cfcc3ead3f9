"""The load generator of `bench controller-scale`: N simulated agents pushing what a real agent
pushes, at the push interval, on loopback.

Each simulated host pushes once per interval, at its own offset in it (open loop: a slow
controller does not slow the schedule, it queues). A push carries what agent.push sends: the
OWD summary of every (peer, path) (owd_p50/p99/min/floor_ns, labelled src/dst/path), its NICs'
link_up and transition counts, clock figures, a few job flows, what the agent works out of them
for the detectors (agent.digest), the path map, and now and then an event. Like agent.push, a
host starts on the replica its name hashes to and moves to the next on failure, keeping its
events until one is acknowledged.
"""

from __future__ import annotations

import asyncio
import json
import time
import uuid
import zlib
from dataclasses import dataclass, field

import httpx

from clockfabric.agent import digest
from clockfabric.auth.credential import host_token
from clockfabric.workload.samples import PROCESSES, START

PEERS, PATHS, NICS, FLOWS = 10, 4, 2, 4
JOB_SIZES = (16, 16, 16, 64, 256)  # hosts: the fleet's jobs, in turn
EVENT_EVERY = 20  # one push in 20 carries a link event
MARGIN_NS = 50_000.0  # the congestion detector's default margin, as the controller's answer names it


@dataclass
class Counts:
    latencies_s: list[float] = field(default_factory=list)
    ok: int = 0
    errors: int = 0
    late: int = 0  # pushes that started later than scheduled by over an interval: the generator fell behind
    skipped: int = 0  # a host's push not sent: its previous one was still unanswered (an agent pushes in turn)
    acked: dict[tuple[str, str], int] = field(default_factory=dict)  # (host, boot) -> events acknowledged


def address(host: str) -> str:
    """A simulated host's address (sim00042: 10.0.0.42): its job flows are labelled by addresses."""
    n = int(host.removeprefix("sim"))
    return f"10.{n >> 16 & 255}.{n >> 8 & 255}.{n & 255}"


def job_of(n: int) -> tuple[str, int, int]:
    """Host n's job (jobs are runs of JOB_SIZES hosts in turn): its id, its first host and its size."""
    cycle = sum(JOB_SIZES)
    first, at = n - n % cycle, n % cycle
    for k, size in enumerate(JOB_SIZES):
        if at < size:
            return f"job{(n // cycle) * len(JOB_SIZES) + k:05d}", first, size
        first, at = first + size, at - size
    raise AssertionError("unreachable: at < cycle")


def peers_of(host: str, hosts: int) -> tuple[list[str], list[str]]:
    """A host's flows' far ends, the hosts beside it in its job both ways round (a ring's and a
    tree's neighbours), and its probe peers: those, and hosts across the fleet."""
    n = int(host.removeprefix("sim"))
    _, first, size = job_of(n)
    size = min(size, hosts - first)  # the last job, cut short by the fleet's end
    mates = [f"sim{m:05d}" for m in dict.fromkeys(first + (n - first + d) % size for d in (1, -1, 2, -2)[:FLOWS])
             if m != n]
    return mates, mates + [f"sim{(zlib.crc32(host.encode()) + p + 1) % max(hosts, 2):05d}"
                           for p in range(PEERS - len(mates))]


def samples(host: str, hosts: int) -> list[dict]:
    out = []
    n = int(host.removeprefix("sim"))
    jobid, first, _ = job_of(n)
    mates, peers = peers_of(host, hosts)
    for p, peer in enumerate(peers):
        for path in range(PATHS):
            labels = {"src": host, "dst": peer, "path": str(path)}
            out += [{"name": f"owd_{s}_ns", "value": 5_000.0 + 100 * p + path, "labels": labels}
                    for s in ("p50", "p99", "min", "floor")]
    for nic in range(NICS):
        out += [{"name": "link_up", "value": 1.0, "labels": {"device": f"eth{nic}"}},
                {"name": "link_transitions_total", "value": 2.0, "labels": {"device": f"eth{nic}"}}]
    out += [{"name": n, "value": 1.0} for n in ("clock_offset_ns", "clock_error_bound_ns", "clock_rate_ppb")]
    group = {"jobid": jobid, "rank": str(n - first), "source": "env", "run": "", "visible": "1"}
    out += [{"name": PROCESSES, "value": 1.0, "labels": group}, {"name": START, "value": 1.7e9, "labels": group}]
    for mate in mates:
        labels = {"jobid": jobid, "flow": f"{address(host)}->{address(mate)}"}
        # a healthy flow: its in-band delay near its probes' (a job's alerts are not what is measured)
        out += [{"name": name, "value": v, "labels": labels}
                for name, v in (("job_flow_tx_bps", 1e9), ("job_flow_rtt_us", 20.0),
                                ("job_flow_owd_out_p50_ns", 6_000.0))]
    # and what the agent works out of them for the detectors, as agent.push sends it
    mapped = [(peer, str(path)) for peer in peers for path in range(PATHS)]
    return (out + digest.flow_probes(out, host, {address(peer): peer for peer in peers})
            + digest.queueing(out, host, mapped, digest.Ask(MARGIN_NS)))


class SimHost:
    def __init__(self, name: str, hosts: int, urls: list[str]):
        self.name = name
        self.boot = uuid.uuid4().hex[:12]
        self.urls = urls
        self.at = zlib.crc32(name.encode()) % len(urls)
        self.seq = 0
        self.pending: list[dict] = []
        self.pushes = 0
        self.busy = False
        self.credential = ""  # its push credential (controller.token.host_token), set by run_load
        # the unchanging part, encoded once: a real agent's JSON encoding is its cost, not the controller's
        self.fixed = json.dumps({"samples": samples(name, hosts), "info": {"version": "sim", "address": address(name)},
                                 "paths": [[peer, str(path), path % 2, None]
                                           for peer in peers_of(name, hosts)[1] for path in range(PATHS)]})[1:-1]

    def body(self) -> bytes:
        self.pushes += 1
        if self.pushes % EVENT_EVERY == 1:
            self.seq += 1
            self.pending.append({"seq": self.seq, "t_ns": time.time_ns(), "kind": "link_flap_sim", "device": "eth0"})
        head = json.dumps({"host": self.name, "boot": self.boot, "events": self.pending})[:-1]
        return f"{head},{self.fixed}}}".encode()

    async def push(self, client: httpx.AsyncClient, counts: Counts) -> None:
        if self.busy:  # one push at a time, as agent.push: never the same events twice at once
            counts.skipped += 1
            return
        body, sent = self.body(), len(self.pending)
        t = time.perf_counter()
        self.busy = True
        try:
            r = await client.post(self.urls[self.at] + "/api/v1/push", content=body,
                                  headers={"Authorization": f"Bearer {self.credential}"})
            ok = r.status_code == 200
        except httpx.HTTPError:
            ok = False
        finally:
            self.busy = False
        if not ok:
            counts.errors += 1
            self.at = (self.at + 1) % len(self.urls)  # as agent.push: the next replica
            return
        counts.latencies_s.append(time.perf_counter() - t)
        counts.ok += 1
        del self.pending[:sent]
        key = (self.name, self.boot)
        counts.acked[key] = counts.acked.get(key, 0) + sent


async def run_load(hosts: list[SimHost], token: str, seconds: float, interval_s: float,
                   max_connections: int = 256) -> Counts:
    """Every host pushes once per interval for `seconds`; the counts of what came back."""
    counts = Counts()
    for h in hosts:
        h.credential = host_token(token, h.name)
    limits = httpx.Limits(max_connections=max_connections, max_keepalive_connections=max_connections)
    async with httpx.AsyncClient(headers={"Authorization": f"Bearer {token}", "content-type": "application/json"},
                                 timeout=10.0, limits=limits) as client:
        start = time.perf_counter()
        inflight: set[asyncio.Task] = set()
        rounds = int(seconds / interval_s)
        for k in range(rounds):
            for i, h in enumerate(hosts):
                due = start + k * interval_s + interval_s * i / len(hosts)
                delay = due - time.perf_counter()
                if delay > 0:
                    await asyncio.sleep(delay)
                elif delay < -interval_s:
                    counts.late += 1
                task = asyncio.create_task(h.push(client, counts))
                inflight.add(task)
                task.add_done_callback(inflight.discard)
        if inflight:
            await asyncio.wait(inflight, timeout=15)
    return counts
