"""An agent's events outlive it: what the controller has not taken is on disk, bounded, and sent
after a restart under its first boot and seq; a run whose events never all arrived says so."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import threading
from pathlib import Path

import pytest

from clockfabric.agent.eventlog import EventLog
from clockfabric.agent.metrics import clock_metrics
from clockfabric.agent.push import Pusher
from clockfabric.auth.credential import host_token
from clockfabric.controller.fleet import Fleet
from clockfabric.controller.server import Listen, server, start_in_thread
from clockfabric.controller.storage.sqlite import SqliteStorage
from tests.waiting import wait_for

TOKEN = "t" * 32
ROOT = Path(__file__).resolve().parents[2]


def ev(i: int) -> dict:
    return {"t_ns": 1_000 + i, "kind": "link_down", "device": "eth0", "detail": {"i": i}}


def test_held_events_survive_a_reopen_with_their_boot_and_seq(tmp_path):
    log = EventLog(tmp_path / "h1.events")
    log.start_boot("b1")
    log.add([ev(1), ev(2), ev(3)])
    log.taken(list(log.pending)[:1], delivered=True)
    log.commit()  # no close: as a process killed leaves it
    again = EventLog(tmp_path / "h1.events")
    assert [(e["boot"], e["seq"], e["detail"]["i"]) for e in again.pending] == [("b1", 2, 2), ("b1", 3, 3)]
    again.start_boot("b2")
    again.add([ev(4)])
    assert [(e["boot"], e["seq"]) for e in again.pending] == [("b1", 2), ("b1", 3), ("b2", 1)]
    assert again.ended() == []  # b1 still holds events: its end is not stated yet
    again.taken(list(again.pending)[:2], delivered=True)
    assert again.ended() == [{"boot": "b1", "last_seq": 3, "delivered": 3, "undelivered": 0}]
    again.reported(["b1"])
    assert list(again.boots) == ["b2"]


def test_a_full_log_drops_the_oldest_counts_them_and_states_them_at_the_end(tmp_path):
    log = EventLog(tmp_path / "h1.events", capacity=3)
    log.start_boot("b1")
    assert log.add([ev(i) for i in range(1, 6)]) == 2
    log.commit()
    assert [e["seq"] for e in log.pending] == [3, 4, 5] and log.dropped == 2
    again = EventLog(tmp_path / "h1.events", capacity=3)
    again.start_boot("b2")
    again.taken(list(again.pending), delivered=True)
    assert again.ended() == [{"boot": "b1", "last_seq": 5, "delivered": 3, "undelivered": 2}]


def test_a_torn_last_line_is_skipped_and_the_file_stays_bounded(tmp_path):
    path = tmp_path / "h1.events"
    log = EventLog(path, capacity=64)
    log.start_boot("b1")
    for i in range(2_000):  # many more records than the compaction threshold (4 x 64)
        log.add([ev(i)])
        log.taken(list(log.pending), delivered=True)
        log.commit()
    log.add([ev(9)])
    log.commit()
    assert len(path.read_text().splitlines()) <= 4 * 64 + 2
    with open(path, "a") as f:
        f.write('{"ev": {"boot": "b1", "se')  # a write cut short by the kill
    again = EventLog(path, capacity=64)
    assert [(e["boot"], e["seq"]) for e in again.pending] == [("b1", 2_001)]
    assert again.boots["b1"].delivered == 2_000


def test_events_are_on_disk_before_they_are_sent(tmp_path):
    """The pusher syncs before its POST: a push that fails leaves every event in the file."""
    log = EventLog(tmp_path / "h1.events")
    news = [[ev(1), ev(2)]]
    p = Pusher(f"http://127.0.0.1:{free_port()}", host_token(TOKEN, "h1"), "h1", log=log,
               snapshot=lambda: (news.pop() if news else [], [], {}))
    assert not p.push_once()
    assert [e["seq"] for e in EventLog(tmp_path / "h1.events").pending] == [1, 2]


def test_a_link_change_is_held_on_disk_while_a_push_hangs(tmp_path):
    """hold() (a link watcher's thread) puts new events on disk while the pusher's thread waits
    on a controller that took the connection and never answers: a kill then loses nothing."""
    mute = socket.create_server(("127.0.0.1", 0))  # accepts (the kernel's backlog) and never answers
    news: list[list[dict]] = [[ev(1)]]
    p = Pusher(f"http://127.0.0.1:{mute.getsockname()[1]}", host_token(TOKEN, "h1"), "h1",
               log=EventLog(tmp_path / "h1.events"), snapshot=lambda: (news.pop() if news else [], [], {}))
    hung = threading.Thread(target=p.push_once, daemon=True)
    hung.start()
    wait_for("the push under way", lambda: not news, timeout_s=5)
    news.append([ev(2), ev(3)])
    p.hold()
    assert hung.is_alive()  # the push still waits for its answer
    assert [e["detail"]["i"] for e in EventLog(tmp_path / "h1.events").pending] == [1, 2, 3]
    mute.close()


def test_the_event_counts_are_metrics():
    out = {m.name: (m.value, m.kind) for m in clock_metrics({"host": "h1", "events": {"held": 4, "sent": 9,
                                                                                       "dropped": 2}})}
    assert out["clockfabric_agent_events_held"] == (4.0, "gauge")
    assert out["clockfabric_agent_events_sent_total"] == (9.0, "counter")
    assert out["clockfabric_agent_events_dropped_total"] == (2.0, "counter")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture
def controller(tmp_path):
    """A controller not yet listening: start() serves it on the port given."""
    storage = SqliteStorage(tmp_path / "c.db")
    port = free_port()
    running = []

    def start() -> None:
        srv = server(Fleet(storage, hosts=["h1"]), TOKEN, Listen(port=port))
        running.append((srv, start_in_thread(srv)))

    yield f"http://127.0.0.1:{port}", storage, start
    for srv, thread in running:
        srv.should_exit = True
        thread.join(5)
    storage.close()


def agent(url: str, log: Path, n: int) -> tuple[subprocess.Popen, str]:
    argv = ["tests.unit.pushing_agent", url, host_token(TOKEN, "h1"), "h1", str(log), str(n)]
    proc = subprocess.Popen([sys.executable, "-m", *argv],
                            cwd=ROOT, stdout=subprocess.PIPE, text=True,
                            env={**os.environ, "PYTHONPATH": f"{ROOT / 'src'}:{ROOT}"})
    assert proc.stdout is not None
    line = proc.stdout.readline()
    assert line.startswith("boot "), line
    return proc, line.split()[1]


def test_an_agent_killed_with_events_held_sends_them_after_its_restart(tmp_path, controller):
    url, storage, start = controller
    log = tmp_path / "h1.events"
    first, boot1 = agent(url, log, 5)  # the controller is down: its first push failed, the events are held
    first.kill()  # SIGKILL: no last push, no close
    first.wait(5)
    start()
    second, boot2 = agent(url, log, 2)
    try:
        wait_for("the held events and the new ones stored",
                 lambda: len([e for e in storage.events() if e.kind == "test_event"]) == 7, timeout_s=20)
        got = sorted((e.boot, e.seq, e.detail["i"]) for e in storage.events() if e.kind == "test_event")
        assert [g for g in got if g[0] == boot1] == [(boot1, i + 1, i) for i in range(5)]
        assert [g for g in got if g[0] == boot2] == [(boot2, 1, 0), (boot2, 2, 1)]
        wait_for("the first run's end", lambda: any(e.kind == "boot_ended" for e in storage.events()))
        (end,) = [e for e in storage.events() if e.kind == "boot_ended"]
        assert end.detail == {"boot": boot1, "last_seq": 5, "delivered": 5, "undelivered": 0}
    finally:
        second.terminate()
        second.wait(10)
    # the second run stopped cleanly, and stated its own end; a third run, killed, whose log is then lost:
    # the fourth cannot say how the third ended, and the controller says so
    third, boot3 = agent(url, log, 1)
    wait_for("the third run pushing", lambda: any(e.boot == boot3 for e in storage.events()))
    third.kill()
    third.wait(5)
    log.unlink()
    fourth, _ = agent(url, log, 0)
    try:
        wait_for("the unknown end", lambda: len([e for e in storage.events() if e.kind == "boot_ended"]) == 3)
        ends = {e.detail["boot"]: e.detail for e in storage.events() if e.kind == "boot_ended"}
        assert ends[boot2] == {"boot": boot2, "last_seq": 2, "delivered": 2, "undelivered": 0}
        assert ends[boot3]["undelivered"] is None and "log was lost" in ends[boot3]["why"]
    finally:
        fourth.terminate()
        fourth.wait(10)
