"""Spine claims: jobs under one leaf share out its uplinks through the agents.

With learned placement each rank puts its subflows on spines. On its own, a rank can only
spread them evenly; two jobs under one leaf then start on the same spines and, under the
`owd` scheduler, shift their bytes together and chase each other from spine to spine. So a
rank asks its host's agent: which spines should my n subflows to that peer take? The agent
answers from a ledger of what every job under the same leaf holds on each spine (its own
claims, and those the other agents under the leaf told it), takes the least loaded first,
and records the claim. Claims are released when the job ends, and expire in any case (a
job that died never says so).

Messages, JSON over UDP to the agent's control port on the host's address:
  rank -> agent    {"t": "place", "job": J, "want": [[n, [hop, ...]], ...]}
  agent -> rank    {"t": "placed", "job": J, "hops": [[hop, ...], ...]}   n hops per want
  rank -> agent    {"t": "release", "job": J}
  rank -> agent    {"t": "loads", "job": J, "hops": [hop, ...]}
  agent -> rank    {"t": "loads", "job": J, "loads": [n, ...]}    subflows on each hop's spine now
  agent -> agent   {"t": "claims", "host": H, "claims": [[job, spine, count], ...]}
                   to the agents under its leaves: each second while it holds claims,
                   and at once on a place or a release
A hop is the address that answered the rank's trace (probe.paths); the agent names its
switch from the topology, so claims from different hosts on one spine add up.
"""

from __future__ import annotations

import json
import socket
import time
from collections.abc import Callable

from clockfabric import wirejson

AGENT_PORT = 7299  # the agent's control port (agent.agent.CONTROL_PORT)
CLAIM_TTL_S = 600.0  # a claim no one released is forgotten after this long
HEARD_TTL_S = 3.0  # another agent's claims stand this long after its last word


class Ledger:
    """What jobs under this host's leaves hold on each spine. Pure: times come from `clock`."""

    def __init__(self, *, ttl_s: float = CLAIM_TTL_S, clock: Callable[[], float] = time.monotonic):
        self.ttl_s = ttl_s
        self.clock = clock
        self.own: dict[tuple[str, str], tuple[int, float]] = {}  # (job, spine) -> (subflows, expires)
        self.heard: dict[str, tuple[list[tuple[str, str, int]], float]] = {}  # host -> (claims, expires)

    def load(self, spine: str) -> int:
        """Subflows that jobs under the leaf hold on `spine` now."""
        now = self.clock()
        mine = sum(n for (_, s), (n, until) in self.own.items() if s == spine and until > now)
        theirs = sum(n for claims, until in self.heard.values() if until > now for _, s, n in claims if s == spine)
        return mine + theirs

    def place(self, job: str, want: list[tuple[int, list[str]]]) -> list[list[str]]:
        """For each (n, candidate spines): n spines, each the least loaded at its turn (ties in the
        order given), claimed for `job`."""
        until = self.clock() + self.ttl_s
        out = []
        for n, spines in want:
            loads = {s: self.load(s) for s in spines}
            chosen = []
            for _ in range(n if spines else 0):
                best = min(spines, key=lambda s: (loads[s], spines.index(s)))
                loads[best] += 1
                chosen.append(best)
                count, _ = self.own.get((job, best), (0, 0.0))
                self.own[(job, best)] = (count + 1, until)
            out.append(chosen)
        return out

    def release(self, job: str) -> None:
        for key in [k for k in self.own if k[0] == job]:
            del self.own[key]

    def hear(self, host: str, claims: list) -> None:
        """Another agent's claims, replacing what it said before."""
        self.heard[host] = ([(str(j), str(s), int(n)) for j, s, n in claims], self.clock() + HEARD_TTL_S)

    def shared(self) -> list[list]:
        """Our live claims, to tell the agents under our leaves; expired ones are dropped here."""
        now = self.clock()
        self.own = {k: v for k, v in self.own.items() if v[1] > now}
        self.heard = {h: v for h, v in self.heard.items() if v[1] > now}
        return [[job, spine, n] for (job, spine), (n, _) in sorted(self.own.items())]


def ask(agent: tuple[str, int], job: str, want: list[tuple[int, list[str | None]]], *, source: str,
        timeout_s: float = 0.5) -> list[list[str]] | None:
    """The hops the agent picks for each want, or None if no agent answered (place on our own)."""
    reply = _request(agent, {"t": "place", "job": job, "want": want}, "placed", source=source, timeout_s=timeout_s)
    try:
        return None if reply is None else [list(map(str, hops)) for hops in reply["hops"]]
    except (KeyError, TypeError):
        return None


def loads(agent: tuple[str, int], job: str, hops: list[str], *, source: str,
          timeout_s: float = 0.5) -> list[int] | None:
    """The subflows that jobs under our leaf hold now on each hop's spine (those that share the
    leaf's uplink to it), or None if no agent answered."""
    reply = _request(agent, {"t": "loads", "job": job, "hops": hops}, "loads", source=source, timeout_s=timeout_s)
    try:
        counts = None if reply is None else [int(n) for n in reply["loads"]]
    except (KeyError, TypeError, ValueError):
        return None
    return counts if counts is not None and len(counts) == len(hops) else None


def share(budget: int, load: int, least: int) -> int:
    """A subflow's receive buffer when `load` subflows share a port's `budget`, at least `least`.
    An uplink's FIFO holds what the windows of every subflow through it put in flight. With
    each window its share of a budget sized to the FIFO, a job alone on its spines (a few
    subflows, against someone else's elephant flow) keeps wide windows and holds its place in
    the queue, while jobs that crowd an uplink together keep narrow ones that fit it."""
    return max(least, budget // max(1, load))


def _request(agent: tuple[str, int], msg: dict, answer: str, *, source: str, timeout_s: float) -> dict | None:
    """Send msg to the agent; its answer of type `answer` for the same job, or None."""
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        try:
            s.bind((source, 0))  # from an address the agent trusts: a host of the topology
            s.connect(agent)  # connected: a host with no agent answers "refused" at once
            s.send(json.dumps(msg).encode())
            deadline = time.monotonic() + timeout_s
            while (left := deadline - time.monotonic()) > 0:
                s.settimeout(left)
                reply = wirejson.loads(s.recv(65_000))
                if isinstance(reply, dict) and reply.get("t") == answer and reply.get("job") == msg["job"]:
                    return reply
        except (OSError, ValueError):
            return None
    return None


def release(agent: tuple[str, int], job: str, *, source: str) -> None:
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        try:
            s.bind((source, 0))
            s.sendto(json.dumps({"t": "release", "job": job}).encode(), agent)
        except OSError:
            pass  # no agent: its claims expire on their own
