"""Retention: raw samples past their days are rolled up per minute and per hour, then deleted;
minute aggregates go in their turn; hour aggregates stay. SQLite and PostgreSQL alike."""

import uuid

import pytest

from clockfabric.controller.retention import DAY_NS, Retention
from clockfabric.controller.storage.base import Sample
from clockfabric.controller.storage.open import open_storage
from clockfabric.controller.storage.retention import HOUR_NS, MINUTE_NS
from clockfabric.errors import ClockfabricError

T0 = 1_800_000_000 * 10**9 // HOUR_NS * HOUR_NS  # on the hour
LABELS = {"peer": "h2", "path": "0"}


@pytest.fixture(params=["sqlite", "postgres"])
def store(request, tmp_path):
    if request.param == "sqlite":
        target = str(tmp_path / "controller.db")
    else:
        target = request.getfixturevalue("postgres_server").create_database(f"t_{uuid.uuid4().hex[:12]}")
    s = open_storage(target)
    yield s
    s.close()


def owd(t_ns: int, value: float, host: str = "h1") -> Sample:
    return Sample(host, t_ns, "owd_p99_ns", value, LABELS)


def test_old_raw_samples_become_minute_and_hour_aggregates(store):
    # two minutes of old samples (values 1..4), one fresh one
    store.add_samples([owd(T0 + 10 * 10**9, 1), owd(T0 + 50 * 10**9, 3), owd(T0 + MINUTE_NS, 4),
                       owd(T0 + MINUTE_NS + 1, 2), owd(T0 + 9 * DAY_NS, 100)])
    job = Retention(store, raw_days=7, minute_days=30, every_s=600)
    now = T0 + 8 * DAY_NS
    done = job.run_if_due(now)
    assert done is not None and done["raw_deleted"] == 4
    assert [s.value for s in store.samples()] == [100]  # the fresh one stays raw
    minutes = store.rollups(name="owd_p99_ns", bucket_ns=MINUTE_NS)
    assert [(m.t_ns - T0, m.n, m.mean, m.min, m.max) for m in minutes] == [
        (0, 2, 2.0, 1.0, 3.0), (MINUTE_NS, 2, 3.0, 2.0, 4.0)]
    assert minutes[0].labels == LABELS and minutes[0].host == "h1"
    hours = store.rollups(name="owd_p99_ns", bucket_ns=HOUR_NS)
    assert [(h.t_ns, h.n, h.mean, h.min, h.max) for h in hours] == [(T0, 4, 2.5, 1.0, 4.0)]
    assert job.run_if_due(now + 10**9) is None  # not due again for every_s


def test_a_bucket_cut_in_two_runs_is_merged_not_counted_twice(store):
    store.add_samples([owd(T0 + 1, 5)])
    job = Retention(store, raw_days=1, minute_days=2, every_s=0)
    job.run_if_due(T0 + DAY_NS + 2)  # cuts after the first sample only
    store.add_samples([owd(T0 + 2, 1), owd(T0 + 3, 9)])  # late arrivals in the same minute
    job.run_if_due(T0 + DAY_NS + 10)
    (minute,) = store.rollups(name="owd_p99_ns", bucket_ns=MINUTE_NS)
    assert (minute.n, minute.mean, minute.min, minute.max) == (3, 5.0, 1.0, 9.0)
    assert store.samples() == []


def test_minute_aggregates_age_out_and_hours_stay(store):
    store.add_samples([owd(T0, 1)])
    job = Retention(store, raw_days=1, minute_days=3, every_s=0)
    job.run_if_due(T0 + 2 * DAY_NS)
    assert len(store.rollups(name="owd_p99_ns", bucket_ns=MINUTE_NS)) == 1
    done = job.run_if_due(T0 + 4 * DAY_NS)
    assert done is not None and done["minutes_deleted"] == 1
    assert store.rollups(name="owd_p99_ns", bucket_ns=MINUTE_NS) == []
    assert len(store.rollups(name="owd_p99_ns", bucket_ns=HOUR_NS)) == 1


def test_latest_values_outlive_their_raw_rows(store):
    store.add_samples([owd(T0, 7)])
    Retention(store, raw_days=1, minute_days=1, every_s=0).run_if_due(T0 + 2 * DAY_NS)
    assert [s.value for s in store.latest_samples("owd_p99_ns")] == [7]  # the OWD matrix keeps its last value


def test_retention_settings_that_contradict_are_one_line(tmp_path):
    with pytest.raises(ClockfabricError, match="minutes at least as long as raw"):
        Retention(open_storage(str(tmp_path / "c.db")), raw_days=30, minute_days=7)
