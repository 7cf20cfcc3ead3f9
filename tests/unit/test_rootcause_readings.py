"""What the workload pushes becomes the readings root cause judges: the sending end's in-band
delay in microseconds, and never an RTT/2 stand-in taken for an in-band delay; and the hosts
whose readings the controller hears late, said beside the verdict."""

from clockfabric.controller.rootcause import FALLBACK, Flow, point, reading
from clockfabric.controller.rootcause_verdict import why
from tests.unit.rootcause_timelines import NOW, S, fabric, ring


def fields(*samples: tuple[str, float]) -> dict[str, float]:
    out: dict[str, float] = {}
    for stat, value in samples:
        reading(out, stat, value)
    return out


def test_in_band_delay_is_read_in_microseconds():
    p = point(5, fields(("tx_bps", 1e6), ("rtt_us", 80.0), ("owd_out_p50_ns", 36_340_000.0), (FALLBACK, 0.0)))
    assert (p.t_ns, p.tx_bps, p.rtt_us, p.owd_us) == (5, 1e6, 80.0, 36_340.0)


def test_an_rtt_half_stand_in_is_no_in_band_delay():
    p = point(5, fields(("rtt_us", 80.0), ("owd_out_p50_ns", 40_000.0), (FALLBACK, 1.0)))
    assert p.owd_us is None and p.rtt_us == 80.0


def test_other_stats_are_ignored():
    assert point(1, fields(("owd_in_p50_ns", 5.0), ("cwnd", 10.0))).owd_us is None


def thinned(flows, host: str, keep_every: int, drop_newest: int = 0):
    """`host`'s flows as the controller hears them when its pushes come late: one reading in
    `keep_every`, the newest `drop_newest` not arrived yet."""
    out = []
    for f in flows:
        points = f.points
        if f.host == host:
            points = points[:len(points) - drop_newest] if drop_newest else points
            points = points[::-keep_every][::-1]
        out.append(Flow(**{**f.__dict__, "points": points}))
    return out


def test_a_host_heard_late_is_said_beside_any_verdict():
    on_time = why("A", ring("A"), fabric(), NOW, 60 * S)
    assert on_time["late"] == []
    sparse = why("A", thinned(ring("A"), "h2", 4), fabric(), NOW, 60 * S)
    assert [(late["host"], late["readings"], late["spacing_s"], late["usual_spacing_s"])
            for late in sparse["late"]] == [("h2", 3, 4.0, 1.0)]  # the span judged: the newest 10 s
    behind = why("A", thinned(ring("A"), "h1", 1, drop_newest=3), fabric(), NOW, 60 * S)
    assert [(late["host"], late["newest_age_s"]) for late in behind["late"]] == [("h1", 4.0)]


def test_a_new_flow_on_time_is_not_late():
    """Few readings because the flow began lately are no lateness: they come at the usual spacing."""
    flows = ring("A")
    young = flows[1]
    flows[1] = Flow(**{**young.__dict__, "points": young.points[-2:]})
    assert why("A", flows, fabric(), NOW, 60 * S)["late"] == []
