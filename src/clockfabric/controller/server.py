"""Run the controller: storage, fleet, detectors and alerts, behind uvicorn."""

from __future__ import annotations

import gc
import logging
import ssl
import threading
from dataclasses import dataclass
from pathlib import Path

import uvicorn

from clockfabric.controller.app import create_app
from clockfabric.controller.dashboard.routes import allow_viewer
from clockfabric.controller.fleet import Fleet
from clockfabric.errors import ClockfabricError

log = logging.getLogger(__name__)
PORT = 7400
GC_YOUNG = 50_000  # allocations between the cyclic collector's youngest passes (CPython's default: 700)


@dataclass
class Listen:
    host: str = "127.0.0.1"  # loopback unless told otherwise
    port: int = PORT
    tls_cert: Path | None = None
    tls_key: Path | None = None

    @property
    def url(self) -> str:
        return f"{'https' if self.tls_cert else 'http'}://{self.host}:{self.port}"

    def check(self) -> None:
        """Refuse half a TLS config, or a certificate and key that do not load, in one line (before
        anything is opened: uvicorn would load them only when it starts, with a traceback)."""
        if bool(self.tls_cert) != bool(self.tls_key):
            raise ClockfabricError("TLS needs both --tls-cert and --tls-key")
        if self.tls_cert:
            try:
                ssl.create_default_context(ssl.Purpose.CLIENT_AUTH).load_cert_chain(self.tls_cert, self.tls_key)
            except (OSError, ssl.SSLError) as e:
                raise ClockfabricError(f"cannot load --tls-cert {self.tls_cert} with --tls-key {self.tls_key}: "
                                       f"{e.strerror or e}; give a PEM certificate and its private key") from None


def server(fleet: Fleet, token: str, listen: Listen, viewer_token: str | None = None) -> uvicorn.Server:
    """`viewer_token`: also accepted, for reads only (the dashboard's read-only access)."""
    listen.check()
    # a route parses engine answers of tens of thousands of dicts, which die by reference count
    # once read: at CPython's default the collector ran dozens of times a parse, promoted the
    # half-built answer, and every second or third `job why` scanned the whole heap (+50 ms at
    # 2,000 hosts). The process is the controller's: this is its setting
    gc.set_threshold(GC_YOUNG, *gc.get_threshold()[1:])
    app = create_app(fleet, token)
    allow_viewer(app, viewer_token)
    # an open dashboard's live stream never ends by itself: do not wait on it past a few seconds at exit
    # log_config=None: uvicorn's lines go to the root logger's handler, in the format it was set up with
    config = uvicorn.Config(app, host=listen.host, port=listen.port, log_level="warning", log_config=None,
                            timeout_graceful_shutdown=3,
                            ssl_certfile=str(listen.tls_cert) if listen.tls_cert else None,
                            ssl_keyfile=str(listen.tls_key) if listen.tls_key else None)
    return uvicorn.Server(config)


def start_in_thread(srv: uvicorn.Server, timeout_s: float = 10.0) -> threading.Thread:
    """For tests and `monitor`: serve from a thread, once it is listening."""
    thread = threading.Thread(target=srv.run, name="controller-http", daemon=True)
    thread.start()
    for _ in range(int(timeout_s / 0.05)):
        if srv.started or not thread.is_alive():
            break
        threading.Event().wait(0.05)
    if not srv.started:
        raise ClockfabricError(f"the controller did not start listening on {srv.config.host}:{srv.config.port}")
    return thread
