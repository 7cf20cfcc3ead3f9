"""The parsers `clockfabric bench fuzz` feeds: one entry each in PARSERS, built on demand.

An entry's factory returns a Parser: its seed corpus (valid inputs, made by the real encoders
where the code has one), the entry point a datagram, frame or body goes through (`step`: True
when the input was taken, False or one of `refusals` when it was refused), and what kind of
input it is. Sealed parsers have opened each seed once before the run, so every input they
take is a forgery or a replay. Threaded parsers are driven from a loop thread of their own, as
the agent's control loop and the controller's push path are, and `healthy` checks that loop
still takes a good input afterwards.
"""

from __future__ import annotations

import asyncio
import json
import logging
import struct
import tempfile
import threading
import time
from collections import Counter, deque
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from types import SimpleNamespace

from clockfabric import wirejson
from clockfabric.registry import Registry

DATAGRAM = 65_507  # the largest UDP payload: what a datagram parser can be handed
A, B = "10.0.0.1", "10.0.0.2"
KEY = b"k" * 32


@dataclass
class Parser:
    seeds: list[bytes]
    step: Callable[[bytes], bool]
    refusals: tuple[type[BaseException], ...] = ()
    structured: bool = False  # JSON: mutated by its structure too
    sealed: bool = False  # anything taken is a forged or replayed packet
    threaded: bool = False  # run on a loop thread of its own
    max_size: int = DATAGRAM
    healthy: Callable[[], bool] | None = None  # run on the loop thread after the fuzz
    close: Callable[[], None] = field(default=lambda: None)


PARSERS: Registry[Callable[[], Parser]] = Registry("fuzz parser")


class LoggedCrash(Exception):
    """A handler's exception that a catch-all caught and logged: the loop lives, the handler has a bug."""


class _Caught(logging.Handler):
    def __init__(self) -> None:
        super().__init__(logging.ERROR)
        self.records: list[logging.LogRecord] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.records.append(record)


def _taken(value: object) -> bool:
    return value is not None


# ---- binary datagrams and frames ---------------------------------------------------------------
def _probe_packets() -> list[bytes]:
    from clockfabric.probe import wire

    now = time.time_ns()
    return [wire.encode(wire.Packet(wire.PROBE0, 7, 1)), wire.encode(wire.Packet(wire.PROBE1, 7, 1)),
            wire.encode(wire.Packet(wire.WARMUP, 7, 0)), wire.encode(wire.Packet(wire.REPLY1, 7, 1)),
            wire.encode(wire.Packet(wire.REPLY0, 7, 1, (now, now + 900), 0, (now - 10**6, now - 10**6 + 5)))]


@PARSERS.register("probe-wire", help="probe datagrams (probe/wire.py decode)")
def probe_wire() -> Parser:
    from clockfabric.probe import wire

    return Parser(_probe_packets(), lambda d: _taken(wire.decode(d)), (wire.Malformed,))


def _sealed(channel: str, payloads: list[bytes]) -> Parser:
    from clockfabric.auth.keys import Keyring
    from clockfabric.auth.seal import Rejected, Sealer

    keys = Keyring({1: KEY})
    sender, receiver = Sealer(channel, A, keys), Sealer(channel, B, keys)
    seeds = [sender.seal(p, B, echo=i)[0] for i, p in enumerate(payloads)]
    for s in seeds:  # each taken once, as it was sent: from now on, the same bytes are a replay
        receiver.open(s, A)
    return Parser(seeds, lambda d: _taken(receiver.open(d, A)), (Rejected,), sealed=True)


@PARSERS.register("probe-seal", help="sealed probe datagrams (auth/seal.py open, probe channel)")
def probe_seal() -> Parser:
    from clockfabric.auth.seal import PROBE

    return _sealed(PROBE, _probe_packets())


@PARSERS.register("control-seal", help="sealed control datagrams (auth/seal.py open, control channel)")
def control_seal() -> Parser:
    from clockfabric.auth.seal import CONTROL

    return _sealed(CONTROL, _control_messages())


@PARSERS.register("heartbeat", help="failover heartbeats (traffic/heartbeat.py unpack)")
def heartbeat() -> Parser:
    from clockfabric.traffic.heartbeat import Heartbeat

    seeds = [Heartbeat(0, 1, 99, 5, 0b10, 0, version=1).pack(),
             Heartbeat(1, 0, 99, 6, 0, 0b1, time.time_ns(), (0, 3, 65535, 1)).pack()]
    return Parser(seeds, lambda d: _taken(Heartbeat.unpack(d)))


@PARSERS.register("lldp", help="LLDP frames (lldp.py parse)")
def lldp_frames() -> Parser:
    from clockfabric import lldp

    mac = bytes.fromhex("020000000001")
    seeds = [lldp.frame(mac, "h1", "eth0"), lldp.frame(mac, "leaf0", "p3", system="leaf0", description="to h1"),
             lldp.frame(mac, "spine1", "p0", ttl=0)]
    return Parser(seeds, lambda d: _taken(lldp.parse(d)), max_size=lldp.MAX_FRAME)


@PARSERS.register("inband-frame", help="sampled TCP frames of the in-band one-way delays (workload/inband.py)")
def inband_frame() -> Parser:
    from clockfabric.workload import inband

    def frame(seq: int, ihl_words: int = 5) -> bytes:
        ip = struct.pack("!BBHHHBBH4s4s", 0x40 | ihl_words, 0, 20 + 4 * (ihl_words - 5) + 20 + 8, 4242, 0, 64, 6, 0,
                         bytes([10, 0, 0, 1]), bytes([10, 0, 0, 2])) + bytes(4 * (ihl_words - 5))
        tcp = struct.pack("!HHIIBBHHH", 40000, 5201, seq, 0, 5 << 4, 0x18, 512, 0, 0) + b"payload!"
        return bytes(6) + bytes(6) + struct.pack("!H", inband.ETH_P_IP) + ip + tcp

    seeds = [frame(seq) for seq in range(0, 1 << 20, 4099) if inband.selected(seq)][:4] + [frame(0, 6)]
    return Parser(seeds, lambda d: _taken(inband.parse_frame(d)), max_size=inband.SNAP_BYTES)


# ---- JSON control messages ---------------------------------------------------------------------
def _control_messages() -> list[bytes]:
    """Each control message type the agents send one another, shaped as the code that sends it."""
    now = time.time_ns()
    mapping = {"t0_ns": now, "offset_ns": 1250.5, "drift": 1e-7, "uncertainty_ns": 80.0, "synced": True}
    messages = [
        {"t": "report", "host": "h1", "edges": [["h2", 310.0, 2e-8, now, 40, 55.0, 1e-9]], "urgent": True},
        {"t": "map", "parts": 1, "dropped_edges": 0, "unsynced": {}, "hosts": {"h0": mapping, "h1": mapping}},
        {"t": "stepped", "host": "h1", "delta_ns": 5_000_000},
        {"t": "place", "job": "j1", "want": [["h1", "h2"], ["h2", "h3"]]},
        {"t": "release", "job": "j1"},
        {"t": "loads", "job": "j1"},
        {"t": "claims", "host": "h1", "claims": {"j1": [["h1", "h2", 0, "spine0"]]}},
        {"t": "inband", "from": "h1", "r": [["10.0.0.2", 40000, "10.0.0.1", 5201, 77, 4242, "tx", now, 1]]},
    ]
    return [json.dumps(m).encode() for m in messages]


def _agent_context(host: str, addresses: dict[str, str]):
    """What the clock and claims services need of an agent, with no sockets: sends go nowhere."""
    from clockfabric.agent.config import AgentConfig
    from clockfabric.topology import leafspine

    topo = leafspine(4, 2, 2)
    return SimpleNamespace(cfg=AgentConfig(host, topo, Path("/nonexistent"), insecure=True), rails=["eth0"],
                           links=None, neighbours=None, address=addresses[host], addresses=addresses, latest=None,
                           engine=SimpleNamespace(interval_s=0.2, names={a: h for h, a in addresses.items()},
                                                  exchanges=deque(), counters=Counter()),
                           clock=SimpleNamespace(now_ns=time.time_ns, local_ns=lambda t: t, set_ns=lambda: 0),
                           send=lambda h, m: None, reply=lambda m, to: None, publish=lambda: None,
                           rejected=lambda reason: None, time_source=None)


@PARSERS.register("agent-control", help="control messages through the agent's router (agent/service.py) to "
                                        "its clock and claims services, on a loop thread")
def agent_control() -> Parser:
    from clockfabric.agent import service
    from clockfabric.agent.services.claims import Claims
    from clockfabric.agent.services.clock import ClockSync

    addresses = {f"h{i}": f"10.0.0.{i + 1}" for i in range(4)}
    ctx = _agent_context("h0", addresses)  # h0: the reference, which solves: it takes reports
    clock, claims = ClockSync(ctx), Claims(ctx)
    router = service.Router([clock, claims])
    caught = _Caught()
    service.log.addHandler(caught)
    service.log.propagate = False  # the fuzz would print every handler bug it finds; they are counted
    solver = (addresses["h0"], 7299)  # a map from the solver is taken: the handler behind it is fuzzed too

    def step(data: bytes) -> bool:
        before = len(caught.records)
        taken = router.deliver(data, solver)
        if len(caught.records) > before:
            record = caught.records[-1]
            raise LoggedCrash(f"{record.getMessage()}: {record.exc_info[1]!r}" if record.exc_info else
                              record.getMessage())
        return taken

    def healthy() -> bool:  # what the loop does between messages must still work on what was stored
        clock.poll(time.monotonic())
        clock.tick(time.time_ns())
        claims.tick(time.time_ns())
        clock.report()
        mapping = clock.sync.mapping
        finite = mapping is None or all(v == v for v in (mapping.offset_ns, mapping.drift))
        return finite and step(_control_messages()[2])

    def close() -> None:
        service.log.removeHandler(caught)
        service.log.propagate = True

    return Parser(_control_messages(), step, structured=True, threaded=True, healthy=healthy, close=close)


@PARSERS.register("inband-records", help="in-band delay records from a peer (workload/exchange.py decode, "
                                         "workload/owd_monitor.py received)")
def inband_records() -> Parser:
    from clockfabric.workload import exchange
    from clockfabric.workload.inband import Packet
    from clockfabric.workload.owd import RX, TX, Record
    from clockfabric.workload.owd_monitor import InbandOwd

    owd = InbandOwd("h0", {"10.0.0.1": "h0", "10.0.0.2": "h1"}, lambda t: (t, True), window_ns=10**9)
    owd.flows = {("10.0.0.1", 5201, "10.0.0.2", 40000)}
    now = time.time_ns()
    records = [Record(Packet("10.0.0.2", 40000, "10.0.0.1", 5201, 77 + i, 4242 + i), side, now + i, i % 2 == 0)
               for i, side in enumerate((TX, RX, TX))]
    seeds = [json.dumps(m).encode() for m in exchange.encode("h1", records)]

    def step(data: bytes) -> bool:
        msg = wirejson.loads(data)  # as the agent's router reads it
        owd.received(str(msg["from"]), exchange.decode(msg), time.monotonic_ns())
        return True

    # what the agent's router counts as a bad message (agent/service.py)
    return Parser(seeds, step, (ValueError, KeyError, TypeError, IndexError, AttributeError, OverflowError),
                  structured=True)


# ---- the controller's push ---------------------------------------------------------------------
def _push_bodies() -> list[bytes]:
    """Pushes as an agent sends them (agent/push.py): events, samples, info and its path map."""
    now = time.time_ns()
    bodies = [
        {"host": "h1", "boot": "b1", "events": [{"seq": 1, "t_ns": now, "kind": "link_down", "device": "eth0"},
                                                {"seq": 2, "t_ns": now + 5, "kind": "link_up", "device": "eth0"}],
         "samples": [{"name": "owd_p50_ns", "value": 1234.5, "labels": {"dst": "h2", "path": "p0"}, "t_ns": now}],
         "info": {"version": "1", "services": ["clock", "claims"]}, "dropped_events": 0,
         "paths": [["h2", "p0", 0, "spine0"], ["h2", "p1", 1, None]]},
        {"host": "h2", "boot": "b7", "samples": [{"name": "link_up", "value": 1.0, "labels": {"device": "eth1"}}]},
    ]
    return [json.dumps(b).encode() for b in bodies]


@PARSERS.register("controller-push", help="push bodies through the controller's push handler (body bounds, "
                                          "the Push schema, storage), on a loop thread")
def controller_push() -> Parser:
    from fastapi import HTTPException
    from fastapi.exceptions import RequestValidationError
    from fastapi.routing import APIRoute
    from starlette.requests import Request

    from clockfabric.controller.app import MAX_PUSH_BYTES, create_app
    from clockfabric.controller.fleet import Fleet
    from clockfabric.controller.storage.sqlite import SqliteStorage

    directory = tempfile.TemporaryDirectory(prefix="clockfabric-fuzz-")
    storage = SqliteStorage(Path(directory.name) / "fuzz.db")
    app = create_app(Fleet(storage, hosts=["h1", "h2"]), "token")
    handler = next(r.endpoint for r in app.routes if isinstance(r, APIRoute) and r.path == "/api/v1/push")
    loops: dict[int, asyncio.AbstractEventLoop] = {}  # one event loop for the thread that steps, as uvicorn has

    def step(data: bytes) -> bool:
        async def receive() -> dict:
            return {"type": "http.request", "body": data, "more_body": False}

        scope = {"type": "http", "method": "POST", "path": "/api/v1/push", "query_string": b"",
                 "headers": [(b"content-length", str(len(data)).encode())]}
        loop = loops.get(threading.get_ident())
        if loop is None:
            loop = loops[threading.get_ident()] = asyncio.new_event_loop()
        loop.run_until_complete(handler(Request(scope, receive), "h1"))  # as h1's credential would
        return True

    def close() -> None:
        for loop in loops.values():
            loop.close()
        storage.close()
        directory.cleanup()

    return Parser(_push_bodies(), step, (RequestValidationError, HTTPException), structured=True, threaded=True,
                  max_size=MAX_PUSH_BYTES + 1024, healthy=lambda: step(_push_bodies()[0]), close=close)
