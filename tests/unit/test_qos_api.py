"""QoS policies at the controller: set, refused with one line when wrong, kept in the database
for a job no host runs yet, handed to every agent in the answer to its push, shown with what
each host does about them, and cleared."""

from __future__ import annotations

import pytest
from fastapi.testclient import TestClient

from clockfabric.agent.services.qos import read_policies
from clockfabric.controller.app import create_app
from clockfabric.controller.fleet import Fleet
from clockfabric.controller.storage.sqlite import SqliteStorage
from clockfabric.errors import ClockfabricError
from clockfabric.qos import policy
from tests.unit.credentials import as_host

TOKEN = "t" * 32
AUTH = {"Authorization": f"Bearer {TOKEN}"}


@pytest.fixture
def client(tmp_path):
    storage = SqliteStorage(tmp_path / "c.db")
    with TestClient(create_app(Fleet(storage, hosts=["h1", "h2"]), TOKEN, tick_s=3600)) as c:
        yield c
    storage.close()


def push(client, host, info):
    r = client.post("/api/v1/push", headers=as_host(TOKEN, host), json={"host": host, "boot": "b", "info": info})
    assert r.status_code == 200, r.text
    return r.json()


@pytest.mark.parametrize("body, says", [
    ({"jobid": "J", "class": "gold"}, "unknown class 'gold': use one of critical, normal, scavenger"),
    ({"jobid": "J", "class": "critical", "weight": 101}, "weight 101 is out of range: give a whole number"),
    ({"jobid": "J", "class": "critical", "weight": "lots"}, "weight 'lots' is out of range"),
    ({"jobid": "a b", "class": "critical"}, "job id 'a b': use 1 to 128 letters"),
    ([1, 2], "the body is a JSON object"),
])
def test_bad_input_is_one_line_naming_the_problem(client, body, says):
    r = client.post("/api/v1/qos", headers=AUTH, json=body)
    assert r.status_code == 400 and says in r.json()["detail"] and "\n" not in r.json()["detail"], r.text


def test_a_policy_waits_for_its_job_rides_on_pushes_and_is_cleared(client):
    r = client.post("/api/v1/qos", headers=AUTH, json={"jobid": "slurm:12", "class": "critical"})
    assert r.json() == {"jobid": "slurm:12", "class": "critical", "weight": 70, "override_dscp": False}
    client.post("/api/v1/qos", headers=AUTH, json={"jobid": "bulk", "class": "scavenger", "weight": 3})
    shown = client.get("/api/v1/qos", headers=AUTH).json()
    assert [(p["jobid"], p["state"]) for p in shown["items"]] == [
        ("bulk", "waiting: no host runs the job"), ("slurm:12", "waiting: no host runs the job")]

    answer = push(client, "h1", {"qos": {"refused": "", "links": {"eth0": "shaped"},
                                         "jobs": {"bulk": {"class": "scavenger", "sockets": 2, "marked_packets": 9}}}})
    assert [p.as_dict() for p in read_policies(answer["qos"])] == [
        {"jobid": "bulk", "class": "scavenger", "weight": 3, "override_dscp": False},
        {"jobid": "slurm:12", "class": "critical", "weight": 70, "override_dscp": False}]
    shown = client.get("/api/v1/qos", headers=AUTH).json()
    assert shown["items"][0]["state"] == "enforced" and shown["items"][0]["hosts"]["h1"]["marked_packets"] == 9
    assert shown["hosts"] == {"h1": {"refused": "", "links": {"eth0": "shaped"}}}

    push(client, "h2", {"qos": {"refused": "", "links": {}, "jobs": {
        "ckpt": {"class": "scavenger", "weight": 3, "sockets": 1, "marked_packets": 4}}}})  # `job run --qos`
    asked = client.get("/api/v1/qos", headers=AUTH).json()["items"][-1]
    assert (asked["jobid"], asked["class"], asked["state"], asked["set_ns"]) == ("ckpt", "scavenger",
                                                                                 "asked by the job", None)
    assert client.post("/api/v1/qos/clear", headers=AUTH, json={"jobid": "bulk"}).status_code == 200
    r = client.post("/api/v1/qos/clear", headers=AUTH, json={"jobid": "bulk"})
    assert r.status_code == 404 and "has no QoS policy" in r.json()["detail"]
    assert [p["jobid"] for p in push(client, "h2", {})["qos"]] == ["slurm:12"]


def test_policies_outlive_the_controller(tmp_path):
    with SqliteStorage(tmp_path / "c.db") as s:
        s.set_qos("J", "normal", 10, True, 5)
        s.set_qos("J", "critical", 20, False, 6)  # replaced, not added
    with SqliteStorage(tmp_path / "c.db") as s:
        assert s.qos_policies() == [("J", "critical", 20, False, 6)]


def test_an_agent_refuses_a_malformed_policy_list_in_one_line():
    with pytest.raises(ClockfabricError, match="unknown class 'x'"):
        read_policies([{"jobid": "J", "class": "x"}])
    with pytest.raises(ClockfabricError, match="a JSON list"):
        read_policies({"jobid": "J"})
    assert policy.make("J", "scavenger").dscp == 1


def test_a_push_is_not_refused_when_the_policies_cannot_be_read(tmp_path, monkeypatch):
    from clockfabric.controller.storage.base import StorageError

    storage = SqliteStorage(tmp_path / "c.db")
    with TestClient(create_app(Fleet(storage, hosts=["h1"]), TOKEN, tick_s=3600)) as client:
        def refused():
            raise StorageError("database is locked", "busy")
        monkeypatch.setattr(storage, "qos_policies", refused)
        assert "qos" not in push(client, "h1", {})  # stored; the agent keeps the policies it has
        monkeypatch.undo()
        assert push(client, "h1", {})["qos"] == []
    storage.close()
