"""A member's heartbeats go on while it recovers: fencing a lost host shuts that host's TCP
sockets only, and a beat that fails never ends the thread (the coordinator would judge the
silence a frozen process)."""

import socket
import time

from clockfabric.train import control
from clockfabric.train.heartbeat import Heartbeat, shut_sockets_to
from tests.fakes.train_job import file_board

LOST = "127.0.0.9:9"


def board(tmp_path) -> control.Board:
    return file_board(tmp_path)


def board_with_a_lost_host(board: control.Board, beat: str) -> control.Board:
    board.write_generation(control.Generation(1, control.RUNNING, ["h0", "h1"], [beat, LOST], lost=[LOST]))
    return board


def reports(board: control.Board, name: str, seconds: float) -> list[dict]:
    """The heartbeat's reports, read every 50 ms for `seconds`."""
    seen = []
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        report = board.report(name)
        if report and (not seen or report["time"] != seen[-1]["time"]):
            seen.append(report)
        time.sleep(0.05)
    return seen


def test_shut_sockets_to_shuts_tcp_to_the_address_and_leaves_unix_sockets_alone():
    server = socket.create_server(("127.0.0.1", 0))
    client = socket.create_connection(server.getsockname())
    accepted, _ = server.accept()
    near, far = socket.socketpair()  # a Unix socket: its peer name is '', not an address
    try:
        assert shut_sockets_to({"127.0.0.1"}) >= 2  # both ends of the TCP connection
        accepted.settimeout(2)
        assert accepted.recv(1) == b""  # woken: the connection is shut, not left to time out
        near.sendall(b"x")
        assert far.recv(1) == b"x"
    finally:
        for s in (server, client, accepted, near, far):
            s.close()


def connection():
    server = socket.create_server(("127.0.0.1", 0))
    client = socket.create_connection(server.getsockname())
    accepted, _ = server.accept()
    server.close()
    accepted.settimeout(2)
    return client, accepted


def test_a_loss_in_a_newer_generation_shuts_the_whole_old_group_but_never_a_newer_group(tmp_path):
    beat = Heartbeat(board(tmp_path), "h0", "127.0.0.1:0")
    old_client, old_accepted = connection()
    try:
        # in generation 0's group with a peer at 127.0.0.1; generation 1 says 127.0.0.9 is lost: the
        # peer may be waiting on this process a step behind, so its connection is shut too
        beat.joined(0, {"127.0.0.1"})
        beat.fence(1, {"127.0.0.9"})
        assert old_accepted.recv(1) == b""
    finally:
        old_client.close()
        old_accepted.close()
    new_client, new_accepted = connection()
    try:
        # the fence seen late, once generation 1's group formed: that group is left alone
        beat.joined(1, {"127.0.0.1"})
        beat.fence(1, {"127.0.0.8"})
        new_client.sendall(b"x")
        assert new_accepted.recv(1) == b"x"
        beat.left()  # between groups: only the lost hosts' sockets
        beat.fence(2, {"127.0.0.7"})
        new_client.sendall(b"y")
        assert new_accepted.recv(1) == b"y"
        assert beat.fenced == {"127.0.0.9", "127.0.0.8", "127.0.0.7"}
    finally:
        new_client.close()
        new_accepted.close()
        beat.sock.close()


def test_fencing_with_a_unix_socket_open_keeps_the_heartbeat_going(tmp_path):
    near, far = socket.socketpair()
    jobs = board(tmp_path)
    beat = Heartbeat(jobs, "h0", "127.0.0.1:0", interval_s=0.05)
    board_with_a_lost_host(jobs, beat.beat)
    beat.start()
    try:
        seen = reports(jobs, "h0", 1.0)
    finally:
        beat.stop()
        near.close()
        far.close()
    assert beat.fenced == {"127.0.0.9"}
    assert len(seen) >= 5 and seen[-1]["error"] is None, seen[-3:]
    assert time.time() - seen[-1]["time"] < 1.0


def test_a_failing_beat_is_reported_and_the_beats_go_on(tmp_path):
    jobs = board(tmp_path)
    beat = Heartbeat(jobs, "h0", "127.0.0.1:0", interval_s=0.05)
    board_with_a_lost_host(jobs, beat.beat)

    def broken(number, addresses):
        raise RuntimeError("fence failed")

    beat.fence = broken  # type: ignore[method-assign]
    beat.start()
    try:
        seen = reports(jobs, "h0", 1.0)
    finally:
        beat.stop()
    assert len(seen) >= 5, seen  # still beating after many failed beats
    assert seen[-1]["error"] == "RuntimeError: fence failed"
