"""Which peers each host probes: a ring (so the graph is connected) plus random chords
(so loops are short and one bad edge is outvoted), the same on every host from a seed."""

from __future__ import annotations

import random


def probe_peers(hosts: list[str], k: int, seed: int = 0) -> dict[str, list[str]]:
    """host -> the k peers it probes (fewer if there are not that many other hosts)."""
    ring = sorted(hosts)
    n = len(ring)
    k = min(k, n - 1)
    chosen = {}
    for i, h in enumerate(ring):
        peers = [ring[(i + 1) % n]] if k else []
        others = [p for p in ring if p != h and p not in peers]
        random.Random(f"{seed}/{h}").shuffle(others)
        chosen[h] = peers + others[: k - len(peers)]
    return chosen


def neighbours(peers: dict[str, list[str]]) -> dict[str, set[str]]:
    """Both directions: whom a host probes and who probes it."""
    out = {h: set(p) for h, p in peers.items()}
    for h, ps in peers.items():
        for p in ps:
            out.setdefault(p, set()).add(h)
    return out
