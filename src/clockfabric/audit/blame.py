"""Who is to blame when pairs fail: an endpoint (a host's NIC) that fails with most of the
peers it was tried with is the fault, not its peers. One dead NIC then gives one finding,
not one per peer, and failures it does not explain are left as pair (path) findings."""

from __future__ import annotations

from collections import Counter

Endpoint = tuple[str, str]  # (host, nic)
Pair = tuple[Endpoint, Endpoint]


def blame(results: dict[Pair, bool], share: float = 0.25) -> tuple[dict[Endpoint, list[Endpoint]], list[Pair]]:
    """results: (a, b) -> True if the pair is bad. Returns (blamed endpoint -> the peers it failed
    with, bad pairs that no blamed endpoint explains).

    Greedy, like a set cover: the endpoint in the most unexplained bad pairs is blamed if it
    is in at least two and in `share` of the pairs it was tried in; its pairs are then
    explained, and the next is weighed. A lone bad pair is a path, not an endpoint."""
    tried = Counter(e for pair in results for e in pair)
    unexplained = {pair for pair, is_bad in results.items() if is_bad}
    blamed: dict[Endpoint, list[Endpoint]] = {}
    while unexplained:
        counts = Counter(e for pair in unexplained for e in pair)
        e, n = max(sorted(counts.items()), key=lambda kv: kv[1])
        if n < 2 or n < share * tried[e]:
            break
        mine = {pair for pair in unexplained if e in pair}
        blamed[e] = sorted(b if a == e else a for a, b in mine)
        unexplained -= mine
    return dict(sorted(blamed.items())), sorted(unexplained)


def whole_planes(results: dict[Pair, bool], plane_of) -> tuple[list[int], dict[Pair, bool]]:
    """Planes (of three NICs or more) where every pair is bad: the plane itself is the fault,
    not its NICs. Returns those planes, and the results of the other planes."""
    by_plane: dict[int, dict[Pair, bool]] = {}
    for pair, is_bad in results.items():
        by_plane.setdefault(plane_of(pair[0]), {})[pair] = is_bad
    dark = sorted(p for p, rs in by_plane.items() if all(rs.values()) and len({e for pr in rs for e in pr}) >= 3)
    return dark, {pair: bad for p, rs in by_plane.items() if p not in dark for pair, bad in rs.items()}
