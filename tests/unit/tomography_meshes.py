"""Generated leaf-spine meshes with one queued directed link, for the localization tests.

A fabric of 2-4 leaves, 2-4 spines, 1-2 planes and 4-12 hosts (the topology generator's names);
every ordered host pair probed over each spine of each plane (a pair under one leaf: its one
path); one directed link queued with a random excess; each path sampled a few times in the
window with noise (and now and then a spike that one sample carries alone).
"""

from __future__ import annotations

import random
from dataclasses import dataclass
from itertools import pairwise

from clockfabric.localization import INBAND, PROBE, Hop, Observation
from clockfabric.topology import multirail

TIERS = ("host>leaf", "leaf>spine", "spine>leaf", "leaf>host")
S = 10**9
NOW = 1_790_000_000 * S
WINDOW = 10 * S


@dataclass
class Mesh:
    hosts: list[str]
    paths: dict[str, tuple[Hop, ...]]  # probe path name -> its hops
    ends: dict[str, tuple[str, str]]  # probe path name -> (src, dst)
    links: list[Hop]  # every directed link the paths cross

    def tier_links(self, tier: str) -> list[Hop]:
        a, b = tier.split(">")
        return [h for h in self.links if _role(h[1].split(">")[0]) == a and _role(h[1].split(">")[1]) == b]

    def crossing(self, hop: Hop, routes: dict[str, tuple[Hop, ...]] | None = None) -> frozenset[str]:
        return frozenset(n for n, hops in (routes or self.paths).items() if hop in hops)


def _role(node: str) -> str:
    return "leaf" if "leaf" in node else "spine" if "spine" in node else "host"


def fabric(rng: random.Random) -> Mesh:
    leaves, spines, planes = rng.randint(2, 4), rng.randint(2, 4), rng.randint(1, 2)
    hosts = rng.randint(max(4, leaves), 12)
    topo = multirail(hosts, planes, leaves, spines)
    cable = {frozenset((lk.a.node, lk.b.node)): lk.name for lk in topo.links}
    under = {f"h{i}": i * leaves // hosts for i in range(hosts)}

    def sw(plane: int, role: str, i: int) -> str:
        return f"{role}{i}" if planes == 1 else f"p{plane}-{role}{i}"

    paths: dict[str, tuple[Hop, ...]] = {}
    ends: dict[str, tuple[str, str]] = {}
    for a in under:
        for b in under:
            if a == b:
                continue
            for r in range(planes):
                la, lb = sw(r, "leaf", under[a]), sw(r, "leaf", under[b])
                routes = ([(a, la, b)] if la == lb else
                          [(a, la, sw(r, "spine", k), lb, b) for k in range(spines)])
                for nodes in routes:
                    name = f"{a}->{b} via {nodes[2]}"
                    paths[name] = tuple((cable[frozenset(s)], f"{s[0]}>{s[1]}") for s in pairwise(nodes))
                    ends[name] = (a, b)
    links = sorted({h for hops in paths.values() for h in hops})
    return Mesh(sorted(under, key=lambda h: int(h[1:])), paths, ends, links)


def noisy(rng: random.Random, excess: float) -> float:
    value = abs(rng.gauss(0, 4.0)) + excess * rng.uniform(0.6, 1.4) if excess else abs(rng.gauss(0, 4.0))
    return value + (rng.uniform(100, 400) if rng.random() < 0.03 else 0.0)  # one sample's spike


def sample(rng: random.Random, mesh: Mesh, queued: dict[Hop, float], samples: int = 5,
           drop: float = 0.0) -> list[Observation]:
    """Every probe path's samples in the window (but for a `drop` share of host pairs); paths over
    a queued link carry its excess."""
    out = []
    gone = {pair for pair in sorted(set(mesh.ends.values())) if drop and rng.random() < drop}
    for name, hops in mesh.paths.items():
        src, dst = mesh.ends[name]
        if (src, dst) in gone:
            continue
        excess = sum(queued.get(h, 0.0) for h in hops)
        for i in range(samples):
            t = NOW - WINDOW + (i + 1) * WINDOW // (samples + 1)
            out.append(Observation(name, hops, noisy(rng, excess), PROBE, t, src, dst))
    return out


def flow(rng: random.Random, mesh: Mesh, queued: dict[Hop, float], over: Hop | None = None,
         name: str = "flow") -> tuple[Observation, tuple[Hop, ...]]:
    """A job flow's in-band delay over one probe path's links (one crossing `over` where given)."""
    choices = [n for n, hops in mesh.paths.items() if over is None or over in hops]
    path = rng.choice(sorted(choices))
    hops = mesh.paths[path]
    excess = sum(queued.get(h, 0.0) for h in hops)
    src, dst = mesh.ends[path]
    return Observation(name, hops, noisy(rng, excess), INBAND, NOW - 1, src, dst), hops


def fault(rng: random.Random, mesh: Mesh, tier: str) -> tuple[Hop, float]:
    return rng.choice(mesh.tier_links(tier)), rng.uniform(150.0, 5000.0)


def right(verdict, hop: Hop, routes: dict[str, tuple[Hop, ...]]) -> bool:
    """The true link is first, alone or with links no path tells apart from it."""
    first = verdict.first
    if first is None or hop not in first.hops:
        return False
    crossing = frozenset(n for n, hops in routes.items() if hop in hops)
    return all(frozenset(n for n, hops in routes.items() if h in hops) == crossing for h in first.hops)
