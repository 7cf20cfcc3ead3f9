"""Queue readings shared between hosts (qos/shared.py) and the pacing loop on them: a message
round-trips, bad, stale, future, oversized or foreign ones are refused and counted, a silent
host's reading expires; readings go only to the hosts that want their link, and a host's wants
to every host, in rounds; a host with only lower-class flows into a peer is paced on another
host's reading and released when it stops; and two hosts pacing against one fluid FIFO together
cut as one law does (their shares add up), where each cutting the whole would leave a standing
queue."""

from __future__ import annotations

import pytest

from clockfabric.qos.pace_loop import Flow, PaceLoop
from clockfabric.qos.pacing import Gains
from clockfabric.qos.shared import (
    MAX_READINGS,
    REPEAT_S,
    STALE_S,
    WANTS_REPEAT_S,
    WANTS_STALE_S,
    Audience,
    Reading,
    SharedQueues,
    encode,
)

C = 100e6  # bits/s
G = Gains()
HOSTS = {"h0": "10.0.0.1", "h2": "10.0.0.3", "h3": "10.0.0.4"}
INTO_H1 = ">10.0.0.2"
LINKS = frozenset({INTO_H1, ">10.0.0.1", ">10.0.0.3", ">10.0.0.4"})
T0 = 1_000_000_000_000


def store(hosts=HOSTS) -> SharedQueues:
    return SharedQueues(dict(hosts), max_read_age_s=6.0, links=LINKS)


def critical(queue_s: float | None, read_ns: int = T0, link: str = INTO_H1) -> Reading:
    return Reading(link, "critical", queue_s, 30e6, 0, read_ns)


def test_a_reading_round_trips_and_is_handed_out_once_while_new():
    s = store()
    assert s.hear(encode("h0", T0, [critical(0.004)]), "10.0.0.1", T0 + 1000)
    got = s.take(T0 + 2000)[INTO_H1]
    assert (got.rank, got.queue_s, got.high_bps, got.low_weight) == (0, pytest.approx(0.004), 30e6, 0)
    assert s.take(T0 + 3000)[INTO_H1].queue_s is None  # the same reading again: the rate holds
    assert s.hear(encode("h0", T0 + 10**8, [critical(0.002, T0 + 10**8)]), "10.0.0.1", T0 + 10**8)
    assert s.take(T0 + 10**8)[INTO_H1].queue_s == pytest.approx(0.002)


@pytest.mark.parametrize(("msg", "src", "reason"), [
    (encode("h0", T0, [critical(0.004)]), "10.0.0.3", "unknown host"),  # h0's name from h2's address
    (encode("h9", T0, [critical(0.004)]), "10.0.0.1", "unknown host"),
    (encode("h0", T0 - int(STALE_S * 1e9) - 1, [critical(0.004, T0 - 10**9)]), "10.0.0.1", "stale"),
    (encode("h0", T0 + 10**9, [critical(0.004)]), "10.0.0.1", "future"),
    (encode("h0", T0, [critical(0.004, link=">192.168.9.9")]), "10.0.0.1", "unknown link"),
    (encode("h0", T0, [Reading(INTO_H1, "gold", 0.004, 1.0, 0, T0)]), "10.0.0.1", "unknown class"),
    (encode("h0", T0, [critical(0.004, T0 - 60 * 10**9)]), "10.0.0.1", "stale reading"),
    (encode("h0", T0, [critical(5.0)]), "10.0.0.1", "bad reading"),
    ({**encode("h0", T0, []), "r": [[INTO_H1, "critical", 10, -1, 0, T0]]}, "10.0.0.1", "bad reading"),
    ({**encode("h0", T0, []), "r": [["x"]] * (MAX_READINGS + 1)}, "10.0.0.1", "too many readings"),
    ({**encode("h0", T0, []), "r": "x"}, "10.0.0.1", "too many readings"),
    ({**encode("h0", T0, []), "r": [[[1], "critical", 10, 0, 0, T0]]}, "10.0.0.1", "unknown link"),
    ({**encode("h0", T0, []), "r": [[INTO_H1, {}, 10, 0, 0, T0]]}, "10.0.0.1", "unknown class"),
    ({**encode("h0", T0, []), "w": INTO_H1}, "10.0.0.1", "bad wants"),
    ({**encode("h0", T0, []), "w": [[1]]}, "10.0.0.1", "bad wants"),
    (encode("h0", T0, [], frozenset({">192.168.9.9"})), "10.0.0.1", "bad wants"),
    ({**encode("h0", T0, []), "w": [INTO_H1] * (MAX_READINGS + 1)}, "10.0.0.1", "bad wants"),
    ({"t": "qos_queues", "host": "h0", "at": "now", "r": []}, "10.0.0.1", "stale"),
])
def test_bad_messages_are_refused_whole_and_counted(msg, src, reason):
    s = store()
    assert not s.hear(msg, src, T0)
    assert s.refused == {reason: 1} and s.take(T0) == {} and s.accepted == 0


def test_a_silent_hosts_reading_expires_and_a_new_message_replaces_the_last():
    s = store()
    s.hear(encode("h0", T0, [critical(0.004), critical(0.001, link=">10.0.0.3")]), "10.0.0.1", T0)
    assert set(s.take(T0)) == {INTO_H1, ">10.0.0.3"}
    s.hear(encode("h0", T0 + 10**8, [critical(0.004)]), "10.0.0.1", T0 + 10**8)
    assert set(s.take(T0 + 10**8)) == {INTO_H1}  # what h0 no longer tells is gone at once
    assert s.take(T0 + 10**8 + int(STALE_S * 1e9) + 1) == {}  # h0 silent: it holds nobody paced


def test_readings_go_only_to_the_hosts_whose_last_word_wants_their_link():
    s = store()
    s.hear(encode("h2", T0, [], frozenset({INTO_H1})), "10.0.0.3", T0)
    s.hear(encode("h3", T0, [critical(0.004)], frozenset({">10.0.0.3"})), "10.0.0.4", T0)
    assert s.readers({INTO_H1}, T0) == ["h2"]
    assert s.readers({INTO_H1, ">10.0.0.3"}, T0) == ["h2", "h3"]
    assert s.readers({">10.0.0.1"}, T0) == []
    later = T0 + 10**8
    s.hear(encode("h2", later, []), "10.0.0.3", later)  # its lower class is gone: it wants nothing
    assert s.readers({INTO_H1}, later) == []
    assert s.readers({">10.0.0.3"}, T0 + int(WANTS_STALE_S * 1e9) + 1) == []  # h3 silent: forgotten


def test_a_hosts_word_goes_to_its_readers_and_its_wants_to_every_host_in_rounds():
    peers = list("abcdefghijk")
    audience = Audience(peers, fanout=4)
    assert audience.pick([], frozenset(), 0.0) == []  # nothing new, nothing wanted: silence
    assert audience.pick(["e"], frozenset(), 0.1) == ["e"]
    wants = frozenset({INTO_H1})
    rounds = [audience.pick([], wants, 0.2 + k / 10) for k in range(4)]
    assert rounds == [peers[:4], peers[4:8], peers[8:], []]  # every host once, 4 a period
    assert audience.pick(["e", "g"], wants, 0.7) == ["e", "g"]
    assert audience.pick([], wants, 0.2 + WANTS_REPEAT_S) == peers[:4]  # said again each WANTS_REPEAT_S
    audience = Audience(peers, fanout=4)
    many = peers[:6]
    heard = [audience.pick(many, frozenset(), k / 10) for k in range(3)]
    assert heard == [many[:4], sorted(many[4:] + many[:2]), many[2:]]  # more readers than the fanout: in turn
    audience.pick([], wants, 1.0)
    assert audience.pick([], frozenset(), 1.1) == peers[:4]  # wanting nothing any more is said once too


def test_a_host_with_only_lower_class_flows_is_paced_on_a_shared_reading_and_released():
    """h3's bulk flow into h1 crosses the last hop into h1, where only h0's critical flow queues."""
    limits: dict = {}
    loop = PaceLoop(lambda link: (C, G), lambda sock, rate: limits.__setitem__(sock, rate))
    s = store()
    bulk = Flow((7, 7), "scavenger", 5, (INTO_H1,), C, None)
    for k in range(5):  # no reading: nothing of h3 is limited
        assert loop.step([bulk], None, s.take(T0 + k)) == {}
    s.hear(encode("h0", T0, [critical(0.2)]), "10.0.0.1", T0)
    paced = loop.step([bulk], None, s.take(T0))
    assert paced[(7, 7)] == round(G.floor * C / 8)  # 200 ms of queue: down to the floor
    assert loop.views[INTO_H1].rank == 0 and loop.views[INTO_H1].queue_s is None  # not h3's own reading
    later = T0 + int(STALE_S * 1e9) + 1  # h0 stops telling
    assert loop.step([bulk], None, s.take(later)) == {} and limits[(7, 7)] is None


def fifo(tell_low: bool, periods: int = 100) -> tuple[list[float], list[float]]:
    """h0's critical flow at 0.5 C and greedy scavengers on h2 and h3, all into h1's one FIFO.
    h0 tells its queue reading (a period late) each period; h2 and h3 pace on it and, with
    `tell_low`, tell each other their lower-class weight. Returns the queue and the scavengers'
    total rate per period."""
    a, queue_bits, seen = 0.5 * C, 0.0, 0.0
    limits = {"h2": None, "h3": None}
    loops = {h: PaceLoop(lambda link: (C, G), lambda sock, rate, h=h: limits.__setitem__(h, rate)) for h in limits}
    heard = {h: store({k: v for k, v in HOSTS.items() if k != h}) for h in limits}
    queues, lows = [], []
    for k in range(periods):
        now = T0 + k * int(G.period_s * 1e9)
        rate = {h: C if limits[h] is None else limits[h] * 8 for h in limits}
        for h, s in heard.items():
            s.hear(encode("h0", now, [Reading(INTO_H1, "critical", seen, a, 0, now)]), "10.0.0.1", now)
            other = "h3" if h == "h2" else "h2"
            if tell_low and (v := loops[other].views.get(INTO_H1)) is not None:
                s.hear(encode(other, now, [Reading(INTO_H1, "critical", None, 0.0, v.low_weight, now)]),
                       HOSTS[other], now)
        for h, loop in loops.items():
            loop.step([Flow((1, 1), "scavenger", 5, (INTO_H1,), rate[h], None)], None, heard[h].take(now))
        seen = queue_bits / C
        rate = {h: C if limits[h] is None else limits[h] * 8 for h in limits}
        low = min(C, sum(rate.values()))
        queue_bits = max(0.0, queue_bits + (a + low - C) * G.period_s)
        queues.append(queue_bits / C)
        lows.append(low)
    return queues, lows


def test_two_hosts_pacing_against_one_link_cut_as_one_law():
    queues, lows = fifo(tell_low=True)
    assert max(queues) > G.target_s  # the onset queued
    assert max(queues[40:]) <= G.target_s * 1.05, [round(q * 1e6) for q in queues[:40]]
    # the two scavengers together keep what the critical flow leaves, not a half of it
    assert sum(lows[40:]) / len(lows[40:]) >= 0.9 * 0.5 * C
    # each cutting the whole: twice the gain, at the edge of stability with the late reading: the
    # queue rings and never settles
    alone, _ = fifo(tell_low=False)
    assert min(alone[40:]) > 10 * G.target_s


def test_what_a_host_tells(tmp_path):
    """Its higher class's last-hop reading while it shows a queue (and SHARE_HOLD readings more),
    held between readings; its lower-class weight where it paces on another's; never a NIC's egress."""
    from clockfabric.agent.qos_pace import SHARE_HOLD, HostPacer

    pacer = HostPacer({"lo": int(C)}, tmp_path / "h0.paced", window_s=2.0)
    pacer.loop.actuator = lambda sock, rate: None  # no process of ours behind these sockets
    try:
        def period(queue_s, now, tx=30e6):
            pacer.loop.step([Flow((1, 1), "critical", 70, ("lo>", INTO_H1), tx, queue_s)])
            return pacer.tell(now)

        s = int(REPEAT_S * 1e9)
        assert period(0.004, T0) == [Reading(INTO_H1, "critical", 0.004, 30e6, 0, T0)]
        assert period(None, T0 + s // 2) == []  # the same, told a moment ago
        assert period(None, T0 + s) == [Reading(INTO_H1, "critical", 0.004, 30e6, 0, T0)]  # again: held
        assert period(None, T0 + 5 * 10**9) == []  # no new reading for two windows: no news
        told = [period(0.0, T0 + (10 + k) * s) for k in range(SHARE_HOLD + 1)]
        assert all(told[:-1]) and told[-1] == []  # under target: told SHARE_HOLD more times, then not
        assert period(0.004, T0 + 20 * s, tx=0.0) == []  # the higher class idle: nothing to tell
        heard = store()
        now = T0 + 21 * s
        heard.hear(encode("h2", now, [critical(0.2, now, link=">10.0.0.4")]), "10.0.0.3", now)
        pacer.loop.step([Flow((5, 5), "scavenger", 5, ("lo>", ">10.0.0.4"), C, None)], {"lo>": 0.0}, heard.take(now))
        assert pacer.tell(now) == [Reading(">10.0.0.4", "critical", None, 0.0, 5, now)]
    finally:
        pacer.release()
