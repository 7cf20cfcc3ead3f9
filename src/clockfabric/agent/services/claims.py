"""Spine claims of the collective jobs under this host's leaves (collective/claims.py).

A collective rank asks its host's agent where to place its subflows ("place") and how loaded
each spine is ("loads"); the answer comes at once, by the leaf's ledger, which the agents
under one leaf keep in step by telling each other their claims ("claims").
"""

from __future__ import annotations

from clockfabric.agent.context import AgentContext
from clockfabric.agent.pathmap import first_switches
from clockfabric.agent.service import Service, service
from clockfabric.collective.claims import Ledger
from clockfabric.topology import interfaces

MAX_WANTS, MAX_SUBFLOWS = 64, 256  # what one rank may ask in one request: no request stalls the agent


@service("claims", help="Spine claims of collective jobs: placements and loads by the leaf's ledger")
class Claims(Service):
    handles = frozenset({"place", "release", "loads", "claims"})

    def __init__(self, ctx: AgentContext):
        self.ctx = ctx
        host, topo = ctx.cfg.host, ctx.cfg.topology
        self.ledger = Ledger()
        leaf = first_switches(topo)
        mine = {leaf[(host, n.plane)] for n in topo.hosts[host].nics if (host, n.plane) in leaf}
        self.leafmates = sorted({h for (h, _), sw in leaf.items() if sw in mine} - {host})
        self.switch_of = {str(i.address.ip): i.port.node for i in interfaces(topo).values()}
        self._claims_told = False
        self.placements = 0

    def on_message(self, msg: dict, reply_to: tuple[str, int]) -> None:
        if msg["t"] == "place":
            self._place(msg, reply_to)
        elif msg["t"] == "release":
            self.ledger.release(str(msg["job"]))
            self._share_claims()  # at once: a job starting next must not count this one's
        elif msg["t"] == "loads":
            self._loads(msg, reply_to)
        elif msg["host"] in self.leafmates:  # "claims"
            self.ledger.hear(msg["host"], msg["claims"])

    def tick(self, now_ns: int) -> None:
        self._share_claims()

    def report(self) -> dict:
        return {"claims": {"own": self.ledger.shared(), "placements": self.placements,
                           "heard": sorted(self.ledger.heard)}}

    def _place(self, msg: dict, reply_to: tuple[str, int]) -> None:
        """A collective rank's subflows to spines, by the leaf's ledger: answered at once."""
        wants = [(int(n), [str(h) for h in hops]) for n, hops in msg["want"]]
        if len(wants) > MAX_WANTS or any(not 0 <= n <= MAX_SUBFLOWS or len(hops) > MAX_WANTS for n, hops in wants):
            raise ValueError(f"a placement of more than {MAX_WANTS} x {MAX_SUBFLOWS} subflows")
        named = self.ledger.place(str(msg["job"]), [(n, [self.switch_of.get(h, h) for h in hops]) for n, hops in wants])
        hops = [[next(h for h in hops if self.switch_of.get(h, h) == sw) for sw in chosen]
                for (_, hops), chosen in zip(wants, named, strict=True)]
        self.ctx.reply({"t": "placed", "job": msg["job"], "hops": hops}, reply_to)
        self.placements += 1
        self._share_claims()

    def _loads(self, msg: dict, reply_to: tuple[str, int]) -> None:
        """How many subflows jobs under the leaf hold on each hop's spine: a rank sizes its windows by them."""
        counts = [self.ledger.load(self.switch_of.get(h, h)) for h in map(str, msg["hops"])]
        self.ctx.reply({"t": "loads", "job": msg["job"], "loads": counts}, reply_to)

    def _share_claims(self) -> None:
        claims = self.ledger.shared()
        if claims or self._claims_told:  # and once more after the last release: mates forget at once
            for host in self.leafmates:
                self.ctx.send(host, {"t": "claims", "host": self.ctx.cfg.host, "claims": claims})
        self._claims_told = bool(claims)
