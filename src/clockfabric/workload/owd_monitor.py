"""A host's in-band one-way delays: its sampled packets and its peers' records in, per job flow and
direction the last window's min, p50 and p99 (or RTT/2, marked) out.

The host's own records are stamped by the kernel; `to_time` takes a kernel (real-clock) time
to (the time on the global clock, whether it is: the host is synced). Records of packets of no
job flow are dropped where they are read, so only job traffic costs a message.
"""

from __future__ import annotations

from collections.abc import Callable

from clockfabric.traffic.steer_decide import FlowKey
from clockfabric.workload.exchange import by_peer, encode, peers_by_direction
from clockfabric.workload.flows import flow_label
from clockfabric.workload.inband import DEFAULT_BITS, MAX_BITS, Packet
from clockfabric.workload.monitor import WorkloadView
from clockfabric.workload.owd import HOLD_NS, Matcher, OwdStats, Record, Tuple4, flow_owd

# a flow direction's delays a second, about, at most: past some dozens a window's min, p50 and
# p99 tell no more, and each sampled packet costs the agents at both ends
SAMPLES_PER_S = 50


def directed(key: FlowKey) -> Tuple4:
    """A flow's key as the 4-tuple of its packets from the local end."""
    return key.local, key.lport, key.remote, key.rport


def sampling_bits(segments_per_s: float | None, last: int | None) -> int:
    """The bits a flow direction is sampled by until the next update: the fewest (from DEFAULT_BITS)
    that keep the segments with a payload it carried a second, as its socket counts them, to about
    SAMPLES_PER_S sampled; never more than one fewer than `last` (the bits of the update before, if
    measured), so a burst after a quiet second is not met at the densest sampling. Both ends count
    the same segments (the sender's tcpi_data_segs_out, the receiver's tcpi_data_segs_in), so they
    choose alike; where they do not, the packets sampled by more bits are a subset of those by
    fewer: the matches are the sparser end's, never a wrong one. A direction not measured yet (a new
    socket's first reading) is sampled the most sparsely: its rate is unknown, not small."""
    if segments_per_s is None:
        return MAX_BITS
    chosen = DEFAULT_BITS
    while chosen < MAX_BITS and segments_per_s / 2 ** chosen > SAMPLES_PER_S:
        chosen += 1
    return chosen if last is None else max(chosen, last - 1)


def batch_times(to_time: Callable[[int], tuple[int, bool]], real_ns: list[int]) -> list[tuple[int, bool]]:
    """`to_time` of each of a batch of kernel times, from two calls: between two updates of the
    clock, a host's map from its kernel clock to global time is affine (an offset and a drift),
    and its error bound, which grows with the distance from the fit, is largest at an end. A
    batch with an end not synced is mapped time by time: never a global time not earned."""
    if not real_ns:
        return []
    low, high = min(real_ns), max(real_ns)
    (t_low, synced_low), (t_high, synced_high) = to_time(low), to_time(high)
    if not (synced_low and synced_high):
        return [to_time(t) for t in real_ns]
    scale = (t_high - t_low) / (high - low) if high > low else 1.0
    return [(t_low + round((t - low) * scale), True) for t in real_ns]


class InbandOwd:
    def __init__(self, host: str, host_by_address: dict[str, str], to_time: Callable[[int], tuple[int, bool]],
                 window_ns: int, hold_ns: int = HOLD_NS):
        self.host = host
        self.host_by_address = host_by_address
        self.to_time = to_time
        self.window_ns = window_ns
        self.matcher = Matcher(hold_ns)
        self.flows: set[Tuple4] = set()  # this host's job flows, local end first
        self.peers: dict[Tuple4, str] = {}  # each job flow's directions -> the host at the far end
        # far ends' addresses that are no host address (a NIC's), learnt from the records their hosts send
        self.learned: dict[str, str] = {}
        self.outbox: list[Record] = []
        self.window_end_ns: int | None = None
        self.owd: dict[str, dict[str, OwdStats | None]] = {}  # by flow label: the last closed window's
        self.bits: dict[Tuple4, int] = {}  # each flow direction's sampling (DEFAULT_BITS if not here)
        self.measured: set[Tuple4] = set()  # the directions whose bits came from a measured rate

    def flows_changed(self, view: WorkloadView) -> None:
        """This update's job flows, and the bits each direction is sampled by from their rates."""
        self.flows = {directed(f.rates.key) for f in view.flows}
        self.peers = peers_by_direction(self.flows, {**self.host_by_address, **self.learned})
        rates: dict[Tuple4, float | None] = {}
        for f in view.flows:
            local = directed(f.rates.key)
            rates[local], rates[(local[2], local[3], local[0], local[1])] = f.rates.tx_pps, f.rates.rx_pps
        self.bits = {t: sampling_bits(rates.get(t), self.bits.get(t) if t in self.measured else None)
                     for t in self.peers}
        self.measured = {t for t in self.peers if rates.get(t) is not None}

    def port_bits(self) -> dict[tuple[int, int], int]:
        """The (source, destination) ports of the packets of each job flow direction with an agent
        at its far end, and the bits each is sampled by."""
        return {(t[1], t[3]): self.bits.get(t, DEFAULT_BITS) for t in self.peers}

    def captured(self, packets: list[tuple[Packet, str, int]], now_ns: int) -> None:
        """This host's sampled packets: (packet, side, kernel real-clock time)."""
        ours = [p for p in packets if p[0].tuple4 in self.peers]
        times = batch_times(self.to_time, [real_ns for _, _, real_ns in ours])
        records = [Record(packet, side, t_ns, synced)
                   for (packet, side, _), (t_ns, synced) in zip(ours, times, strict=True)]
        self.matcher.add(records, now_ns)
        self.outbox += records

    def received(self, sender: str, records: list[Record], now_ns: int) -> None:
        """A peer's records (those of no job flow of ours are dropped: nothing here to match them)."""
        ours = []
        for r in records:
            src, sport, dst, dport = r.packet.tuple4
            if (src, sport, dst, dport) in self.flows:  # our packet, leaving us: its destination is the sender's
                far = dst
            elif (dst, dport, src, sport) in self.flows:
                far = src
            else:
                continue
            ours.append(r)
            if far not in self.host_by_address:
                self.learned[far] = sender
        self.matcher.add(ours, now_ns)

    def messages(self) -> dict[str, list[dict]]:
        """What to send now, by host: the records taken since the last call."""
        out = {peer: encode(self.host, records) for peer, records in by_peer(self.outbox, self.peers).items()}
        self.outbox = []
        return out

    def tick(self, view: WorkloadView, now_ns: int) -> None:
        """Once an update: forget records too old to match; at a window's end, its stats."""
        self.matcher.expire(now_ns)
        if self.window_end_ns is None:
            self.window_end_ns = now_ns + self.window_ns
        if now_ns < self.window_end_ns:
            return
        window = self.matcher.close_window()
        self.window_end_ns = now_ns + self.window_ns
        self.owd = {flow_label(f.rates.key): flow_owd(directed(f.rates.key), window, f.rates.reading.rtt_us)
                    for f in view.flows}
