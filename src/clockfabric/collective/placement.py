"""Where a rank's subflows run (learned placement): source ports learned per spine with
TTL-limited probes (probe.paths.spread), the spines chosen with the host's agent where one
runs (claims.py), standbys beside them, and each placed subflow's share of the receive
buffer budget kept up to date (share_windows).

`args` is the worker's (worker.parse_args): rank, world, addresses, groups, token, agent,
and options (CollectiveOptions)."""

from __future__ import annotations

import argparse
import threading
from collections.abc import Sequence
from dataclasses import dataclass, field

from clockfabric.collective import alltoall, claims, ring
from clockfabric.collective.standby import Subflow
from clockfabric.collective.tcpinfo import MIN_RCVBUF
from clockfabric.collective.transport import Transport
from clockfabric.probe.paths import Path, spread

SHARE_EVERY_S = 1.0  # how often a rank asks its agent how its spines are shared (share_windows())


@dataclass
class Placement:
    """Where a rank's subflows run: ports[(peer, i)], the source port learned for subflow i
    (none: the kernel's); spines[(peer, i)], the hop (spine) the agent placed it on; and
    standbys[(peer, i)], the standby beside subflow i on its spine (options.standby)."""

    ports: dict[Subflow, int] = field(default_factory=dict)
    spines: dict[Subflow, str] = field(default_factory=dict)
    standbys: dict[Subflow, Subflow] = field(default_factory=dict)


def learn_ports(args: argparse.Namespace, peers: set[int]) -> Placement:
    """Source ports for our subflows to each peer, spreading each slot's subflows over the paths
    found to that peer (ports the switches hash onto distinct spines). With an agent
    (`--agent`), it picks the spines from what every job under the leaf holds
    (collective/claims.py), and says which hop each subflow took.
    Without one, the ranks under one leaf take turns: the k-th rank of its group starts k*n
    paths along (n: its subflows on that rail), so their flows out of the leaf take disjoint
    spines while there are enough, and spread evenly when there are not.
    With options.standby, subflow i + options.subflows is subflow i's standby: another port on its spine,
    where there is a choice of spines and a second port on that one was found."""
    opts, slots = args.options, len(args.addresses[args.rank])
    turn = next(g.index(args.rank) for g in args.groups if args.rank in g)
    found: dict[tuple[int, int], tuple[list[int], list[Path]]] = {}  # (peer, slot) -> (subflows, paths)
    for peer in sorted(peers):
        for slot in range(slots):
            mine = [i for i in range(opts.subflows) if i % slots == slot]
            found[(peer, slot)] = mine, spread(args.addresses[args.rank][slot], args.addresses[peer][slot],
                                               opts.port_base + peer, want=max(turn + len(mine), 2 * len(mine), 4),
                                               seed=args.token ^ (args.rank << 8) ^ peer)
    # where there is a choice of spines (not to a peer under our own leaf), the agent makes it for
    # the subflows that carry our data; it counts them, and so must not count those to a ring's
    # left neighbour, which carry only the barrier's few bytes
    sends = receivers(args)
    choices = [key for key, (_, paths) in found.items()
               if key[0] in sends and len({p.hop for p in paths if p.hop}) > 1]
    wants = [(len(found[key][0]), list(dict.fromkeys(p.hop for p in found[key][1]))) for key in choices]
    placed = claims.ask(args.agent, job_id(args), wants, source=args.agent[0]) if args.agent and choices else None
    out = Placement()
    for (peer, slot), (mine, paths) in found.items():
        if placed is not None and (peer, slot) in choices:
            chosen = by_hops(paths, placed[choices.index((peer, slot))])
            out.spines |= {(peer, i): path.hop for i, path in zip(mine, chosen, strict=False) if path.hop}
        else:
            chosen = paths_for_turn(paths, turn, len(mine))
        out.ports |= {(peer, i): path.sport for i, path in zip(mine, chosen, strict=False)}
        if opts.standby and (peer, slot) in choices:
            left = [p for p in paths if p not in chosen]
            for i, path in zip(mine, chosen, strict=False):
                if path.hop and (beside := next((p for p in left if p.hop == path.hop), None)):
                    left.remove(beside)
                    spare = (peer, i + opts.subflows)
                    out.ports[spare], out.standbys[(peer, i)] = beside.sport, spare
                    if (peer, i) in out.spines:  # it shares its spine's budget as its subflow does
                        out.spines[spare] = path.hop
    return out


def share_windows(links: Transport, args: argparse.Namespace, spines: dict[Subflow, str],
                  done: threading.Event) -> None:
    """Each subflow the agent placed on a spine gets its share of options.rcvbuf_budget (claims.share),
    by how many subflows the jobs under our leaf hold there: asked of the agent now and every
    SHARE_EVERY_S, so a job that comes or goes later reshapes the shares. The receiver applies
    it (Transport.resize). With no answer, the buffers stay as they are."""
    keys = sorted(spines)
    given: dict[Subflow, int] = {}
    while True:
        counts = claims.loads(args.agent, job_id(args), [spines[k] for k in keys], source=args.agent[0])
        for key, load in zip(keys, counts or [], strict=False):
            size = claims.share(args.options.rcvbuf_budget, load, MIN_RCVBUF)
            if given.get(key) != size:
                links.resize(*key, size)
                given[key] = size
        if done.wait(SHARE_EVERY_S):
            return


def paths_for_turn(paths: list[Path], turn: int, n: int) -> list[Path]:
    """The n paths of the rank whose turn under its leaf is `turn`: n*turn along the round."""
    start = turn * n % len(paths)
    return (paths[start:] + paths[:start])[:n]


def by_hops(paths: list[Path], hops: Sequence[str | None]) -> list[Path]:
    """A path for each hop wanted, each used once: another port on that hop, or any left."""
    left = list(paths)
    chosen = []
    for hop in hops:
        pick = next((p for p in left if p.hop == hop), left[0] if left else None)
        if pick is None:
            break
        left.remove(pick)
        chosen.append(pick)
    return chosen


def job_id(args: argparse.Namespace) -> str:
    """One name per job and rank: the launcher's token is the job's."""
    return f"{args.token}/{args.rank}"


def receivers(args: argparse.Namespace) -> set[int]:
    """The ranks this rank sends the collective's data to."""
    if args.options.collective == "alltoall":
        return alltoall.peers(args.options.algorithm, args.rank, range(args.world))
    return ring.successors(args.options.algorithm, args.rank, args.groups)


