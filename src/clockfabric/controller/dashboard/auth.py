"""Who may read the dashboard's data: the fleet token, or a read-only viewer token.

The controller's routes check the fleet token. A viewer token is accepted for reads only:
`ViewerAccess` lets a GET or HEAD that carries it through as if it carried the fleet token,
and refuses any other method with 403, so no route needs to know about viewers.

The live stream (EventSource, which cannot send a header) takes a `Tickets` ticket in its URL,
never a token: one use, for 30 s, asked for with the token in a header. A URL that a proxy logs
holds nothing that opens anything afterwards.
"""

from __future__ import annotations

import hmac
import secrets
import threading
import time

from starlette.types import ASGIApp, Receive, Scope, Send

READS = ("GET", "HEAD")


class Tokens:
    """The fleet token and, once `allow_viewer` sets it, the viewer token."""

    def __init__(self, fleet: str, viewer: str | None = None):
        self.fleet = fleet
        self.viewer = viewer

    def role(self, given: str) -> str | None:
        """"fleet", "viewer", or None for a token that is neither (compared in constant time)."""
        if hmac.compare_digest(given.encode(), self.fleet.encode()):
            return "fleet"
        if self.viewer and hmac.compare_digest(given.encode(), self.viewer.encode()):
            return "viewer"
        return None


class Tickets:
    """One-use, short-lived tickets that stand for a token where a URL must carry it."""

    TTL_S = 30.0
    MAX = 10_000  # live tickets held; past it the oldest go (a client asking in a loop cannot grow it)

    def __init__(self, clock=time.monotonic) -> None:
        self._clock = clock
        self._live: dict[str, float] = {}  # ticket -> expiry, oldest first
        self._lock = threading.Lock()

    def issue(self) -> str:
        ticket = secrets.token_urlsafe(24)
        with self._lock:
            self._live[ticket] = self._clock() + self.TTL_S
            while len(self._live) > self.MAX:
                del self._live[next(iter(self._live))]
        return ticket

    def redeem(self, ticket: str) -> bool:
        """Whether the ticket was live; it is spent either way."""
        with self._lock:
            expiry = self._live.pop(ticket, None)
            now = self._clock()
            for stale in [t for t, e in self._live.items() if e < now]:
                del self._live[stale]
        return expiry is not None and expiry >= now


def bearer(headers: list[tuple[bytes, bytes]]) -> str:
    """The token of an `Authorization: Bearer ...` header, or ""."""
    for name, value in headers:
        if name == b"authorization" and value.startswith(b"Bearer "):
            return value[len(b"Bearer "):].decode("latin-1")
    return ""


class ViewerAccess:
    """ASGI middleware: a viewer token reads as the fleet token does, and writes nothing."""

    def __init__(self, app: ASGIApp, tokens: Tokens):
        self.app = app
        self.tokens = tokens

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or self.tokens.role(bearer(scope["headers"])) != "viewer":
            await self.app(scope, receive, send)
            return
        if scope["method"] not in READS:
            await _refuse(send)
            return
        headers = [(k, v) for k, v in scope["headers"] if k != b"authorization"]
        headers.append((b"authorization", f"Bearer {self.tokens.fleet}".encode()))
        await self.app({**scope, "headers": headers}, receive, send)


async def _refuse(send: Send) -> None:
    body = b'{"detail":"the viewer token is read-only: writes need the fleet token"}'
    await send({"type": "http.response.start", "status": 403,
                "headers": [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())]})
    await send({"type": "http.response.body", "body": body})
