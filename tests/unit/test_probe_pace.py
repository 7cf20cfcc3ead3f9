"""The probe rate an agent keeps (agent/config.py probe_interval_s) and the switch to the quiet
rate once the clock has settled (agent/services/clock.py): the quiet rate must stay slower than
the full one whatever else bounds the full one (the link budget, the seals' bytes)."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from clockfabric.agent.config import AgentConfig
from clockfabric.agent.services.clock import ClockSync
from clockfabric.probe import wire
from clockfabric.topology import leafspine


def config(host_rate: str, **kw) -> AgentConfig:
    return AgentConfig("h1", leafspine(12, 2, 2, host_rate=host_rate), "/nonexistent", peers=10, **kw)


def budget_interval(cfg: AgentConfig, rate_bps: float) -> float:
    return len(cfg.probed) * wire.exchange_wire_bytes() / (cfg.probe_budget * rate_bps / 8)


def test_on_a_fast_link_the_rates_are_the_ones_asked_for():
    cfg = config("100gbit")
    assert cfg.probe_interval_s() == pytest.approx(10 / 20)  # 10 peers, 20 exchanges a second
    assert cfg.probe_interval_s(quiet=True) == pytest.approx(10 / 10)


def test_where_the_budget_holds_the_full_rate_the_quiet_one_is_still_that_share_slower():
    cfg = config("100mbit")
    full = cfg.probe_interval_s()
    assert full == pytest.approx(budget_interval(cfg, 100e6)) and 10 / 20 < full < 1.0  # the budget binds
    assert cfg.probe_interval_s(quiet=True) == pytest.approx(2 * full)  # quiet_rate is half probe_rate


def test_the_quiet_rate_sees_each_peer_at_least_once_a_window():
    cfg = config("10mbit")  # the budget would space exchanges tens of seconds apart
    assert cfg.probe_interval_s() == 1.0
    assert cfg.probe_interval_s(quiet=True) == pytest.approx(cfg.window_s)


def test_a_quiet_rate_equal_to_the_full_one_keeps_the_full_rate():
    for rate in ("100mbit", "100gbit"):
        cfg = config(rate, quiet_rate=20.0)
        assert cfg.probe_interval_s(quiet=True) == cfg.probe_interval_s()


def clock_service(cfg: AgentConfig) -> ClockSync:
    engine = SimpleNamespace(interval_s=cfg.probe_interval_s(), exchanges=[], names={})
    ctx = SimpleNamespace(cfg=cfg, engine=engine, time_source=None, send=lambda host, msg: None,
                          clock=SimpleNamespace(set_ns=lambda: 0))
    return ClockSync(ctx)


@pytest.mark.parametrize("host_rate", ["100mbit", "100gbit"])
def test_the_engine_probes_at_the_quiet_rate_while_settled_and_at_the_full_rate_after(host_rate, monkeypatch):
    cfg = config(host_rate)
    svc = clock_service(cfg)
    full = svc.ctx.engine.interval_s
    monkeypatch.setattr(svc.sync, "settled", lambda now_ns: True)
    svc.tick(0)
    assert svc.ctx.engine.interval_s == pytest.approx(cfg.probe_interval_s(quiet=True)) and svc.quiet
    assert svc.ctx.engine.interval_s >= 1.5 * full  # it saves exchanges on this link too
    assert svc.report()["probe_quiet"] is True
    monkeypatch.setattr(svc.sync, "settled", lambda now_ns: False)
    svc.tick(1)
    assert svc.ctx.engine.interval_s == full and not svc.quiet
