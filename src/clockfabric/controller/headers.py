"""Security headers on every controller response, the dashboard's and the API's alike.

The dashboard loads only its own files (no CDN, no inline script or style), so the policy can be
strict: whatever an agent's or a report's text manages to put into the page cannot run or load.
"""

from __future__ import annotations

CSP = ("default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' data:; connect-src 'self'; "
       "frame-ancestors 'none'; base-uri 'none'; form-action 'self'")
HEADERS = {
    "content-security-policy": CSP,
    "x-content-type-options": "nosniff",
    "referrer-policy": "no-referrer",
    "x-frame-options": "DENY",
}
_RAW = [(k.encode(), v.encode()) for k, v in HEADERS.items()]


class SecurityHeaders:
    """ASGI middleware (not BaseHTTPMiddleware: that would buffer the live event stream)."""

    def __init__(self, app) -> None:
        self.app = app

    async def __call__(self, scope, receive, send) -> None:
        if scope["type"] != "http":
            return await self.app(scope, receive, send)

        async def sending(message) -> None:
            if message["type"] == "http.response.start":
                present = {k.lower() for k, _ in message.get("headers", [])}
                message = {**message, "headers": [*message.get("headers", []),
                                                  *((k, v) for k, v in _RAW if k not in present)]}
            await send(message)

        await self.app(scope, receive, sending)
