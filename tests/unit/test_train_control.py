"""The job's board on both stores (a FileStore, a TCPStore the coordinator serves), the
members' presence, and fencing: a reader blocked on a lost peer wakes at once."""

import contextlib
import os
import signal
import socket
import subprocess
import sys
import threading
import time

import pytest

pytest.importorskip("torch", reason="torch is not installed (make setup installs the job extra)")

from clockfabric.errors import ClockfabricError  # noqa: E402
from clockfabric.train import control, presence  # noqa: E402
from clockfabric.train.elastic import identity  # noqa: E402
from clockfabric.train.heartbeat import shut_sockets_to  # noqa: E402


def soon(check, timeout_s=2.0):
    """check()'s first truthy result: a TCPStore's set does not wait for the server's reply, so
    another connection reads it a moment later (every reader of the board polls)."""
    deadline = time.monotonic() + timeout_s
    while not (result := check()) and time.monotonic() < deadline:
        time.sleep(0.005)
    return result


def gen(number, state=control.RUNNING):
    return control.Generation(number, state, ["h0", "h1"], ["10.0.0.1:1", "10.0.0.2:1"])


@pytest.fixture(params=["file", "tcp"])
def board(request, tmp_path):
    """The coordinator's board and a member's connection to it."""
    if request.param == "file":
        served = control.Board.open(f"file://{tmp_path / 'board'}")
    else:
        served = control.Board.open("tcp://127.0.0.1:0", serve=True)
    return served, served.again()


def test_a_survivor_waits_through_a_paused_generation_for_the_next_running_one(board):
    coordinator, member = board
    assert member.generation() is None
    coordinator.write_generation(gen(0))
    assert soon(lambda: member.generation() == gen(0)) and gen(0).world == 2
    with pytest.raises(TimeoutError, match="no spare came"):
        member.wait_generation(after=0, timeout_s=0.1)
    coordinator.write_generation(gen(1, control.PAUSED))
    assert soon(lambda: member.generation() == gen(1, control.PAUSED))
    with pytest.raises(TimeoutError):
        member.wait_generation(after=0, timeout_s=0.1)
    threading.Timer(0.2, coordinator.write_generation, (gen(2),)).start()
    assert member.wait_generation(after=0, timeout_s=5).number == 2
    assert member.superseded(1) and not member.superseded(2)


def test_members_form_once_all_are_ready_and_move_on_if_one_is_lost_first(board):
    coordinator, member = board
    coordinator.write_generation(gen(1))
    member.mark_ready(1, 0)
    with pytest.raises(TimeoutError, match="did not all arrive"):
        member.wait_ready(gen(1), timeout_s=0.1)
    coordinator.write_generation(gen(2, control.PAUSED))  # the missing member was lost, no spare yet
    assert soon(lambda: member.superseded(1))
    with pytest.raises(TimeoutError):
        member.wait_ready(gen(1), timeout_s=0.1)
    threading.Timer(0.2, coordinator.write_generation, (gen(3),)).start()
    assert member.wait_ready(gen(1), timeout_s=5).number == 3
    member.mark_ready(3, 1)
    member.mark_ready(3, 0)
    assert member.wait_ready(gen(3), timeout_s=0.5) is None


def test_registrations_and_records_are_read_once_each_in_order(board):
    coordinator, member = board
    member.register("h0", 0)
    member.register("h3", None)
    assert soon(lambda: len(coordinator.members()) == 2)
    assert [(m["name"], m["rank"]) for m in coordinator.members()] == [("h0", 0), ("h3", None)]
    assert [m["name"] for m in coordinator.members(since=1)] == ["h3"]
    member.post({"event": "joined", "generation": 1, "rank": 0})
    member.mark_failed(1, 1, bound_s=None)
    assert soon(lambda: len(coordinator.records()) == 2)
    assert [r["event"] for r in coordinator.records()] == ["joined", "step failed"]
    assert [m["rank"] for m in coordinator.failed_steps(1)] == [1] and coordinator.failed_steps(2) == []
    member.write_report("h0", {"time": 1.0, "beat": "10.0.0.1:5"})
    assert soon(lambda: coordinator.report("h0"))["beat"] == "10.0.0.1:5" and coordinator.report("h9") is None


def test_bad_board_urls_and_an_unreachable_board_are_one_line_each():
    for url in ("10.0.0.1:29500", "tcp://host", "http://x:1", "file://"):
        with pytest.raises(ClockfabricError, match="tcp://HOST:PORT"):
            control.parse_url(url)
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]  # bound, not listening: nothing answers there
        with pytest.raises(ClockfabricError, match="is `clockfabric train coordinator` running"):
            control.Board.open(f"tcp://127.0.0.1:{port}", timeout_s=1)


def test_a_board_whose_coordinator_ended_is_one_line():
    served = control.Board.open("tcp://127.0.0.1:0", serve=True)
    member = served.again()
    member.write_report("h0", {"time": 1.0})
    del served  # the coordinator's process ends: its store with it
    import gc

    gc.collect()
    with pytest.raises(control.BoardGone, match="does not answer .*is its coordinator still running"):
        member.generation()


def test_a_board_that_stopped_answering_is_one_line_within_its_bound_not_a_hang():
    """A stopped coordinator: a c10d store's check waits forever on it, whatever its timeout."""
    serve = ("import sys, time; from clockfabric.train import control; "
             "b = control.Board.open('tcp://127.0.0.1:0', serve=True); b.write_text('x', 'y'); "
             "print(b.url, flush=True); time.sleep(60)")
    coordinator = subprocess.Popen([sys.executable, "-c", serve], stdout=subprocess.PIPE, text=True)
    try:
        member = control.Board.open(coordinator.stdout.readline().strip(), answer_s=0.5)
        assert member.text("x") == "y"
        os.kill(coordinator.pid, signal.SIGSTOP)
        for ask, most_s in ((lambda: member.text("x"), 3 * 0.5), (lambda: member.register("h9", None), 0.5)):
            start = time.monotonic()
            with pytest.raises(control.BoardGone, match="does not answer .no answer within 0.5 s"):
                ask()
            assert time.monotonic() - start < most_s + 0.5  # the read tried a fresh connection too
    finally:
        coordinator.kill()
        coordinator.wait()


class Relay:
    """A TCP relay to a board that can stop relaying the connections it holds (a connection
    wedged, its server and the network fine); those opened after go on."""

    def __init__(self, port):
        self.port, self.stalls, self.sockets = port, 0, []
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.url = f"tcp://127.0.0.1:{self.listener.getsockname()[1]}"
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self):
        with contextlib.suppress(OSError):
            while True:
                near, _ = self.listener.accept()
                far = socket.create_connection(("127.0.0.1", self.port))
                wedged = lambda opened=self.stalls: self.stalls > opened  # noqa: E731
                self.sockets += [near, far]
                for a, b in ((near, far), (far, near)):
                    threading.Thread(target=self._pump, args=(a, b, wedged), daemon=True).start()

    def _pump(self, a, b, wedged):
        with contextlib.suppress(OSError):
            while data := a.recv(65536):
                while wedged():
                    time.sleep(0.01)
                b.sendall(data)

    def close(self):
        for s in [self.listener, *self.sockets]:
            s.close()


def test_a_wedged_connection_to_the_board_is_replaced_by_a_fresh_one():
    served = control.Board.open("tcp://127.0.0.1:0", serve=True)
    relay = Relay(served.port)
    try:
        member = control.Board.open(relay.url, answer_s=0.5)
        member.write_report("h0", {"time": 1.0})
        assert soon(lambda: served.report("h0")) == {"time": 1.0}
        relay.stalls += 1  # the connections open now relay nothing more; new ones do
        start = time.monotonic()
        assert member.report("h0") == {"time": 1.0}
        assert 0.5 <= time.monotonic() - start < 1.5
        member.write_report("h0", {"time": 2.0})
        assert soon(lambda: served.report("h0")) == {"time": 2.0}
        relay.stalls += 1  # again: a registration is never sent twice (the count would skip one)
        with pytest.raises(control.BoardGone, match="no answer within 0.5 s"):
            member.register("h1", None)
        assert served.members() == []
    finally:
        relay.close()


def test_a_member_finds_its_job_under_each_launcher():
    store = {control.STORE_ENV: "tcp://head:29500"}
    assert identity(store | {control.NAME_ENV: "h1", "RANK": "2", control.BEAT_ENV: "10.0.0.2"}) == \
        ("h1", 2, "10.0.0.2")
    torchrun = store | {"TORCHELASTIC_RUN_ID": "j", "RANK": "5", "LOCAL_RANK": "1", "LOCAL_WORLD_SIZE": "2"}
    name, rank, _ = identity(torchrun)
    assert name == f"{socket.gethostname()}/1" and rank == 5
    assert identity(store | {"SLURM_PROCID": "3"})[1] == 3
    assert identity(store | {"RANK": "1", control.SPARE_ENV: "1"})[1] is None  # a spare waits, whatever RANK says
    srun = store | {"SLURM_PROCID": "3", control.RANKS_ENV: "3"}  # an allocation with a spare node
    assert identity(srun)[1] is None and identity(srun | {"SLURM_PROCID": "2"})[1] == 2
    assert identity(srun | {"SLURMD_NODENAME": "node7"})[0] == "node7"  # the name scontrol drains
    assert identity(srun | {"SLURMD_NODENAME": "node7", "SLURM_NTASKS_PER_NODE": "2", "SLURM_LOCALID": "1"})[0] \
        == "node7/1"
    with pytest.raises(RuntimeError, match="under torchrun, start `clockfabric train coordinator`"):
        identity({"TORCHELASTIC_RUN_ID": "j", "RANK": "0"})


def test_a_script_run_without_its_coordinator_stops_in_one_line(monkeypatch):
    import torch

    from clockfabric.train.elastic import Elastic

    for var in (control.STORE_ENV, "RANK"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("TORCHELASTIC_RUN_ID", "j")  # torchrun, without the wrapper's job
    module = torch.nn.Linear(2, 2)
    with pytest.raises(SystemExit, match="^clockfabric: CLOCKFABRIC_TRAIN_STORE is not set: under torchrun"):
        Elastic(module, torch.optim.SGD(module.parameters(), lr=0.1), lambda step, rank: None)
    monkeypatch.setenv(control.STORE_ENV, "tcp://127.0.0.1")
    with pytest.raises(SystemExit, match="^clockfabric: .*give tcp://HOST:PORT"):
        Elastic(module, torch.optim.SGD(module.parameters(), lr=0.1), lambda step, rank: None)


def test_presence_tells_a_process_that_ended_and_refuses_what_is_not_a_name():
    served = presence.Presence("127.0.0.1")
    served.start()
    try:
        held = presence.announce(served.address, "h1")
        bad = presence.announce(served.address, "h2\x00; rm -rf")
        deadline = time.monotonic() + 5
        while "h1" not in served.named.values() and time.monotonic() < deadline:
            time.sleep(0.01)
        assert not served.gone("h1") and "h1" in served.named.values()
        held.close()  # as the kernel closes it when the process dies
        while not served.gone("h1") and time.monotonic() < deadline:
            time.sleep(0.01)
        assert served.gone("h1")
        assert bad.recv(1) == b""  # closed on it: not a name
        assert not served.gone("h2\x00; rm -rf")
    finally:
        served.stop()


def test_shutting_sockets_to_an_address_wakes_a_blocked_reader_and_spares_the_rest():
    server = socket.create_server(("127.0.0.77", 0))  # an address no other test uses
    port = server.getsockname()[1]
    client = socket.create_connection(("127.0.0.77", port))
    accepted, _ = server.accept()
    woke: list[bytes] = []
    reader = threading.Thread(target=lambda: woke.append(client.recv(10)), daemon=True)
    reader.start()
    time.sleep(0.1)
    assert shut_sockets_to({"10.9.9.9"}) == 0 and reader.is_alive()  # no socket to that address
    assert shut_sockets_to({"127.0.0.77"}, keep_ports={port}) == 0 and reader.is_alive()  # the board's: kept
    assert shut_sockets_to({"127.0.0.77"}) == 1
    reader.join(2)
    assert not reader.is_alive() and woke == [b""]  # woken with end of stream, not after a timeout
    for s in (client, accepted, server):
        s.close()
