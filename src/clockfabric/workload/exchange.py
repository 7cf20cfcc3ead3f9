"""Sampled-packet records between the two ends of a flow: each agent sends the records of its job
flows' packets (both directions, both sides it saw) to the agent at the flow's far end, so each
end matches both directions itself and reports a flow's "out" and "in" delays with no third
party. The control channel is UDP: a message holds at most CHUNK records, and one lost costs
that many samples, never a wrong one. Pure: records in, message dicts out, and back.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable

from clockfabric.workload.inband import Packet
from clockfabric.workload.owd import RX, TX, Record, Tuple4

MESSAGE = "inband"  # the control message's type
CHUNK = 150  # records a message: about 10 kB of JSON, well under a datagram


def peers_by_direction(flows: Iterable[Tuple4], host_by_address: dict[str, str]) -> dict[Tuple4, str]:
    """Each direction of each flow (local end first in `flows`) -> the host at its far end; flows to
    addresses of no known host are left out: no agent there to match with."""
    out = {}
    for local, lport, remote, rport in flows:
        if (peer := host_by_address.get(remote)) is not None:
            out[(local, lport, remote, rport)] = out[(remote, rport, local, lport)] = peer
    return out


def by_peer(records: Iterable[Record], peers: dict[Tuple4, str]) -> dict[str, list[Record]]:
    """The records of job flows' packets, by the host they go to; the others are dropped."""
    out: dict[str, list[Record]] = defaultdict(list)
    for r in records:
        if (peer := peers.get(r.packet.tuple4)) is not None:
            out[peer].append(r)
    return out


def encode(sender: str, records: list[Record]) -> list[dict]:
    """Records as control messages of at most CHUNK each."""
    rows = [[*r.packet.tuple4, r.packet.seq, r.packet.ip_id, r.side, r.t_ns, int(r.synced)] for r in records]
    return [{"t": MESSAGE, "from": sender, "r": rows[i:i + CHUNK]} for i in range(0, len(rows), CHUNK)]


def decode(msg: dict) -> list[Record]:
    """A message's records; ValueError (or KeyError, TypeError) for one that is malformed."""
    out = []
    for src, sport, dst, dport, seq, ip_id, side, t_ns, synced in msg["r"]:
        if side not in (TX, RX):
            raise ValueError(f"record side {side!r}")
        packet = Packet(str(src), int(sport), str(dst), int(dport), int(seq), int(ip_id))
        out.append(Record(packet, side, int(t_ns), bool(synced)))
    return out
