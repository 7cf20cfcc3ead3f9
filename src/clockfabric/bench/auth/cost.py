"""What the fleet key costs: per-datagram seal and open time, and the agent CPU it adds.

The per-datagram figures time auth.seal's Sealer itself (the whole Python path: trailer, MAC,
replay window) on a probe reply. The agent's share is those times by the datagrams an agent
seals and opens a second at the default rates (probes both ways, failover heartbeats on every
path to every peer, control messages). agent-overhead measures the whole agent, keyed, in a lab.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Annotated

import numpy as np
import typer
from rich.console import Console
from rich.table import Table

from clockfabric.agent.config import AgentConfig
from clockfabric.auth.keys import Keyring
from clockfabric.auth.seal import PROBE, Sealer
from clockfabric.bench import harness
from clockfabric.bench.harness import BENCHMARKS, RESULTS, Target, record
from clockfabric.probe import wire
from clockfabric.topology import leafspine
from clockfabric.traffic.failover import Heartbeats

CPU_BUDGET_PCT = 1.0  # of one core, for the whole agent
DEFAULT_JSON = RESULTS / "auth-cost.json"
out = Console()


def per_datagram_ns(n: int, repeats: int) -> dict[str, list[float]]:
    """Median-able samples (ns per datagram) of sealing and of opening a probe reply."""
    keys = Keyring({1: bytes(range(32))})
    sender, receiver = Sealer(PROBE, "10.0.0.1", keys), Sealer(PROBE, "10.0.0.2", keys)
    payload = wire.encode(wire.Packet(wire.REPLY0, 1, 2, (3, 4), 1, (5, 6)))
    samples: dict[str, list[float]] = {"seal": [], "open": []}
    for _ in range(repeats):
        t0 = time.perf_counter_ns()
        sealed = [sender.seal(payload, "10.0.0.2")[0] for _ in range(n)]
        t1 = time.perf_counter_ns()
        for data in sealed:
            receiver.open(data, "10.0.0.1")
        t2 = time.perf_counter_ns()
        samples["seal"].append((t1 - t0) / n)
        samples["open"].append((t2 - t1) / n)
    return samples


def datagrams_per_s(hosts: int, planes: int) -> dict[str, float]:
    """What one agent seals and opens a second at the defaults, in a leaf-spine of `hosts`."""
    topo = leafspine(hosts, 2, 2)
    cfg = AgentConfig("h0", topo, Path("/nonexistent"), insecure=True)
    beats = Heartbeats()
    exchanges = 2 * len(cfg.probed) / cfg.probe_interval_s()  # those it starts, and about as many it answers
    return {"probe": 6 * exchanges,  # three datagrams each way, each sealed once and opened once
            "heartbeat": 2 * (hosts - 1) * planes * beats.ports / beats.interval_s if planes > 1 else 0.0,
            "control": 2 * 2 / cfg.update_s}  # a report and a map (or claims) each way an update


@BENCHMARKS.register("auth-cost")
def main(hosts: Annotated[int, typer.Option(min=2)] = 12, planes: Annotated[int, typer.Option(min=1)] = 2,
         n: Annotated[int, typer.Option(min=100)] = 20_000, repeats: Annotated[int, typer.Option(min=3)] = 15,
         json_path: Annotated[Path, typer.Option("--out", help="Where the record goes.")] = DEFAULT_JSON) -> None:
    """Per-datagram cost of sealing and opening, and the share of a core it takes an agent."""
    facts = harness.machine()
    samples = per_datagram_ns(n, repeats)
    seal_ns, open_ns = (float(np.median(samples[k])) for k in ("seal", "open"))
    rates = datagrams_per_s(hosts, planes)
    total = sum(rates.values())
    share_pct = total * (seal_ns + open_ns) / 2 / 1e9 * 100  # each datagram is sealed or opened here, once
    table = Table(title=f"fleet key cost, {hosts}-host leaf-spine, {planes} planes, default rates")
    for col in ("what", "value"):
        table.add_column(col, justify="right")
    table.add_row("seal, ns/datagram (median)", f"{seal_ns:.0f}")
    table.add_row("open, ns/datagram (median)", f"{open_ns:.0f}")
    for k, v in rates.items():
        table.add_row(f"{k} datagrams/s", f"{v:.0f}")
    table.add_row("agent CPU for seals, % of a core", f"{share_pct:.3f}")
    out.print(table)
    judged = [Target("seal CPU of an agent at default rates", share_pct, CPU_BUDGET_PCT, "% of a core",
                     better="lower")]
    record("auth-cost", judged, facts, {"samples_ns": samples, "datagrams_per_s": rates, "seal_ns": seal_ns,
                                        "open_ns": open_ns}, path=json_path)
    out.print(f"raw: {json_path}")
