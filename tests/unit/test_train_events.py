"""A training job's events reach the controller: the real app, its storage, its events API."""

from __future__ import annotations

import time

import pytest
from fastapi.testclient import TestClient

from clockfabric.controller.app import create_app
from clockfabric.controller.fleet import Fleet
from clockfabric.controller.storage.sqlite import SqliteStorage
from clockfabric.train.to_controller import ControllerEvents, as_push

TOKEN = "t" * 32


@pytest.fixture
def client(tmp_path):
    storage = SqliteStorage(tmp_path / "c.db")
    fleet = Fleet(storage, hosts=["h0", "h1", "h2", "h3"], stale_s=5)
    with TestClient(create_app(fleet, TOKEN, tick_s=3600)) as c:
        yield c
    storage.close()


def events_of(client, **query) -> list[dict]:
    answer = client.get("/api/v1/events", params=query, headers={"Authorization": f"Bearer {TOKEN}"})
    assert answer.status_code == 200, answer.text
    return answer.json()["items"]


def test_a_replacement_is_stored_under_the_hosts_it_concerns(client):
    now = time.time()
    sender = ControllerEvents("http://testserver", TOKEN, "h0", job="job-1", client=client)
    sender.start()
    for i, event in enumerate([
            {"event": "started", "hosts": ["h0", "h1", "h2"], "spares": ["h3"]},
            {"event": "detected", "rank": 1, "host": "h1", "why": "its process exited with status -9"},
            {"event": "spare chosen", "rank": 1, "host": "h3"},
            {"event": "state transferred", "generation": 1, "bytes": 2_100_000, "seconds": 0.05},
            {"event": "resumed", "generation": 1, "step": 9}]):
        sender(event | {"time": now + i})
    sender.close()
    assert (sender.sent, sender.failed) == (5, 0)
    stored = {e["kind"]: e for e in events_of(client)}
    assert set(stored) == {"train_started", "train_detected", "train_spare_chosen", "train_state_transferred",
                           "train_resumed"}
    assert stored["train_detected"]["host"] == "h1" and stored["train_spare_chosen"]["host"] == "h3"
    assert stored["train_state_transferred"]["detail"]["bytes"] == 2_100_000
    assert stored["train_resumed"]["detail"] == {"generation": 1, "step": 9, "job": "job-1"}
    assert [e["kind"] for e in events_of(client, host="h3")] == ["train_spare_chosen"]


def test_a_refused_event_is_counted_and_the_rest_still_go(client, monkeypatch):
    monkeypatch.setattr("clockfabric.train.to_controller.TRIES", 2)
    sender = ControllerEvents("http://testserver", "wrong" * 8, "h0", client=client)
    sender.send(as_push({"event": "started", "time": time.time()}, 1, "job-2", "h0"))
    assert (sender.sent, sender.failed) == (0, 1)  # 401 is retried, then given up: the job carries on
    sender.token = TOKEN
    sender.send(as_push({"event": "detected", "host": "nowhere", "time": time.time()}, 2, "job-2", "h0"))
    assert sender.failed == 2  # a host the fleet does not know: refused, not retried
    sender.send(as_push({"event": "completed", "time": time.time()}, 3, "job-2", "h0"))
    assert sender.sent == 1 and [e["kind"] for e in events_of(client)] == ["train_completed"]
