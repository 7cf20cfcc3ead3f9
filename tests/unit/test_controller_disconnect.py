"""A client that leaves mid-push (its body ends early) is counted by that reason, with one log
line and no traceback: on the ASGI app, and on a real server over a raw socket."""

from __future__ import annotations

import asyncio
import logging
import socket
import threading

import pytest
import uvicorn

from clockfabric.controller.app import create_app
from clockfabric.controller.fleet import Fleet
from clockfabric.controller.storage.sqlite import SqliteStorage
from tests.unit.credentials import as_host
from tests.waiting import wait_for

TOKEN = "t" * 32


@pytest.fixture
def app(tmp_path):
    storage = SqliteStorage(tmp_path / "c.db")
    yield create_app(Fleet(storage, hosts=["h0"], stale_s=60), TOKEN, tick_s=3600)
    storage.close()


def left(app) -> float:
    return app.state.operations.metrics.pushes_refused.labels("client_disconnect")._value.get()


def test_a_body_cut_short_is_counted_as_the_client_leaving_in_one_line(app, caplog):
    headers = [(k.lower().encode(), v.encode()) for k, v in as_host(TOKEN, "h0").items()]
    scope = {"type": "http", "asgi": {"version": "3.0"}, "http_version": "1.1", "method": "POST",
             "scheme": "http", "path": "/api/v1/push", "raw_path": b"/api/v1/push", "query_string": b"",
             "root_path": "", "client": ("127.0.0.1", 5000), "server": ("127.0.0.1", 80),
             "headers": [*headers, (b"content-type", b"application/json"), (b"content-length", b"1000")]}
    messages = [{"type": "http.request", "body": b'{"host": "h0", ', "more_body": True}, {"type": "http.disconnect"}]

    async def receive():
        return messages.pop(0) if messages else {"type": "http.disconnect"}

    async def send(_message):
        pass

    with caplog.at_level(logging.INFO):
        asyncio.run(app(scope, receive, send))
    assert left(app) == 1
    lines = [r for r in caplog.records if "left before its request body" in r.getMessage()]
    assert len(lines) == 1 and "/api/v1/push" in lines[0].getMessage()
    assert not any(r.exc_info for r in caplog.records) and "Traceback" not in caplog.text


def test_a_real_server_counts_a_client_that_hangs_up_mid_body(app, caplog, capfd):
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    port = sock.getsockname()[1]
    server = uvicorn.Server(uvicorn.Config(app, log_level="info", lifespan="off"))
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True)
    with caplog.at_level(logging.INFO):
        thread.start()
        try:
            wait_for("the server", lambda: server.started, timeout_s=10)
            auth = as_host(TOKEN, "h0")["Authorization"]
            with socket.create_connection(("127.0.0.1", port)) as c:
                c.sendall(f"POST /api/v1/push HTTP/1.1\r\nHost: x\r\nAuthorization: {auth}\r\n"
                          "Content-Type: application/json\r\nContent-Length: 100000\r\n\r\n{\"host\": ".encode())
            wait_for("the disconnect counted", lambda: left(app) == 1, timeout_s=10)
        finally:
            server.should_exit = True
            thread.join(10)
    assert len([r for r in caplog.records if "left before its request body" in r.getMessage()]) == 1
    assert "Traceback" not in caplog.text and "Traceback" not in capfd.readouterr().err
