"""What the workload pushes becomes the readings root cause judges: the sending end's in-band
delay in microseconds, and never an RTT/2 stand-in taken for an in-band delay."""

from clockfabric.controller.rootcause import FALLBACK, point, reading


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
