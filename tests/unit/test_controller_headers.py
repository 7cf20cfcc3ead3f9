"""Every controller answer carries the security headers: page, files, API (read, push, refusal),
probes and metrics."""

from __future__ import annotations

import pytest
from fastapi.testclient import TestClient

from clockfabric.controller.app import create_app
from clockfabric.controller.fleet import Fleet
from clockfabric.controller.headers import CSP
from clockfabric.controller.storage.sqlite import SqliteStorage
from tests.unit.credentials import as_host

TOKEN = "t" * 32
AUTH = {"Authorization": f"Bearer {TOKEN}"}
WANTED = {"content-security-policy": CSP, "x-content-type-options": "nosniff",
          "referrer-policy": "no-referrer", "x-frame-options": "DENY"}


@pytest.fixture
def client(tmp_path):
    storage = SqliteStorage(tmp_path / "c.db")
    with TestClient(create_app(Fleet(storage, hosts=["h0"], stale_s=60), TOKEN, tick_s=3600)) as c:
        yield c
    storage.close()


@pytest.mark.parametrize(("method", "path", "headers"), [
    ("GET", "/", {}), ("GET", "/dashboard/", {}), ("GET", "/dashboard/static/js/main.js", {}),
    ("GET", "/dashboard/static/dashboard.css", {}), ("GET", "/api/v1/fleet", AUTH),
    ("GET", "/api/v1/fleet", {}), ("GET", "/api/v1/nothing-here", AUTH), ("GET", "/healthz", {}),
    ("GET", "/readyz", {}), ("GET", "/metrics", AUTH), ("GET", "/metrics", {}),
    ("POST", "/api/v1/push", as_host(TOKEN, "h0")),
])
def test_every_answer_carries_the_security_headers(client, method, path, headers):
    r = client.request(method, path, headers=headers, follow_redirects=False,
                       json={"host": "h0", "boot": "b1"} if method == "POST" else None)
    for name, value in WANTED.items():
        assert r.headers.get(name) == value, (path, r.status_code, name)
    assert len(r.headers.get_list("content-security-policy")) == 1


def test_the_policy_allows_nothing_inline_nor_from_elsewhere():
    assert "unsafe" not in CSP and "*" not in CSP and "http" not in CSP
    assert "frame-ancestors 'none'" in CSP and "script-src 'self';" in CSP


def test_the_page_has_no_inline_script_handler_or_style():
    import re

    from clockfabric.controller.dashboard.routes import STATIC
    html = (STATIC / "index.html").read_text()
    assert not re.search(r"<script(?![^>]*\ssrc=)", html)
    assert not re.search(r"\s(on[a-z]+|style)\s*=", html, re.I)
    assert "<style" not in html
