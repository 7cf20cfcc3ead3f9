"""A host's flows summed into bounded series: one group per job and pair of ends, the local
address (its NIC, so its plane) and the remote one (the peer's NIC), never a port. However many
connections a job makes to a peer over a plane, they write one set of series; each direction is
in the series' name (`tx`/`rx`, `owd_out`/`owd_in`). The 5-tuples stay in the agent's state
and its push info.

How each statistic is summed over a group's flows:
  tx_bps, rx_bps, delivery_bps, retransmits_total,  sum: what the group moves, loses and holds
  send_queue_bytes                                  together
  rtt_us, cwnd                                      max: the slowest connection, the largest window
  owd min_ns                                        min
  owd p50_ns, p99_ns                                max: the slowest connection's
  owd samples                                       sum
  owd fallback                                      1 only where no flow of the group has an in-band
                                                    delay (RTT/2 stands in), and those are summed alone
A path sample per switch and DSCP the group's flows were traced through: the value is how many.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import TypeVar

from clockfabric.traffic.steer_decide import FlowKey
from clockfabric.workload.owd import FALLBACK, OwdStats

T = TypeVar("T")
SUMMED = ("tx_bps", "rx_bps", "delivery_bps", "retransmits_total", "send_queue_bytes")


def pair_label(key: FlowKey) -> str:
    """"10.0.0.1->10.0.1.1": a group's label value, local end first."""
    return f"{key.local}->{key.remote}"


def parse_pair(text: str) -> tuple[str, str] | None:
    """A group label back into its (local, remote) addresses; None for text that is not one."""
    local, sep, remote = text.partition("->")
    return (local, remote) if sep and local and remote and ":" not in local + remote else None


Group = tuple[str | None, str]  # (job or None, pair label)


def by_pair(items: Iterable[T], key: Callable[[T], tuple[str | None, FlowKey]]) -> dict[Group, list[T]]:
    """Items grouped by (job or None, pair label)."""
    out: dict[Group, list[T]] = {}
    for item in items:
        jobid, flow = key(item)
        out.setdefault((jobid, pair_label(flow)), []).append(item)
    return out


def combine(stat: str, values: list[float]) -> float | None:
    """The group's value of `stat` from its flows' (None where no flow has one)."""
    if not values:
        return None
    return sum(values) if stat in SUMMED else max(values)


def combine_owd(found: list[OwdStats]) -> OwdStats | None:
    """A group's one-way delay in a direction from its flows': in-band ones where any, else RTT/2."""
    inband = [s for s in found if s.source != FALLBACK]
    chosen = inband or found
    if not chosen:
        return None
    return OwdStats(min(s.min_ns for s in chosen), max(s.p50_ns for s in chosen), max(s.p99_ns for s in chosen),
                    sum(s.samples for s in chosen), chosen[0].source)


def combine_owd_dicts(found: Iterable[dict | None]) -> dict | None:
    """combine_owd over published delays (OwdStats.as_dict), as the agent's /metrics reads them."""
    stats = combine_owd([OwdStats(**d) for d in found if d])
    return stats.as_dict() if stats else None
