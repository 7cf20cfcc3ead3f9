"""The host's pacing loop (qos/pace_loop.py) driving a fake actuator against a fluid FIFO: the
lower class's sockets are paced within a second of the higher class queueing, by weight, the
smallest limit over the links a socket crosses wins, they are released when the higher class
idles, a socket gone is forgotten, and stopping sets every socket back to no limit."""

from __future__ import annotations

from clockfabric.qos.pace_loop import Flow, PaceLoop
from clockfabric.qos.pacing import Gains

C = 100e6  # bits/s
LINK = "10.0.0.1>"
G = Gains()


class FakeSockets:
    """The actuator: each socket's limit, every call recorded; sockets in `gone` raise."""

    def __init__(self) -> None:
        self.limit: dict[tuple[int, int], int | None] = {}
        self.calls: list[tuple[tuple[int, int], int | None]] = []
        self.gone: set[tuple[int, int]] = set()

    def __call__(self, sock: tuple[int, int], rate: int | None) -> None:
        self.calls.append((sock, rate))
        if sock in self.gone:
            raise LookupError("gone")
        self.limit[sock] = rate

    def bps(self, sock: tuple[int, int]) -> float:
        r = self.limit.get(sock)
        return C if r is None else r * 8


A, B = (10, 1), (11, 2)  # two scavenger sockets, weights 3 and 1


def run(high, periods, fake, loop):
    """A critical flow at high(k) and two greedy scavenger sockets through one FIFO; the loop reads
    the queue a period late. Returns the queue (seconds) after each period."""
    queue_bits, seen, out = 0.0, None, []
    for k in range(periods):
        a = high(k)
        flows = [Flow((1, 1), "critical", 70, (LINK,), a, seen),
                 Flow(A, "scavenger", 3, (LINK,), fake.bps(A) / 2, None),
                 Flow(B, "scavenger", 1, (LINK,), fake.bps(B) / 2, None)]
        seen = queue_bits / C
        loop.step(flows)
        offered = a + min(C, fake.bps(A) + fake.bps(B))  # unpaced, the two together fill the link
        queue_bits = max(0.0, queue_bits + (offered - C) * G.period_s)
        out.append(queue_bits / C)
    return out


def test_paced_within_a_second_by_weight_and_released_when_the_higher_class_idles():
    fake = FakeSockets()
    loop = PaceLoop(lambda link: (C, G), fake)
    high = lambda k: 0.6 * C if 5 <= k < 40 else 0.0  # noqa: E731 - compute, all-reduce, compute
    queue = run(high, 60, fake, loop)
    assert fake.calls and fake.calls[0][1] is not None  # alone, nothing was released: it was never limited
    assert all(sock in (A, B) for sock, _ in fake.calls)  # the critical socket is never paced
    settled = next(k for k in range(5, 40) if all(q <= G.target_s * 1.05 for q in queue[k:40]))
    assert (settled - 5) * G.period_s <= 1.0, [round(q * 1e6) for q in queue[:20]]
    limits = [r for sock, r in fake.calls if sock == A and r is not None]
    assert max(queue) > G.target_s and limits  # the onset queued, and A was paced
    # after release_periods of an idle higher class, both sockets are back to no limit, once
    assert fake.limit == {A: None, B: None} and loop.paced == {}
    assert [c for c in fake.calls if c[1] is None] == [(A, None), (B, None)]


def test_shares_follow_the_weights_and_the_tightest_link_wins():
    fake = FakeSockets()
    loop = PaceLoop(lambda link: (C, G), fake)
    queued = G.target_s + 0.01  # well over target: the law gives the floor
    flows = [Flow((1, 1), "critical", 70, (LINK,), 0.5 * C, 0.0),
             Flow(A, "scavenger", 3, (LINK, ">10.0.0.9"), C, None),
             Flow(B, "scavenger", 1, (LINK,), C, None),
             Flow((2, 2), "normal", 25, (">10.0.0.9",), 0.9 * C, queued)]
    paced = loop.step(flows)
    on_link = C - 0.5 * C - G.kappa * C * (0.0 - G.target_s) / G.period_s  # under target: more than C/2
    assert paced[B] == round(on_link / 4 / 8)
    # on the second link the normal job is the higher class, and queues: A gets less there
    assert paced[A] == round((C - 0.9 * C - G.kappa * C * (queued - G.target_s) / G.period_s) / 8) < paced[B] * 3
    assert (1, 1) not in paced and (2, 2) not in paced
    idle = (12, 3)  # a scavenger socket that sends nothing (a control connection) takes no share
    with_idle = [*flows[:3], Flow(idle, "scavenger", 3, (LINK,), 0.0, None)]
    paced = PaceLoop(lambda link: (C, G), FakeSockets()).step(with_idle)
    assert paced[B] == round(on_link / 4 / 8) and paced[idle] == round(on_link * 3 / 4 / 8)


def test_a_socket_gone_is_forgotten_and_stop_releases_the_rest():
    fake = FakeSockets()
    loop = PaceLoop(lambda link: (C, G), fake)
    # a queue over target but not standing (under twice it): the law's limit, the same each period
    flows = [Flow((1, 1), "critical", 70, (LINK,), 0.5 * C, 0.0003), Flow(A, "scavenger", 3, (LINK,), C, None),
             Flow(B, "scavenger", 1, (LINK,), C, None)]
    assert set(loop.step(flows)) == {A, B}
    fake.gone.add(B)
    loop.step([flows[0], flows[1], Flow(B, "scavenger", 1, (LINK,), C, 0.02)][:2])  # B's flow ended
    assert set(loop.paced) == {A}  # B's release failed (gone): forgotten all the same
    calls = len(fake.calls)
    loop.step(flows[:2])
    assert len(fake.calls) == calls  # an unchanged limit is not set again
    loop.release()
    assert fake.limit[A] is None and loop.paced == {}


def test_no_higher_class_on_a_link_no_limit():
    fake = FakeSockets()
    loop = PaceLoop(lambda link: (C, G), fake)
    flows = [Flow(A, "scavenger", 3, (LINK,), C, 0.05), Flow(B, "scavenger", 1, (LINK,), C, 0.05)]
    for _ in range(5):
        assert loop.step(flows) == {}
    assert fake.calls == []


def test_a_links_own_queue_reading_paces_without_any_flow_reading():
    fake = FakeSockets()
    loop = PaceLoop(lambda link: (C, G), fake)
    flows = [Flow((1, 1), "critical", 70, (LINK,), 0.5 * C, None), Flow(A, "scavenger", 3, (LINK,), C, None)]
    assert loop.step(flows, {"other>": 0.05}) == {}  # another link's queue: not this one's
    assert loop.step(flows, {LINK: 0.2})[A] == round(G.floor * C / 8)  # 200 ms of queue: the floor
    assert loop.limits == {LINK: G.floor * C}


def test_an_elastic_higher_class_with_data_waiting_takes_the_link_back():
    """A collective paced by its slowest hop sends what the FIFO leaves it, so its rate alone is a
    fixed point of C - a at any split; the share of the time its data waited on the network says
    what it wants, and the lower class is cut to what is left of that."""
    def limited(wanting: float) -> float:
        fake = FakeSockets()
        loop = PaceLoop(lambda link: (C, G), fake)
        for _ in range(3):  # the scavengers take 0.7 of the link, the collective gets the rest
            loop.step([Flow((1, 1), "critical", 70, (LINK,), 0.3 * C, 0.0, wanting),
                       Flow(A, "scavenger", 3, (LINK,), 0.35 * C, None), Flow(B, "scavenger", 1, (LINK,), 0.35 * C, None)])
        return fake.bps(A) + fake.bps(B)

    assert limited(0.0) >= 0.69 * C  # its rate alone: the split stands
    assert limited(1.0) <= 1.01 * G.floor * C  # waiting all the time: the lower class keeps its floor
    assert 0.45 * C <= limited(0.5) <= 0.55 * C  # waiting half the time: half the link is left
