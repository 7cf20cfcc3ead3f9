"""The slow-flow detector on pushed job flows: a flow behind a queue alerts after k judgements;
two healthy jobs with background traffic never do."""

from __future__ import annotations

from clockfabric.controller.config import MonitorConfig, parse_config
from clockfabric.controller.detectors import DetectorSet
from clockfabric.controller.series.sample import Sample
from tests.unit.rootcause_timelines import flow, ring

S = 10**9


def samples_of(flows) -> list[list[Sample]]:
    """Each reading time's samples, as the pushes bring them."""
    by_t: dict[int, list[Sample]] = {}
    for f in flows:
        for p in f.points:
            labels = {"jobid": f.jobid, "flow": f.flow} if f.jobid else {"flow": f.flow}
            prefix = "job" if f.jobid else "other"
            by_t.setdefault(p.t_ns, []).extend([Sample(f.host, p.t_ns, f"{prefix}_flow_tx_bps", p.tx_bps, labels),
                                                Sample(f.host, p.t_ns, f"{prefix}_flow_rtt_us", p.rtt_us, labels)])
    return [by_t[t] for t in sorted(by_t)]


def run(flows, config: MonitorConfig | None = None) -> list[dict]:
    detectors = DetectorSet(config or MonitorConfig())
    opened = []
    for batch in samples_of(flows):
        now = batch[0].t_ns
        detectors.on_samples(batch, now)
        opened.append(detectors.active(now))
    return opened


def test_a_flow_behind_a_queue_alerts_after_k_judgements():
    history = run(ring("A", h1=(80, 2000)))
    keys = [sorted(k for k in found if k.startswith("slow_flow:")) for found in history]
    first = next(i for i, k in enumerate(keys) if k)
    assert keys[first] == ["slow_flow:A:h1:10.0.0.1:5000->10.0.1.3:5201"]
    assert 15 + 2 <= first <= 15 + 10  # slow from reading 15: named within 10 s of the onset
    finding = history[-1]["slow_flow:A:h1:10.0.0.1:5000->10.0.1.3:5201"]
    assert finding.kind == "slow_flow" and "job why A" in finding.message and finding.detail["why"]


def test_healthy_jobs_with_background_traffic_never_alert():
    flows = ring("A") + ring("B", mbps=200) + [flow("h0", "h3", "spine1", None, 300, 70, port=6000)]
    assert not any(k.startswith("slow_flow") for found in run(flows) for k in found)


def test_it_can_be_turned_off_and_tuned():
    off = parse_config({"slow_flow": {"enabled": False}})
    assert not any(run(ring("A", h1=(80, 2000)), off)[-1])
    assert parse_config({"slow_flow": {"windows": 5, "recent": "20s"}}).detectors["slow_flow"].recent_ns == 20 * S


def test_a_reading_completed_by_a_later_read_is_judged_whole():
    """A read may find part of a push (its tx_bps) and the next the rest (its rtt_us, same time):
    the flow is judged on the whole reading, not on the part the first judgement saw."""
    detectors = DetectorSet(parse_config({"slow_flow": {"windows": 1}}))
    t = 1_790_000_000 * S

    def sample(host: str, name: str, value: float) -> Sample:
        return Sample(host, t, f"job_flow_{name}", value, {"jobid": "J", "flow": f"10.0.0.{host[1:]}->10.0.9.9"})

    first = [sample(h, name, v) for h in ("h0", "h2", "h3") for name, v in (("tx_bps", 9e8), ("rtt_us", 60.0))]
    detectors.on_samples([*first, sample("h1", "tx_bps", 9e8)], t)
    assert not detectors.active(t)  # h1's delay not read yet: not judged slow
    detectors.on_samples([sample("h1", "rtt_us", 9_000.0)], t + S)
    assert list(detectors.active(t + S)) == ["slow_flow:J:h1:10.0.0.1->10.0.9.9"]  # the next tick
