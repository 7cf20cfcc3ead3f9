"""Who may read the dashboard's data: the fleet token, or a read-only viewer token.

The controller's routes check the fleet token. A viewer token is accepted for reads only:
`ViewerAccess` lets a GET or HEAD that carries it through as if it carried the fleet token,
and refuses any other method with 403, so no route needs to know about viewers.
"""

from __future__ import annotations

import hmac

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
