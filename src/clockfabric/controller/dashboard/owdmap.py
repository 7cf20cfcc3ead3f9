"""The one-way-delay heatmap as the view draws it, from the newest delay of each (src, dst, path)
(`Series.delays`). Pure: delays in, a dict out.

A pair's cell is its worst path (or the one path asked for). Up to MAX_GRID hosts the grid is host
x host. Past that a grid of every host fits no screen (2,000 x 2,000 is 4 million cells), so the
hosts, sorted by name, fall into at most MAX_GRID blocks of consecutive names (hosts under one
leaf are named alike) and a cell is the worst pair of its block pair; asking for one block pair
(`block`) gives its hosts as a host x host grid. The worst pairs come too, a page at a time.

Reading the delays into pairs is most of the work and the same for every page and block of one
heatmap: `pairs` does it, `heatmap` draws one page of its result. A fleet past MAX_GRID hosts is
read worst first (`worst_first`: each pair's worst, worked out by the engine), and each path's
delay only for the pairs a page shows.
"""

from __future__ import annotations

import heapq
import math
import re
from collections.abc import Callable, Iterable
from dataclasses import dataclass

MAX_GRID = 64
WORST_PAGE = 50
Delay = tuple[str, str, str, float]  # src, dst, path, ns: one probe path's delay (Series.delays)
Pair = tuple[str, str]


def natural(name: str) -> list:
    """h2 before h10: the digits in a name compare as numbers."""
    return [int(part) if part.isdigit() else part for part in re.split(r"(\d+)", name)]


PathsOf = Callable[[list[Pair]], dict[Pair, dict[str, float]]]  # pairs -> each one's delay per path


@dataclass(frozen=True)
class Pairs:
    """Each pair's delay per path (of `path` only, if given) and its worst; every path label seen;
    the hosts of every pair, in name order. `paths_of`: where the delays per path were not read
    with the worst (`delays` empty), what reads them for the pairs a page shows."""

    path: str | None
    delays: dict[Pair, dict[str, float]]
    worst: dict[Pair, float]
    labels: list[str]
    hosts: list[str]
    paths_of: PathsOf | None = None

    def paths(self, wanted: list[Pair]) -> dict[Pair, dict[str, float]]:
        """Each of `wanted`'s delay per path (a pair with none is left out)."""
        if self.paths_of is not None:
            return self.paths_of(wanted) if wanted else {}
        return {pair: self.delays[pair] for pair in wanted if pair in self.delays}


def plane_of(label: str) -> str | None:
    """A path label's plane (its rail: the part before ':', as the probe engine names paths)."""
    rail, colon, _port = label.partition(":")
    return rail if colon else None


def pairs(delays: Iterable[Delay], path: str | None = None) -> Pairs:
    """`path`: one path label, or a plane (each pair's worst over that plane's paths)."""
    found: dict[Pair, dict[str, float]] = {}
    worst: dict[Pair, float] = {}
    labels: set[str] = set()
    finite = math.isfinite  # looked up once: this loop runs once a path, 400,000 at 10,000 hosts
    for src, dst, label, value in delays:
        if not finite(value):
            continue
        labels.add(label)
        if path is not None and label != path and plane_of(label) != path:
            continue
        pair = (src, dst)
        per_path = found.get(pair)
        if per_path is None:
            found[pair], worst[pair] = {label: value}, value
        else:
            per_path[label] = value
            if value > worst[pair]:
                worst[pair] = value
    hosts = sorted({h for p in worst for h in p}, key=natural)
    return Pairs(path, found, worst, sorted(labels), hosts)


def worst_first(worst: Iterable[tuple[str, str, float]], labels: Iterable[str], path: str | None,
                paths_of: PathsOf) -> Pairs:
    """Pairs from each pair's worst delay (src, dst, ns) alone, as the engine works it out over the
    paths `path` names; `paths_of` reads a page's pairs' delays per path when it is drawn."""
    found = {(src, dst): ns for src, dst, ns in worst if math.isfinite(ns)}
    return Pairs(path, {}, found, sorted(labels), sorted({h for p in found for h in p}, key=natural), paths_of)


def heatmap(found: Pairs, *, stat: str, block: tuple[int, int] | None = None, offset: int = 0) -> dict:
    """{stat, path, paths, planes, hosts, pairs, lo_ns, hi_ns, block_size, blocks, block, rows, cols,
    cells: rows x cols of null or {ns, ...}, worst: {total, offset, items}}. `block`: (row, column)
    block numbers; raises IndexError where there is no such block."""
    worst, hosts = found.worst, found.hosts
    size = max(1, math.ceil(len(hosts) / MAX_GRID))
    groups = [hosts[i:i + size] for i in range(0, len(hosts), size)]
    if block is not None:
        if not all(0 <= b < len(groups) for b in block):
            raise IndexError(f"no block {block}: there are {len(groups)}")
        row_hosts, col_hosts = groups[block[0]], groups[block[1]]
        grid = _host_grid(row_hosts, col_hosts, found)
        row_names, col_names = row_hosts, col_hosts
    elif size == 1:
        grid = _host_grid(hosts, hosts, found)
        row_names = col_names = hosts
    else:
        grid = _block_grid(hosts, size, len(groups), worst)
        row_names = col_names = [f"{g[0]} .. {g[-1]}" for g in groups]
    ranked = heapq.nlargest(offset + WORST_PAGE, worst.items(), key=lambda kv: kv[1])[offset:]
    paths = found.paths([pair for pair, _ns in ranked])
    values = worst.values()
    planes = sorted({p for label in found.labels if (p := plane_of(label))}, key=natural)
    return {"stat": stat, "path": found.path, "paths": found.labels, "planes": planes, "hosts": len(hosts),
            "pairs": len(worst),
            "lo_ns": min(values, default=None), "hi_ns": max(values, default=None),
            "block_size": size, "blocks": len(groups), "block": list(block) if block else None,
            "rows": row_names, "cols": col_names, "cells": grid,
            "worst": {"total": len(worst), "offset": offset, "items": [
                {"src": s, "dst": d, "ns": ns, "paths": paths.get((s, d), {})} for (s, d), ns in ranked]}}


def _host_grid(row_hosts: list[str], col_hosts: list[str], found: Pairs) -> list[list[dict | None]]:
    worst = found.worst
    paths = found.paths([(s, d) for s in row_hosts for d in col_hosts if (s, d) in worst])
    return [[{"ns": worst[(s, d)], "paths": paths.get((s, d), {})} if (s, d) in worst else None for d in col_hosts]
            for s in row_hosts]


def _block_grid(hosts: list[str], size: int, count: int, worst: dict[Pair, float]) -> list[list[dict | None]]:
    """Each block pair's worst pair and how many pairs it holds."""
    index = {h: i // size for i, h in enumerate(hosts)}
    grid: list[list[dict | None]] = [[None] * count for _ in range(count)]
    for (src, dst), ns in worst.items():
        cell = grid[index[src]][index[dst]]
        if cell is None:
            grid[index[src]][index[dst]] = {"ns": ns, "pairs": 1, "src": src, "dst": dst}
            continue
        cell["pairs"] += 1
        if ns > cell["ns"]:
            cell.update(ns=ns, src=src, dst=dst)
    return grid
