"""The in-band vs probe mismatch detector on pushed probe floors and job flow delays: a flow far
above its pair's probes opens after k judgements and closes on as many fine ones; congestion
the probes see too, RTT/2 stand-ins and a whole job off its probes stay quiet."""

from __future__ import annotations

import pytest

from clockfabric.agent import digest
from clockfabric.controller.config import MonitorConfig, parse_config
from clockfabric.controller.detectors import DetectorSet
from clockfabric.controller.series.sample import Sample
from clockfabric.errors import ClockfabricError
from clockfabric.topology import host_of_address, leafspine

US = 1_000
S = 10**9
T0 = 1_790_000_000 * S
ADDRESS = {"h0": "10.0.0.1", "h1": "10.0.0.2", "h2": "10.0.0.3", "h3": "10.0.0.4", "h4": "10.0.0.5"}
HOST_OF = host_of_address(leafspine(6, 3, 2))
PAIRS = (("h0", "h2"), ("h1", "h3"), ("h4", "h2"))  # job M's flows: h0 -> h2 is the one that may go wrong


def label(src: str, dst: str) -> str:
    return f"{ADDRESS[src]}->{ADDRESS[dst]}"


KEY = f"owd_mismatch:M:h0:{label('h0', 'h2')}"


def probes(src: str, dst: str, t_ns: int, floor_us: float = 10, p50_us: float = 12) -> list[Sample]:
    """Both probe paths of the pair (one per spine), each with its floor and p50."""
    return [Sample(src, t_ns, f"owd_{stat}_ns", v * US, {"src": src, "dst": dst, "path": spine})
            for spine in ("spine0", "spine1") for stat, v in (("floor", floor_us), ("p50", p50_us))]


def inband(src: str, dst: str, t_ns: int, owd_us: float, fallback: bool = False, jobid: str = "M") -> list[Sample]:
    labels = {"jobid": jobid, "flow": label(src, dst)}
    out = [Sample(src, t_ns, "job_flow_owd_out_p50_ns", owd_us * US, labels)]
    return out + ([Sample(src, t_ns, "job_flow_owd_out_fallback", 1.0, labels)] if fallback else [])


def written(batch: list[Sample]) -> list[Sample]:
    """What each host writes beside its flows' in-band delays: its probes' floor and level (agent.digest)."""
    by_host: dict[tuple[str, int], list[dict]] = {}
    for s in batch:
        by_host.setdefault((s.host, s.t_ns), []).append({"name": s.name, "value": s.value, "labels": s.labels})
    return [Sample(host, t_ns, x["name"], x["value"], x["labels"])
            for (host, t_ns), mine in by_host.items() for x in digest.flow_probes(mine, host, HOST_OF)]


def tick(detectors: DetectorSet, t_s: int, owd_us: dict[tuple[str, str], float], probe_p50_us: float = 12,
         fallback: bool = False) -> dict:
    """One second of pushes: every pair's probes and each flow's in-band delay (12 µs unless given)."""
    t_ns = T0 + t_s * S
    batch = [s for src, dst in PAIRS for s in probes(src, dst, t_ns, p50_us=probe_p50_us if (src, dst) == ("h0", "h2")
                                                                      else 12)]
    batch += [s for src, dst in PAIRS for s in inband(src, dst, t_ns, owd_us.get((src, dst), 12), fallback)]
    detectors.on_samples(batch + written(batch), t_ns)
    return detectors.active(t_ns)


@pytest.fixture
def detectors() -> DetectorSet:
    return DetectorSet(MonitorConfig(), leafspine(6, 3, 2))


def test_a_flow_far_above_its_probes_opens_after_k_judgements_and_names_both_delays(detectors):
    history = [tick(detectors, t, {("h0", "h2"): 400}) for t in range(5)]
    opened = [KEY in found for found in history]
    assert opened == [False, False, True, True, True]  # windows: 3
    assert [k for k in history[-1] if k.startswith("owd_mismatch:")] == [KEY]
    finding = history[-1][KEY]
    assert finding.kind == "owd_mismatch" and finding.severity == "warning"
    for words in ("job M", label("h0", "h2"), "400 µs", "10 µs", "DSCP", "interface", "`clockfabric job why M`"):
        assert words in finding.message
    assert finding.detail["inband_us"] == 400 and finding.detail["probe_floor_us"] == 10


def test_it_closes_on_k_fine_judgements_once_the_delay_is_back(detectors):
    for t in range(5):
        assert (KEY in tick(detectors, t, {("h0", "h2"): 400})) == (t >= 2)
    still = [KEY in tick(detectors, t, {}) for t in range(5, 25)]
    assert still[0]  # one fine reading neither settles the delay nor closes the alert
    closed_at = still.index(False)
    assert not any(still[closed_at:])  # and once closed it stays closed


def test_quiet_when_the_probes_on_the_path_queue_too(detectors):
    # the path is congested for everyone: the probes' p50 climbs with the flow's delay
    for t in range(8):
        assert not [k for k in tick(detectors, t, {("h0", "h2"): 400}, probe_p50_us=380) if k.startswith("owd_mis")]


def test_rtt_fallback_readings_are_no_in_band_delay(detectors):
    for t in range(8):
        assert not [k for k in tick(detectors, t, {("h0", "h2"): 400}, fallback=True) if k.startswith("owd_mis")]


def test_a_job_misconfigured_as_a_whole_alerts_on_every_flow(detectors):
    every = {pair: 400 for pair in PAIRS}
    for t in range(3):
        opened = [k for k in tick(detectors, t, every) if k.startswith("owd_mis")]
    assert len(opened) == len(PAIRS)


def test_a_job_of_one_flow_alerts(detectors):
    history = []
    for t in range(4):
        t_ns = T0 + t * S
        batch = [*probes("h0", "h2", t_ns), *inband("h0", "h2", t_ns, 400, jobid="C")]
        detectors.on_samples(batch + written(batch), t_ns)
        history.append(sorted(k for k in detectors.active(t_ns) if k.startswith("owd_mismatch:")))
    opened = [f"owd_mismatch:C:h0:{label('h0', 'h2')}"]
    assert history == [[], [], opened, opened]


def test_a_far_end_the_topology_does_not_know_is_not_judged(detectors):
    for t in range(5):
        t_ns = T0 + t * S
        stranger = [Sample("h0", t_ns, "job_flow_owd_out_p50_ns", 400 * US,
                           {"jobid": "X", "flow": "10.0.0.1->192.0.2.9"})]
        batch = [*probes("h0", "h2", t_ns), *stranger]
        detectors.on_samples(batch + written(batch), t_ns)
        assert not [k for k in detectors.active(t_ns) if k.startswith("owd_mismatch:")]


def test_on_without_a_topology_and_off_when_disabled():
    assert "owd_mismatch" in DetectorSet(MonitorConfig()).detectors  # the hosts name the far host
    config = parse_config({"owd_mismatch": {"enabled": False}})
    assert "owd_mismatch" not in DetectorSet(config, leafspine(6, 3, 2)).detectors
    assert "owd_mismatch" in DetectorSet(MonitorConfig(), leafspine(6, 3, 2)).detectors


def test_config_section_parses_like_slow_flow():
    config = parse_config({"owd_mismatch": {"windows": 5, "recent": "20s", "severity": "critical"}})
    section = config.detectors["owd_mismatch"]
    assert (section.windows, section.recent_ns, section.severity) == \
        (5, 20 * S, "critical")
    with pytest.raises(ClockfabricError, match="owd_mismatch.windows must be a positive integer"):
        parse_config({"owd_mismatch": {"windows": 0}})
    with pytest.raises(ClockfabricError, match="owd_mismatch: unknown key 'margin'"):
        parse_config({"owd_mismatch": {"margin": "1ms"}})
