"""No row the API accepts breaks a view: pushes (their events with each declared kind's detail, and
any other kind's any detail), and audits, drawn from the door's own schemas, are stored through a
real controller, and every dashboard view then renders in Chromium without "could not load this
view" and without a script error. The page goes live on its stream by ticket, and the token is
nowhere in the controller's log."""

from __future__ import annotations

import subprocess
import sys
import time

import httpx
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from clockfabric.bench import chromium
from clockfabric.controller.schemas import AuditIn, EventIn, Push, detail_model
from tests.ports import controller_port
from tests.unit.credentials import as_host
from tests.unit.schema_strategies import JSON, from_schema
from tests.waiting import wait_for

webdriver = pytest.importorskip("selenium.webdriver", reason="selenium is not installed (pip install -e '.[test]')")
pytestmark = pytest.mark.skipif(not chromium.available(),
                                reason="needs Debian's chromium and chromium-driver (scripts/setup.sh)")
from selenium.webdriver.common.by import By  # noqa: E402

TOKEN = "views-hold-any-row-token-0123456789"
VIEWS = ("fleet", "fabric", "owd", "events", "audit")
KINDS = ("link_down", "link_up", "failover_moved", "failover_restored", "agent_start", "clock_step", "note")
AUDITS = from_schema(AuditIn.model_json_schema())
AGE_NS = 3_000 * 10**9


@st.composite
def events(draw) -> dict:
    """An event the schema allows, its detail as its kind declares (any detail for other kinds)."""
    event = draw(from_schema(EventIn.model_json_schema()))
    event["kind"] = draw(st.sampled_from(KINDS) | st.just(event["kind"]))
    # mostly an age within the hour the views show, made a time when posted (a strategy reads no clock)
    event["t_ns"] = draw(st.integers(0, AGE_NS) | st.just(event["t_ns"]))
    model = detail_model(event["kind"])
    event["detail"] = draw(from_schema(model.model_json_schema()) if model else
                           st.dictionaries(st.sampled_from(["reason", "planes", "n", "flow"]), JSON, max_size=3))
    return event


@st.composite
def pushes(draw) -> dict:
    """A push the schema allows, with at least one event."""
    push = draw(from_schema(Push.model_json_schema()))
    push["events"] = draw(st.lists(events(), min_size=1, max_size=4))
    return push


@pytest.fixture(scope="module")
def controller(tmp_path_factory):
    folder = tmp_path_factory.mktemp("controller")
    (folder / "token").write_text(TOKEN + "\n")
    (folder / "token").chmod(0o600)
    with httpx.Client() as probe:
        port = controller_port()
        url = f"http://127.0.0.1:{port}"
        proc = subprocess.Popen([sys.executable, "-m", "clockfabric.cli", "controller", "--db", str(folder / "c.db"),
                                 "--listen", f"127.0.0.1:{port}", "--token-file", str(folder / "token")],
                                stdout=subprocess.DEVNULL, stderr=open(folder / "log", "w"))  # noqa: SIM115
        try:
            wait_for("the controller", lambda: _answers(probe, url), timeout_s=60)
            yield url
        finally:
            proc.terminate()
            proc.wait(30)
    log = (folder / "log").read_text()
    assert TOKEN not in log


@pytest.fixture(scope="module")
def browser(controller):
    driver = chromium.driver()
    try:
        driver.get(f"{controller}/dashboard/")
        driver.find_element(By.ID, "token").send_keys(TOKEN)
        driver.find_element(By.CSS_SELECTOR, "#login button").click()
        wait_for("live", lambda: driver.find_element(By.ID, "status").text == "live", timeout_s=10)
        yield driver
    finally:
        driver.quit()


@settings(max_examples=4, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(st.lists(pushes(), min_size=6, max_size=6), st.lists(AUDITS, min_size=2, max_size=2))
def test_every_view_renders_whatever_rows_were_accepted(controller, browser, drawn_pushes, audits):
    accepted = 0
    with httpx.Client(base_url=controller, timeout=30) as client:
        now = time.time_ns()
        for push in drawn_pushes:
            for event in push["events"]:
                event["t_ns"] = now - event["t_ns"] if event["t_ns"] <= AGE_NS else event["t_ns"]
            r = client.post("/api/v1/push", json=push, headers=as_host(TOKEN, push["host"]))
            assert r.status_code in (200, 422), r.text  # refused whole, or stored
            accepted += r.status_code == 200
        for audit in audits:
            r = client.post("/api/v1/audits", json=audit, headers={"Authorization": f"Bearer {TOKEN}"})
            assert r.status_code in (201, 422), r.text
    browser.get_log("browser")  # what came before these rows
    for view in VIEWS:
        clicked = browser.execute_script("return Date.now()")
        browser.find_element(By.CSS_SELECTOR, f'#tabs [data-view="{view}"]').click()
        wait_for(f"the {view} view rendered, or refused", lambda v=view, t=clicked: browser.execute_script(
            "const e = document.querySelector('#view');"
            "return (e.dataset.view === arguments[0] && Number(e.dataset.rendered) >= arguments[1])"
            " || Boolean(e.querySelector('.state-down'))", v, t), timeout_s=10)
        time.sleep(0.3)  # a view's later fetches (a tree, a chart) land
        broken = browser.execute_script("return [...document.querySelectorAll('#view .state-down')]"
                                        ".map((e) => e.textContent).filter((t) => t.includes('could not load'))")
        assert not broken, (view, broken, drawn_pushes, audits)
    errors = [e["message"] for e in browser.get_log("browser")  # an API's answer (a 404: no topology) is not one
              if e["level"] == "SEVERE" and "Failed to load resource" not in e["message"]]
    assert not errors, (errors, drawn_pushes, audits)
    assert accepted, "no push was accepted: the strategy draws nothing the views would show"


def _answers(client: httpx.Client, url: str) -> bool:
    try:
        return client.get(f"{url}/healthz").status_code == 200
    except httpx.HTTPError:
        return False
