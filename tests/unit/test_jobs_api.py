"""The controller's jobs API: what two agents' workload services push becomes one job with both
hosts, its ranks and start, and its flows with peers matched end to end; paging; jobs that end."""

from __future__ import annotations

import time

import pytest
from fastapi.testclient import TestClient

from clockfabric.cli.job_cmds import host_line
from clockfabric.controller.app import create_app
from clockfabric.controller.fleet import Fleet
from clockfabric.controller.storage.sqlite import SqliteStorage
from clockfabric.traffic.steer_decide import FlowKey
from clockfabric.workload import samples
from clockfabric.workload.flows import FlowRates, SocketReading
from clockfabric.workload.jobs import Job, JobProcess, JobTag
from clockfabric.workload.monitor import JobFlow, WorkloadView
from tests.series import series_path, write_pushed
from tests.unit.credentials import as_host

TOKEN = "t" * 32
AUTH = {"Authorization": f"Bearer {TOKEN}"}
T0_S = time.time_ns() // 10**9 - 600  # the engine takes samples up to now, so the tests' clock runs behind it
T0 = T0_S * 10**9


class Clock:
    def __init__(self):
        self.now = T0

    def __call__(self):
        return self.now


@pytest.fixture
def env(tmp_path):
    storage = SqliteStorage(tmp_path / "c.db")
    clock = Clock()
    with series_path(tmp_path) as series:
        fleet = Fleet(storage, hosts=["h1", "h2", "h3"], clock=clock, series=series)
        with TestClient(create_app(fleet, TOKEN, tick_s=3600)) as client:
            yield client, clock
    storage.close()


def process(jobid, pid, rank, start_s=T0_S - 1000.0):
    """A process as an agent pushes it: its group's samples (no pid label), its pid in the push's info."""
    labels = {"jobid": jobid, "rank": str(rank), "source": "clockfabric", "run": "r1", "visible": "1"}
    return {"samples": [{"name": "job_processes", "value": 1.0, "labels": labels},
                        {"name": "job_start_seconds", "value": start_s, "labels": labels}],
            "info": {**labels, "pid": pid, "start_s": start_s}}


def flow(jobid, label, **stats):
    return [{"name": f"job_flow_{k}", "value": v, "labels": {"jobid": jobid, "flow": label}} for k, v in stats.items()]


def push(client, host, address, items):
    """As an agent does: its info to the controller, its samples through the series gate."""
    procs = [i["info"] for i in items if "info" in i]
    samples = [s for i in items for s in (i["samples"] if "info" in i else [i])]
    r = client.post("/api/v1/push", headers=as_host(TOKEN, host),
                    json={"host": host, "boot": "b", "info": {"address": address, "workload": {"processes": procs}}})
    assert r.status_code == 200, r.text
    write_pushed(client, host, samples, client.app.state.operations.fleet.clock())


def get(client, path, **params):
    r = client.get(path, headers=AUTH, params=params)
    assert r.status_code == 200, r.text
    return r.json()


def test_a_job_on_two_hosts_with_a_flow_between_them(env):
    client, clock = env
    push(client, "h1", "10.0.0.1", [process("J", 100, 0, start_s=T0_S - 500.0), *flow(
        "J", "10.1.0.2->10.0.0.2", tx_bps=8e8, rx_bps=1e4, rtt_us=150, retransmits_total=2, cwnd=40,
        delivery_bps=9e8)])
    push(client, "h2", "10.0.0.2", [process("J", 200, 1), *flow("J", "10.0.0.2->10.1.0.2",
                                                                 tx_bps=1e4, rx_bps=8e8, rtt_us=90)])
    listed = get(client, "/api/v1/jobs")
    assert listed["next"] is None
    [job] = listed["items"]
    assert job["jobid"] == "J" and job["hosts"] == ["h1", "h2"] and job["ranks"] == [0, 1]
    assert job["start_ns"] == (T0_S - 1000) * 10**9 and job["active"] and job["processes"] == 2
    shown = get(client, "/api/v1/jobs/J")
    assert [h["host"] for h in shown["by_host"]] == ["h1", "h2"] and shown["by_host"][1]["ranks"] == [1]
    # the pids come from each host's push info, never from a series label
    assert [[p["pid"] for p in h["processes"]] for h in shown["by_host"]] == [[100], [200]]
    assert host_line(shown["by_host"][0]) == "  h1: ranks 0, pids 100"  # `job show`
    by_host = {f["host"]: f for f in shown["flows"]}
    # h1's source address is a NIC's, not its host address: the peer is found by the reversed key
    assert by_host["h1"]["peer"] == "h2" and by_host["h2"]["peer"] == "h1"
    assert by_host["h1"]["tx_bps"] == 8e8 and by_host["h1"]["rtt_us"] == 150 and by_host["h1"]["cwnd"] == 40
    assert by_host["h1"]["retransmits_total"] == 2 and by_host["h2"]["cwnd"] is None


def test_a_peer_without_an_agent_is_named_by_its_address(env):
    client, _ = env
    push(client, "h1", "10.0.0.1", [process("J", 100, 0), *flow("J", "10.0.0.1->10.0.0.3", tx_bps=1.0)])
    push(client, "h3", "10.0.0.3", [])
    assert get(client, "/api/v1/jobs/J")["flows"][0]["peer"] == "h3"


def test_jobs_page_by_id_and_ended_jobs_stay_marked_ended(env):
    client, clock = env
    push(client, "h1", "10.0.0.1", [process(f"job{i}", 100 + i, 0) for i in range(5)])
    clock.now += 60 * 10**9
    push(client, "h2", "10.0.0.2", [process("job4", 300, 1)])
    first = get(client, "/api/v1/jobs", limit=2)
    assert [j["jobid"] for j in first["items"]] == ["job0", "job1"] and first["next"] == "job1"
    rest = get(client, "/api/v1/jobs", after=first["next"], limit=10)
    assert [j["jobid"] for j in rest["items"]] == ["job2", "job3", "job4"] and rest["next"] is None
    assert [j["active"] for j in rest["items"]] == [False, False, True]
    assert [j["jobid"] for j in get(client, "/api/v1/jobs", active_only=True)["items"]] == ["job4"]
    ended = get(client, "/api/v1/jobs/job0")["by_host"][0]["processes"]
    assert ended == [{"pid": None, "rank": 0, "run": "r1", "start_ns": (T0_S - 1000) * 10**9, "active": False,
                      "flows_visible": True}]  # its host's push no longer names it running
    assert host_line(get(client, "/api/v1/jobs/job0")["by_host"][0]) == "  h1: ranks 0, pids -, 1 ended"


def test_an_unknown_job_is_404_and_the_routes_want_the_token(env):
    client, _ = env
    assert client.get("/api/v1/jobs/nope", headers=AUTH).status_code == 404
    assert client.get("/api/v1/jobs").status_code == 401
    assert client.get("/api/v1/jobs/J").status_code == 401


def test_connections_to_one_peer_are_one_flow_with_their_5_tuples_from_the_push(env):
    """What the agent's workload service pushes: two connections h1 -> h2 make one flow group's
    series (rates summed, the slower RTT); the API lists both 5-tuples and pids from the push's info."""
    rank0 = JobProcess(100, JobTag("J", "clockfabric", 0, "r1"), T0_S - 100.0)
    conns = [JobFlow("J", 100, FlowRates(SocketReading(FlowKey("10.0.0.1", port, "10.0.0.2", 5201), port, port,
                                                       0, 0, 0, rtt, 10, 0.0), 4e8, 1e4, 0))
             for port, rtt in ((40000, 150), (40001, 300))]
    view = WorkloadView(jobs={"J": Job("J", "clockfabric", [rank0])}, flows=conns)
    client, clock = env
    r = client.post("/api/v1/push", headers=as_host(TOKEN, "h1"), json={
        "host": "h1", "boot": "b", "info": {"address": "10.0.0.1", "workload": samples.summary(view)}})
    assert r.status_code == 200, r.text
    written = samples.push_samples(view)
    assert {s["labels"]["flow"] for s in written if s["name"].startswith("job_flow_")} == {"10.0.0.1->10.0.0.2"}
    write_pushed(client, "h1", written, clock())
    push(client, "h2", "10.0.0.2", [])
    [row] = get(client, "/api/v1/jobs/J")["flows"]
    assert (row["flow"], row["local"], row["remote"], row["peer"]) == ("10.0.0.1->10.0.0.2", "10.0.0.1", "10.0.0.2",
                                                                       "h2")
    assert row["tx_bps"] == 8e8 and row["rx_bps"] == 2e4 and row["rtt_us"] == 300 and row["cwnd"] == 10
    assert [(c["flow"], c["pid"], c["rtt_us"]) for c in row["connections"]] == [
        ("10.0.0.1:40000->10.0.0.2:5201", 100, 150), ("10.0.0.1:40001->10.0.0.2:5201", 100, 300)]
