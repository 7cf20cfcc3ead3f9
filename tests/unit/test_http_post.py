"""The agent's poster keeps one connection open to a server across posts, and opens a new one when
the server closed the kept one between posts (an idle timeout). A real HTTP/1.1 server on loopback."""

from __future__ import annotations

import itertools
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from clockfabric.agent.http_post import Poster, PostFailed, encode


class KeepAlive(BaseHTTPRequestHandler):
    """HTTP/1.1: answers on the same connection, with the connection's number, until told to hang
    up. Numbered, not told apart by the client's port: the kernel may give a new connection the
    port of one just closed."""

    protocol_version = "HTTP/1.1"

    def setup(self):
        super().setup()
        self.connection_number = next(self.server.connections)  # one handler a connection

    def do_POST(self):  # noqa: N802 - the handler's name
        hang_up = self.server.hang_up  # read before answering: the client may change it once answered
        body = self.rfile.read(int(self.headers["Content-Length"]))
        self.server.seen.append((self.connection_number, self.headers["Authorization"], body))
        answer = encode({"connection": self.connection_number})
        self.send_response(200)
        self.send_header("Content-Length", str(len(answer)))
        self.end_headers()
        self.wfile.write(answer)
        if hang_up:  # closed after answering, as a server's idle timeout does later
            self.close_connection = True

    def log_message(self, *_args):
        pass


@pytest.fixture
def server():
    srv = ThreadingHTTPServer(("127.0.0.1", 0), KeepAlive)
    srv.seen, srv.hang_up, srv.connections = [], False, itertools.count()
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    yield srv
    srv.shutdown()
    srv.server_close()


def test_posts_share_one_connection(server):
    poster = Poster({"Authorization": "Bearer x"}, 5.0)
    url = f"http://127.0.0.1:{server.server_port}/api/v1/push"
    replies = [poster.post(url, encode({"n": n})) for n in range(3)]
    poster.close()
    assert [r.status_code for r in replies] == [200, 200, 200]
    assert len({connection for connection, _, _ in server.seen}) == 1, "a new connection per post"
    assert [body for _, _, body in server.seen] == [b'{"n":0}', b'{"n":1}', b'{"n":2}']
    assert {auth for _, auth, _ in server.seen} == {"Bearer x"}
    assert replies[0].json() == {"connection": server.seen[0][0]}


def test_a_connection_the_server_closed_is_opened_again(server):
    poster = Poster({}, 5.0)
    url = f"http://127.0.0.1:{server.server_port}/"
    server.hang_up = True
    first = poster.post(url, b"{}")
    server.hang_up = False
    second = poster.post(url, b"{}")  # the kept connection is dead: posted again on a new one
    poster.close()
    assert first.status_code == second.status_code == 200
    assert len(server.seen) == 2 and server.seen[0][0] != server.seen[1][0]


def test_no_server_is_a_failed_post():
    srv = ThreadingHTTPServer(("127.0.0.1", 0), KeepAlive)
    port = srv.server_port
    srv.server_close()  # the port is free: nothing listens
    with pytest.raises(PostFailed, match="ConnectionRefused"):
        Poster({}, 1.0).post(f"http://127.0.0.1:{port}/", b"{}")
