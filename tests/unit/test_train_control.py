"""The job folder's protocol, and fencing: a reader blocked on a lost peer wakes at once."""

import socket
import threading
import time

import pytest

from clockfabric.train import control
from clockfabric.train.heartbeat import shut_sockets_to


def gen(number, state=control.RUNNING):
    return control.Generation(number, state, ["h0", "h1"], ["10.0.0.1:1", "10.0.0.2:1"], f"/x/store.{number}")


def test_a_survivor_waits_through_a_paused_generation_for_the_next_running_one(tmp_path):
    control.write_generation(tmp_path, gen(0))
    assert control.read_generation(tmp_path) == gen(0) and gen(0).world == 2
    with pytest.raises(TimeoutError, match="no spare came"):
        control.wait_generation(tmp_path, after=0, timeout_s=0.1)
    control.write_generation(tmp_path, gen(1, control.PAUSED))
    with pytest.raises(TimeoutError):
        control.wait_generation(tmp_path, after=0, timeout_s=0.1)
    threading.Timer(0.2, control.write_generation, (tmp_path, gen(2))).start()
    assert control.wait_generation(tmp_path, after=0, timeout_s=5).number == 2


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
    assert shut_sockets_to({"127.0.0.77"}) == 1
    reader.join(2)
    assert not reader.is_alive() and woke == [b""]  # woken with end of stream, not after a timeout
    for s in (client, accepted, server):
        s.close()


def test_members_form_once_all_are_ready_and_move_on_if_one_is_lost_first(tmp_path):
    control.write_generation(tmp_path, gen(1))
    control.mark_ready(tmp_path, 1, 0)
    with pytest.raises(TimeoutError, match="did not all arrive"):
        control.wait_ready(tmp_path, gen(1), timeout_s=0.1)
    control.write_generation(tmp_path, gen(2, control.PAUSED))  # the missing member was lost, no spare yet
    with pytest.raises(TimeoutError):
        control.wait_ready(tmp_path, gen(1), timeout_s=0.1)
    threading.Timer(0.2, control.write_generation, (tmp_path, gen(3))).start()
    assert control.wait_ready(tmp_path, gen(1), timeout_s=5).number == 3
    control.mark_ready(tmp_path, 3, 1)
    control.mark_ready(tmp_path, 3, 0)
    assert control.wait_ready(tmp_path, gen(3), timeout_s=0.5) is None
