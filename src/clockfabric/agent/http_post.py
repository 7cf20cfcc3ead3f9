"""Agent -> controller and series gate: HTTP POSTs, one connection kept open to each between updates.

The standard library's http.client, not httpx: an agent posts twice an update (its push, then its
samples), and httpx spends about 1.4 ms of CPU on each against 0.5 ms here, which at one update
a second is a sixth of the agent's 1% budget. A CA bundle is loaded only for an https URL
(verifying one costs the agent 6 MB of memory). Proxies from the environment are not used: an
agent talks to its own fleet's controller.
"""

from __future__ import annotations

import http.client
import json
import ssl
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

from clockfabric import wirejson
from clockfabric.errors import ClockfabricError

# the server closed a kept connection between two posts (an idle timeout): the post never reached it
STALE = (http.client.RemoteDisconnected, ConnectionResetError, BrokenPipeError)


class PostFailed(Exception):
    """No answer: the connection could not be made, broke, or timed out."""


@dataclass(frozen=True)
class Reply:
    status_code: int
    headers: dict[str, str]  # names in lower case
    content: bytes

    @property
    def text(self) -> str:
        return self.content.decode("utf-8", "replace")

    def json(self) -> Any:
        return wirejson.loads(self.content)


def encode(body: Any) -> bytes:
    """JSON as the controller takes it: compact, UTF-8, no NaN (which JSON has not)."""
    return json.dumps(body, ensure_ascii=False, separators=(",", ":"), allow_nan=False).encode()


class Poster:
    def __init__(self, headers: dict[str, str], timeout_s: float, verify: bool | ssl.SSLContext = True):
        """`headers`: sent with every post (the credential). `verify`: for https only, True for the
        system's CAs, an SSL context for a private CA's, False for none."""
        self.headers = headers
        self.timeout_s = timeout_s
        self.verify = verify
        self._tls: ssl.SSLContext | None = None
        self._connections: dict[tuple[str, str, int], http.client.HTTPConnection] = {}

    def scrub(self, text: str) -> str:
        """`text` (a reply to be logged) without the credential this poster sends: a server may
        quote the token it refuses (vmauth does)."""
        for value in self.headers.values():
            secret = value.rsplit(" ", 1)[-1]
            if len(secret) >= 16:
                text = text.replace(secret, "<credential>")
        return text

    def post(self, url: str, body: bytes, content_type: str = "application/json") -> Reply:
        parts = urlsplit(url)
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise ClockfabricError(f"{url!r} is not an http(s)://HOST:PORT URL")
        where = (parts.scheme, parts.hostname, parts.port or (443 if parts.scheme == "https" else 80))
        target = parts.path + (f"?{parts.query}" if parts.query else "")
        headers = {**self.headers, "Content-Type": content_type}
        while True:
            kept = where in self._connections
            conn = self._connections.get(where) or self._connect(*where)
            try:
                conn.request("POST", target, body=body, headers=headers)
                answer = conn.getresponse()
                content = answer.read()
            except STALE as e:
                self._drop(where)
                if kept:
                    continue  # once more, on a new connection
                raise PostFailed(f"{type(e).__name__}: {e}") from None
            except (OSError, http.client.HTTPException) as e:
                self._drop(where)
                raise PostFailed(f"{type(e).__name__}: {e}") from None
            if answer.will_close:
                self._drop(where)
            return Reply(answer.status, {k.lower(): v for k, v in answer.getheaders()}, content)

    def _connect(self, scheme: str, host: str, port: int) -> http.client.HTTPConnection:
        if scheme == "https":
            conn: http.client.HTTPConnection = http.client.HTTPSConnection(host, port, timeout=self.timeout_s,
                                                                          context=self._context())
        else:
            conn = http.client.HTTPConnection(host, port, timeout=self.timeout_s)
        self._connections[(scheme, host, port)] = conn
        return conn

    def _context(self) -> ssl.SSLContext:
        if self._tls is None:
            if isinstance(self.verify, ssl.SSLContext):
                self._tls = self.verify
            elif self.verify:
                self._tls = ssl.create_default_context()
            else:
                self._tls = ssl._create_unverified_context()  # noqa: S323 - the operator said not to verify
        return self._tls

    def _drop(self, where: tuple[str, str, int]) -> None:
        conn = self._connections.pop(where, None)
        if conn is not None:
            conn.close()

    def close(self) -> None:
        for where in list(self._connections):
            self._drop(where)
