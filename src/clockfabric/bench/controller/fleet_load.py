"""The simulated agents of `bench fleet-scale` and their load: each pushes what agent.push sends
(events, info, path map; no samples) to the controller and writes its series through the gate,
once a cadence at its own offset in it (open loop: slow servers do not slow the schedule, they
queue). Requests are built once and sent over plain keep-alive connections, since Python, not the
servers, is what runs out first on a small machine."""

from __future__ import annotations

import asyncio
import json
import threading
import time
import uuid
from dataclasses import dataclass, field

from clockfabric.auth.credential import host_token
from clockfabric.bench.controller.scale import TOKEN
from clockfabric.bench.controller.scale_load import EVENT_EVERY, PATHS, address, peers_of, samples
from clockfabric.controller.series.gate import IMPORT_PATH
from clockfabric.serieswire import line

CADENCE_S = 10.0
CONNECTIONS = 64  # to the gate, and as many to the controller
DRAIN_S = 30.0  # after the last request is due, what is not answered within this failed


def write_request(host: str, hosts: int, port: int) -> bytes:
    """A host's write of its samples to the gate, whole: headers and its lines, as the agent sends it."""
    # unstamped: the same request is sent each cadence, and the engine stamps what it takes
    lines = "".join(line(s["name"], s["value"], s.get("labels") or {}, None) + "\n" for s in samples(host, hosts))
    return _post(IMPORT_PATH, port, host, lines.encode())


def _post(path: str, port: int, host: str, body: bytes, kind: str = "text/plain") -> bytes:
    head = (f"POST {path} HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nContent-Type: {kind}\r\n"
            f"Authorization: Bearer {host_token(TOKEN, host)}\r\nContent-Length: {len(body)}\r\n\r\n")
    return head.encode() + body


@dataclass
class Agent:
    """One simulated agent's pushes: what agent.push sends, no samples (they go to the gate)."""

    name: str
    hosts: int
    port: int
    boot: str = field(default_factory=lambda: uuid.uuid4().hex[:12])
    pushes: int = 0
    seq: int = 0

    def __post_init__(self) -> None:
        paths = [[peer, str(path), path % 2, None] for peer in peers_of(self.name, self.hosts)[1]
                 for path in range(PATHS)]
        self._tail = json.dumps({"info": {"version": "sim", "address": address(self.name)}, "samples": [],
                                 "dropped_events": 0,
                                 "paths": paths})[1:]

    def push(self) -> bytes:
        self.pushes += 1
        events = []
        if self.pushes % EVENT_EVERY == 1:
            self.seq += 1
            events = [{"seq": self.seq, "t_ns": time.time_ns(), "kind": "link_flap_sim", "device": "eth0"}]
        body = json.dumps({"host": self.name, "boot": self.boot, "events": events})[:-1] + "," + self._tail
        return _post("/api/v1/push", self.port, self.name, body.encode(), "application/json")


@dataclass
class Counts:
    sent: int = 0
    ok: int = 0
    refused: int = 0
    failed: int = 0
    late: int = 0
    latencies_s: list[float] = field(default_factory=list)


async def _worker(port: int, queue: asyncio.Queue, counts: Counts, ok: bytes) -> None:
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    while True:
        req = await queue.get()
        try:
            t0 = time.perf_counter()
            writer.write(req)
            line = await reader.readline()
            if not line:  # the server had closed this idle connection: the request never reached it
                writer.close()
                reader, writer = await asyncio.open_connection("127.0.0.1", port)
                t0 = time.perf_counter()
                writer.write(req)
                line = await reader.readline()
            status = line.split(b" ", 2)[1]
            length = 0
            while (line := await reader.readline()) not in (b"\r\n", b""):
                if line.lower().startswith(b"content-length:"):
                    length = int(line.split(b":")[1])
            if length:
                await reader.readexactly(length)
            if status == ok:
                counts.ok += 1
                counts.latencies_s.append(time.perf_counter() - t0)
            else:
                counts.refused += 1
        except (OSError, IndexError, asyncio.IncompleteReadError):
            counts.failed += 1
            writer.close()
            reader, writer = await asyncio.open_connection("127.0.0.1", port)
        finally:
            queue.task_done()


async def load(ports: tuple[int, int], agents: list[Agent], writes: list[bytes] | None, seconds: float,
                cadence_s: float = CADENCE_S, until: threading.Event | None = None) -> tuple[Counts, Counts]:
    """Each agent's push, then its write (None: none), once a cadence at its own offset in it
    (open loop), for `seconds` or until `until` is set."""
    pushed, written = Counts(), Counts()
    push_q: asyncio.Queue = asyncio.Queue()
    write_q: asyncio.Queue = asyncio.Queue()
    workers = [asyncio.create_task(_worker(ports[0], push_q, pushed, b"200")) for _ in range(CONNECTIONS)]
    workers += [asyncio.create_task(_worker(ports[1], write_q, written, b"204")) for _ in range(CONNECTIONS)]
    start = time.monotonic()
    n = len(agents)
    k = 0
    while (due := start + k * cadence_s / n) < start + seconds and not (until is not None and until.is_set()):
        wait = due - time.monotonic()
        if wait > 0:
            await asyncio.sleep(wait)
        elif wait < -cadence_s:
            pushed.late += 1
        push_q.put_nowait(agents[k % n].push())
        pushed.sent += 1
        if writes is not None:
            write_q.put_nowait(writes[k % n])
            written.sent += 1
        k += 1
    try:
        await asyncio.wait_for(asyncio.gather(push_q.join(), write_q.join()), timeout=DRAIN_S)
    except asyncio.TimeoutError:
        pass  # what is still queued or unanswered now failed: the servers fell that far behind
    for w in workers:
        w.cancel()
    for c in (pushed, written):
        c.failed = c.sent - c.ok - c.refused
    return pushed, written
