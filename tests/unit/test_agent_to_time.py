"""Times an agent reports are marked global only while its clock's bound can be trusted."""

from types import SimpleNamespace

from clockfabric.agent.context import AgentContext
from clockfabric.clock.delays import OWD_TRUST_NS
from clockfabric.clock.mapping import HOLDOVER, Mapping


class Clock:
    def local_ns(self, real_ns: int) -> int:
        return real_ns + 7


def to_time(mapping: Mapping | None, real_ns: int) -> tuple[int, bool]:
    ctx = SimpleNamespace(clock=Clock(), time_source=SimpleNamespace(mapping=mapping) if mapping else None)
    return AgentContext.to_time(ctx, real_ns)  # type: ignore[arg-type]


def test_synced_with_a_tight_bound_reports_global_time():
    mapping = Mapping(t0_ns=0, offset_ns=1_000.0, drift=0.0, uncertainty_ns=200.0)
    assert to_time(mapping, 10_000) == (10_007 - 1_000, True)


def test_no_mapping_or_an_unsynced_one_reports_the_hosts_own_clock():
    assert to_time(None, 10_000) == (10_007, False)
    cut_off = Mapping(0, 1_000.0, 0.0, 200.0, synced=False)
    assert to_time(cut_off, 10_000) == (10_007, False)


def test_a_held_over_mapping_whose_bound_grew_past_the_budget_is_not_trusted():
    held = Mapping(0, 0.0, 0.0, 1_000.0, synced=True, state=HOLDOVER, drift_bound=1e-6)
    within = int((OWD_TRUST_NS / 2 - 1_000.0) / 1e-6) - 10  # local time where the bound is just inside
    assert to_time(held, within)[1] is True
    assert to_time(held, within + 1_000_000) == (within + 1_000_007, False)
