"""A child the controller starts (the engine, its gate, vmalert) on a port it chose: where another
process binds that port first, the child starts again on a new one instead of failing."""

import socket
import sys

import pytest

from clockfabric.controller.series import child as child_module
from clockfabric.controller.series.child import Child
from clockfabric.errors import ClockfabricError


def server(directory):
    """A static HTTP server whose /health answers 200, on the port given."""
    (directory / "health").write_text("ok")
    return lambda port: [sys.executable, "-m", "http.server", "--bind", "127.0.0.1", "--directory", str(directory),
                         str(port)]


@pytest.fixture
def taken():
    """A port another process holds, listening."""
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    sock.listen()
    yield sock.getsockname()[1]
    sock.close()


def test_a_chosen_port_taken_before_the_child_binds_it_is_chosen_again(tmp_path, taken, monkeypatch):
    ports = iter([taken])
    real = child_module.free_port
    monkeypatch.setattr(child_module, "free_port", lambda address: next(ports, None) or real(address))
    c = Child("web", server(tmp_path), tmp_path / "web.log")
    assert c.port == taken
    c.start()
    try:
        assert c.port != taken and c.healthy()
    finally:
        c.stop()


def test_a_port_given_and_taken_fails_in_one_line(tmp_path, taken):
    c = Child("web", server(tmp_path), tmp_path / "web.log", port=taken)
    with pytest.raises(ClockfabricError, match="web did not start on http://127.0.0.1:.*in use"):
        c.start()
