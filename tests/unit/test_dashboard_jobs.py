"""The jobs view's data: a job's series on one time axis (pure), and its route on the controller
(FastAPI's test client, real SQLite storage, the job pushed as an agent's workload service does)."""

from __future__ import annotations

import time

import pytest
from fastapi.testclient import TestClient

from clockfabric.controller.app import create_app
from clockfabric.controller.dashboard.jobseries import job_series
from clockfabric.controller.dashboard.routes import allow_viewer
from clockfabric.controller.fleet import Fleet
from clockfabric.controller.series.sample import Sample
from clockfabric.controller.storage.sqlite import SqliteStorage
from tests.series import series_path, write_pushed
from tests.unit.credentials import as_host

TOKEN, VIEWER = "f" * 32, "v" * 32
FLEET_AUTH, VIEWER_AUTH = {"Authorization": f"Bearer {TOKEN}"}, {"Authorization": f"Bearer {VIEWER}"}
S = 10**9
SEND, RECEIVE = "10.0.0.1->10.0.0.2", "10.0.0.2->10.0.0.1"


def flow(host, t, stat, value, label=SEND, jobid="J"):
    return Sample(host, t, f"job_flow_{stat}", value, {"jobid": jobid, "flow": label})


def test_series_share_one_axis_with_gaps_and_leave_out_receivers_and_other_jobs():
    samples = [flow("h1", 10 * S, "tx_bps", 80e6), flow("h1", 10 * S, "rtt_us", 400.0),
               flow("h1", 12 * S, "tx_bps", 40e6), flow("h1", 12 * S, "rtt_us", 2000.0),
               flow("h2", 10 * S, "tx_bps", 1e3, RECEIVE), flow("h2", 12 * S, "rtt_us", 100.0, RECEIVE),
               flow("h3", 11 * S, "tx_bps", 90e6, jobid="other")]
    out = job_series("J", samples, since_ns=5 * S, now_ns=20 * S)
    assert out["t_ns"] == [10 * S, 12 * S]  # only the job's senders' seconds
    assert [f["host"] for f in out["flows"]] == ["h1"]  # h2 only receives; h3 is another job's
    only = out["flows"][0]
    assert only["delay_source"] == "rtt/2" and only["delay_us"] == [200.0, 1000.0]
    assert out["throughput_bps"] == [80e6, 40e6]


def test_inband_delay_is_preferred_and_a_missing_second_is_null():
    # named as the agents push them (workload.samples): the outbound p50 in ns and its fallback flag
    samples = [flow("h1", t * S, "tx_bps", 50e6) for t in (1, 2, 3)]
    samples += [flow("h1", 1 * S, "owd_out_p50_ns", 30_000.0), flow("h1", 3 * S, "owd_out_p50_ns", 90_000.0),
                flow("h1", 1 * S, "owd_out_fallback", 0.0), flow("h1", 1 * S, "rtt_us", 999.0)]
    out = job_series("J", samples, since_ns=0, now_ns=10 * S)
    assert out["flows"][0]["delay_source"] == "inband"
    assert out["flows"][0]["delay_us"] == [30.0, None, 90.0]


def test_a_delay_flagged_as_fallback_is_charted_as_rtt_over_two():
    samples = [flow("h1", 1 * S, "tx_bps", 50e6), flow("h1", 1 * S, "owd_out_p50_ns", 500_000.0),
               flow("h1", 1 * S, "owd_out_fallback", 1.0), flow("h1", 1 * S, "rtt_us", 1000.0)]
    only = job_series("J", samples, since_ns=0, now_ns=10 * S)["flows"][0]
    assert only["delay_source"] == "rtt/2" and only["delay_us"] == [500.0]


def test_readings_outside_the_window_are_left_out():
    samples = [flow("h1", t * S, "tx_bps", 50e6) for t in (1, 5, 9)]
    assert job_series("J", samples, since_ns=4 * S, now_ns=9 * S)["t_ns"] == [5 * S]


@pytest.fixture
def client(tmp_path):
    storage = SqliteStorage(tmp_path / "c.db")
    with series_path(tmp_path, token=TOKEN) as series:
        fleet = Fleet(storage, hosts=["h1", "h2"], series=series)
        app = create_app(fleet, TOKEN, tick_s=3600)
        allow_viewer(app, VIEWER)
        with TestClient(app) as c:
            yield c
    storage.close()


def push_job(client, host, label, tx_bps):
    now = time.time_ns()
    samples = [{"name": "job_processes", "value": 1.0, "labels": {"jobid": "J", "rank": "0"}}]
    for k in range(3):
        t = now - (3 - k) * S
        samples += [{"name": "job_flow_tx_bps", "value": tx_bps, "labels": {"jobid": "J", "flow": label}, "t_ns": t},
                    {"name": "job_flow_rtt_us", "value": 300.0, "labels": {"jobid": "J", "flow": label}, "t_ns": t}]
    r = client.post("/api/v1/push", headers=as_host(TOKEN, host), json={"host": host, "boot": "b"})
    assert r.status_code == 200, r.text
    write_pushed(client, host, samples, now)


def test_the_route_gives_a_pushed_jobs_series_to_either_token(client):
    push_job(client, "h1", SEND, 60e6)
    push_job(client, "h2", RECEIVE, 0.0)
    for auth in (FLEET_AUTH, VIEWER_AUTH):
        r = client.get("/api/v1/dashboard/job-series", params={"jobid": "J", "since": "1m"}, headers=auth)
        assert r.status_code == 200, r.text
        body = r.json()
        assert [f["host"] for f in body["flows"]] == ["h1"] and len(body["t_ns"]) == 3
        assert body["throughput_bps"] == [60e6] * 3 and body["flows"][0]["delay_us"] == [150.0] * 3


@pytest.mark.parametrize(("params", "status", "says"), [
    ({"jobid": "nope"}, 404, "no job"), ({"jobid": "J", "since": "soon"}, 422, "since"),
    ({"jobid": "J", "since": "2h"}, 422, "at most 1h"), ({}, 422, "jobid")])
def test_bad_requests_get_one_clear_answer(client, params, status, says):
    push_job(client, "h1", SEND, 60e6)
    r = client.get("/api/v1/dashboard/job-series", params=params, headers=FLEET_AUTH)
    assert r.status_code == status and says in str(r.json()["detail"])


def test_the_series_need_a_token_and_the_page_ships_the_jobs_view(client):
    assert client.get("/api/v1/dashboard/job-series", params={"jobid": "J"}).status_code == 401
    assert 'data-view="jobs"' in client.get("/dashboard/").text
    for path in ("js/jobs.js", "js/chart.js"):
        assert client.get(f"/dashboard/static/{path}").status_code == 200, path
