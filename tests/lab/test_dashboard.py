"""The dashboard in a real browser (Debian's headless Chromium, driven by Selenium) against a
real controller fed by a real lab: every view renders real content, a link set down turns red
on the map within 2 s and its event reaches the timeline, two swapped cables raise the drift
alert on the page, a job's view shows its flow, series, verdict and links on the map, and the
browser logs no error.

The tests share one lab and fleet (each has a browser of its own) and put back what they change;
the cable swap comes last, as hosts whose cables were swapped and put back may stay stale a while.

CLOCKFABRIC_SCREENSHOTS=DIR also saves a 1280x800 screenshot of each view there (docs/img)."""

from __future__ import annotations

import contextlib
import os
import socket
import sys
import threading
import time
from pathlib import Path

import pytest

from clockfabric.audit.model import CheckResult, Finding, Report, Verdict
from clockfabric.bench import chromium
from clockfabric.controller.rootcause_verdict import VERDICTS
from clockfabric.controller.token import read_token
from clockfabric.lab import impair, netns
from clockfabric.lab.monitoring import LabFleet
from clockfabric.lab.process import stop
from clockfabric.topology import Port, leafspine
from tests.lab.test_workload import RECEIVER, SENDER
from tests.waiting import wait_for

webdriver = pytest.importorskip("selenium.webdriver", reason="selenium is not installed (pip install -e '.[test]')")
pytestmark = pytest.mark.skipif(not chromium.available(),
                                reason="needs Debian's chromium and chromium-driver (scripts/setup.sh)")
from selenium.webdriver.common.by import By  # noqa: E402

VIEWS = ("fleet", "fabric", "owd", "events", "audit")


class Forward:
    """A port on the root namespace's loopback that leads to ADDRESS:PORT inside a lab host's
    namespace, where the controller listens: the browser runs outside the lab."""

    def __init__(self, namespace: str, address: str, port: int):
        self.namespace, self.target = namespace, (address, port)
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.port = self.listener.getsockname()[1]
        self.down = False
        self.open: set[socket.socket] = set()
        threading.Thread(target=self._accept, daemon=True).start()

    def cut(self) -> None:
        """Drop every connection and close each new one at once: as the page sees it, the
        controller is gone (restarting) until `mend`."""
        self.down = True
        for s in list(self.open):
            with contextlib.suppress(OSError):
                s.shutdown(socket.SHUT_RDWR)

    def mend(self) -> None:
        self.down = False

    def _accept(self) -> None:
        with contextlib.suppress(OSError):
            while True:
                client, _ = self.listener.accept()
                if self.down:
                    client.close()
                    continue
                with netns.entered(self.namespace):  # the socket stays in the namespace it was made in
                    upstream = socket.create_connection(self.target, timeout=5)
                upstream.settimeout(None)
                self.open |= {client, upstream}
                for a, b in ((client, upstream), (upstream, client)):
                    threading.Thread(target=self._pump, args=(a, b), daemon=True).start()

    def _pump(self, src: socket.socket, dst: socket.socket) -> None:
        with contextlib.suppress(OSError):
            while data := src.recv(65536):
                dst.sendall(data)
        for s in (src, dst):
            with contextlib.suppress(OSError):
                s.shutdown(socket.SHUT_RDWR)
            self.open.discard(s)

    def close(self) -> None:
        self.listener.close()


@pytest.fixture(scope="module")
def fleet(make_module_lab):
    lab = make_module_lab(leafspine(4, 2, 2, host_rate="200mbit"))
    fleet = LabFleet(lab, peers=3)
    fleet.start()
    try:
        assert fleet.wait_pushing() == len(lab.topology.hosts) + len(lab.topology.switches)
        yield fleet
    finally:
        fleet.stop()


@pytest.fixture
def browser():
    driver = chromium.driver()
    try:
        yield driver
    finally:
        driver.quit()


def store_audit(fleet: LabFleet) -> None:
    """An audit report with one failing NIC, as `clockfabric audit --controller` posts it."""
    failing = Finding(Verdict.FAIL, "no carrier", host="h2", device="eth0")
    report = Report(fleet=f"lab {fleet.lab.name}", hosts=sorted(fleet.lab.topology.hosts), started_ns=time.time_ns(),
                    seconds=1.0, results=[
                        CheckResult("backend.nic_active", "backend", "NICs active", Verdict.FAIL, "1 of 4 NICs down",
                                    [failing], fix="reseat the cable of h2:eth0"),
                        CheckResult("clock.sync", "clocks", "Clocks synced", Verdict.PASS, "4 of 4 synced", [])])
    fleet.api("/api/v1/audits", body=report.as_dict())


def show(driver, view: str) -> None:
    driver.find_element(By.CSS_SELECTOR, f'#tabs [data-view="{view}"]').click()
    wait_for(f"the {view} view", lambda: attrs(driver, "#view", "data-view") == [view], timeout_s=5)


# read and click through scripts, in one step each: the page re-renders a view as it changes,
# and an element found a moment earlier may be gone
def texts(driver, css: str) -> list[str]:
    return driver.execute_script("return [...document.querySelectorAll(arguments[0])]"
                                 ".map((e) => e.textContent.replace(/\\s+/g, ' ').trim())", css)


def attrs(driver, css: str, name: str) -> list[str]:
    return driver.execute_script("return [...document.querySelectorAll(arguments[0])]"
                                 ".map((e) => e.getAttribute(arguments[1]))", css, name)


def lines(driver, css: str) -> dict[str, int]:
    """The series the charts under `css` draw (their legend rows), each with how many readings it has."""
    return driver.execute_script("return Object.fromEntries([...document.querySelectorAll(arguments[0] + "
                                 "' tr[data-series]')].map((r) => [r.dataset.series, Number(r.dataset.points)]))", css)


def unnamed_controls(driver) -> list[str]:
    """The page's controls (buttons, fields, anything with a button's role) that a screen reader
    could not name: no aria-label, no <label for> and no text."""
    return driver.execute_script(
        "return [...document.querySelectorAll('button, select, input, textarea, [role=button], a[href]')]"
        ".filter((e) => !(e.getAttribute('aria-label') || e.textContent.trim() || e.getAttribute('title')"
        " || (e.id && document.querySelector(`label[for=\"${e.id}\"]`))))"
        ".map((e) => e.outerHTML.slice(0, 160))")


def click(driver, css: str) -> None:
    driver.execute_script("document.querySelector(arguments[0]).dispatchEvent("
                          "new MouseEvent('click', {bubbles: true}))", css)


def choose(driver, css: str, value: str) -> None:
    """Picks `value` in the <select> at `css` as a user would: the option set, then its change event."""
    driver.execute_script("const s = document.querySelector(arguments[0]); s.value = arguments[1];"
                          "s.dispatchEvent(new Event('change', {bubbles: true}))", css, value)


def test_every_view_renders_and_a_link_set_down_turns_red_within_2_s(fleet, browser):
    lab = fleet.lab
    store_audit(fleet)
    forward = Forward(lab.ns(fleet.host), str(lab.topology.hosts[fleet.host].address), fleet.PORT)
    try:
        browser.get(f"http://127.0.0.1:{forward.port}/dashboard/")
        assert browser.find_element(By.ID, "login-dialog").is_displayed()  # nothing shown without a token
        browser.find_element(By.ID, "token").send_keys("wrong-token-but-long-enough")
        browser.find_element(By.CSS_SELECTOR, "#login button").click()
        wait_for("the refusal", lambda: "refused" in browser.find_element(By.ID, "login-reason").text, timeout_s=5)
        refused = [e["message"] for e in browser.get_log("browser") if e["level"] == "SEVERE"]  # and cleared
        assert all("401" in m for m in refused), refused  # the wrong token's answer, and nothing else
        browser.find_element(By.ID, "token").clear()
        browser.find_element(By.ID, "token").send_keys(read_token(fleet.token_file))
        browser.find_element(By.CSS_SELECTOR, "#login button").click()
        wait_for("live", lambda: browser.find_element(By.ID, "status").text == "live", timeout_s=10)

        show(browser, "fleet")
        hosts = wait_for("hosts pushing", lambda: len(rows := texts(browser, 'table[aria-label="Hosts"] tbody tr')) == 4
                         and rows, timeout_s=10)
        assert all(row.startswith(f"h{i}pushing") for i, row in enumerate(hosts)), hosts
        assert len(texts(browser, 'table[aria-label="Switches"] tbody tr')) == 4
        show(browser, "owd")
        wait_for("the heatmap", lambda: len(texts(browser, "td[data-pair]")) >= 4, timeout_s=30, every_s=0.5)
        choose(browser, "#owd-window", "1m")
        click(browser, "#owd-over-floor")  # the element on the page now: choosing the window re-rendered the view
        wait_for("the excess over floor over a minute", lambda: "excess over floor" in " ".join(texts(
            browser, "#view .toolbar .muted")) and len(texts(browser, "td[data-pair]")) >= 4, timeout_s=10)
        click(browser, "td[data-pair]")
        # both directions, each a line (two readings or more) on some path; a series is "FROM → TO PATH"
        wait_for("a pair's series, both directions", lambda: len(
            {n.split(" ")[0] for n, points in lines(browser, "#owd-pair").items() if points >= 2}) == 2, timeout_s=15)
        show(browser, "audit")
        tree = wait_for("the audit tree", lambda: texts(browser, "#audit-tree .finding"), timeout_s=5)
        assert tree == ["fail h2:eth0: no carrier"], tree
        # read in one script: the view may re-render (a stream change) between a find and its text
        assert "reseat the cable" in " ".join(texts(browser, "#audit-tree")), texts(browser, "#audit-tree")
        nics = texts(browser, 'table[aria-label="Back-end NICs"] tbody td')
        assert nics == ["fail", "h2", "eth0", "–", "fail", "–", "–", "–"], nics  # active failed; the others did not run
        assert "clockfabric audit" in " ".join(texts(browser, "#audit-how"))
        show(browser, "fabric")
        wait_for("every link drawn", lambda: len(attrs(browser, "line.link", "data-link")) == len(lab.topology.links),
                 timeout_s=5)
        wait_for("every link up", lambda: set(attrs(browser, "line.link", "data-state")) == {"up"}, timeout_s=10)
        for view in VIEWS:
            show(browser, view)
            assert texts(browser, "#view > *"), view  # something rendered
            assert not unnamed_controls(browser), (view, unnamed_controls(browser))
        show(browser, "fabric")
        _screenshots(browser)

        link = lab.topology.find_link("leaf0", "spine1")
        t0 = time.monotonic()
        impair.set_link(lab, link, up=False)
        try:
            line = f'line[data-link="{link.name}"]'
            wait_for("the link red on the map", lambda: attrs(browser, line, "data-state") == ["down"], timeout_s=5)
            red_after_s = time.monotonic() - t0
            print(f"red on the map {red_after_s * 1e3:.0f} ms after the link went down")
            assert red_after_s < 2.0
            click(browser, line)
            wait_for("the link's events", lambda: "link_down" in attrs(browser, "[data-details] tr", "data-kind"),
                     timeout_s=5)
            assert any(h.startswith("Flows crossing it") for h in texts(browser, "[data-details] h2"))
            show(browser, "events")
            wait_for("link_down in the timeline", lambda: texts(browser, '#timeline tr[data-kind="link_down"]'),
                     timeout_s=5)
            assert any(h.startswith("Failover decisions in the last hour") for h in texts(browser, "#view h2"))
        finally:
            impair.set_link(lab, link, up=True)
        errors = [e for e in browser.get_log("browser") if e["level"] == "SEVERE"]
        assert not errors, errors

        forward.cut()
        wait_for("the page saying the controller is unreachable", lambda: "unreachable: reconnecting" in
                 browser.find_element(By.ID, "status").text, timeout_s=10)
        forward.mend()
        wait_for("live again by itself", lambda: browser.find_element(By.ID, "status").text == "live", timeout_s=10)
        show(browser, "fleet")  # and the views load again
        wait_for("hosts again", lambda: len(texts(browser, 'table[aria-label="Hosts"] tbody tr')) == 4, timeout_s=10)
    finally:
        forward.close()


def _screenshots(driver) -> None:
    where = os.environ.get("CLOCKFABRIC_SCREENSHOTS")
    if not where:
        return
    Path(where).mkdir(parents=True, exist_ok=True)
    for view in VIEWS:
        show(driver, view)
        if view == "fabric":
            click(driver, "line.link")
            wait_for("link details", lambda: texts(driver, "[data-details]"), timeout_s=5)
        time.sleep(0.5)
        driver.save_screenshot(str(Path(where) / f"dashboard-{view}.png"))
    show(driver, "fabric")


def sign_in(driver, url: str, token: str) -> None:
    driver.get(url)
    driver.find_element(By.ID, "token").send_keys(token)
    driver.find_element(By.CSS_SELECTOR, "#login button").click()
    wait_for("live", lambda: driver.find_element(By.ID, "status").text == "live", timeout_s=10)


def test_a_jobs_view_shows_its_flows_verdict_series_and_links(fleet, browser):
    lab = fleet.lab
    receiver, sender = "h0", "h3"  # under different leaves: the flow crosses a spine
    job = [sys.executable, "-m", "clockfabric.cli", "job", "run", "--name", "J", "--", sys.executable, "-c"]
    procs = [lab.spawn(receiver, [*job, RECEIVER], "job J receiver", log=fleet.logs / "job-receiver.log"),
             lab.spawn(sender, [*job, SENDER, str(lab.topology.hosts[receiver].address)], "job J sender",
                       log=fleet.logs / "job-sender.log")]
    forward = Forward(lab.ns(fleet.host), str(lab.topology.hosts[fleet.host].address), fleet.PORT)
    try:
        sign_in(browser, f"http://127.0.0.1:{forward.port}/dashboard/#jobs", read_token(fleet.token_file))
        wait_for("job J listed", lambda: "J" in attrs(browser, "tr[data-job]", "data-job"), timeout_s=45, every_s=0.5)
        flows = wait_for("J's sending flow, judged", lambda: [r for r in texts(browser, "tr[data-flow]")
                                                               if r.startswith(f"{sender}{receiver}")
                                                               and "Mbit/s" in r], timeout_s=45, every_s=0.5)
        print(f"\n{flows[0]}")
        verdict = wait_for("a verdict on J's flows", lambda: (v := attrs(browser, "#job-verdict", "data-verdict"))
                           and v[0] != "no_flows" and v, timeout_s=30, every_s=0.5)
        sentence = texts(browser, "#job-verdict .sentence")[0]
        print(f"verdict {verdict[0]}: {sentence}")
        assert verdict[0] in VERDICTS and len(sentence) > 20, (verdict, sentence)
        # a line each (two readings or more): the job's throughput and its sending flow's delay
        drawn = wait_for("the throughput and delay lines", lambda: (found := lines(browser, "#job-timeline"))
                         .get("job", 0) >= 2 and any(n.startswith(f"{sender} ") and p >= 2 for n, p in found.items())
                         and found, timeout_s=15)
        print(f"chart lines (readings): {drawn}")
        where = os.environ.get("CLOCKFABRIC_SCREENSHOTS")
        if where:  # the view as it is, the cursor on the chart, whatever the map then shows of the job's links
            browser.execute_script("document.getElementById('job-verdict').scrollIntoView()")
            webdriver.ActionChains(browser).move_to_element(browser.find_element(
                By.CSS_SELECTOR, "#job-timeline .u-over")).perform()
            time.sleep(0.5)
            browser.save_screenshot(str(Path(where) / "dashboard-jobs.png"))
        crossed = wait_for("J's links on the map", lambda: attrs(browser, "#job-map line.link.job", "data-link"),
                           timeout_s=10)
        # without a traced path, the links every path between the two hosts shares: both hosts' own
        assert any(name.startswith(f"{sender}:") for name in crossed), crossed
        assert any(name.startswith(f"{receiver}:") for name in crossed), crossed
        show(browser, "fabric")
        sender_link = f'line[data-link="{next(n for n in crossed if n.startswith(f"{sender}:"))}"]'
        click(browser, sender_link)
        link_flows = 'table[aria-label="Flows crossing the link"] tr'
        wait_for("J's flow among the sender's link's flows", lambda: any(
            r.startswith(f"{sender}{receiver}J") for r in texts(browser, link_flows)), timeout_s=10)
        choose(browser, "#fabric-colour", "load")
        wait_for("the sender's link coloured by J's load", lambda: float(
            (attrs(browser, sender_link, "data-load") or ["0"])[0] or 0) > 1e6, timeout_s=10)
        choose(browser, "#fabric-colour", "queueing")
        wait_for("every link coloured by the queueing the mesh locates on it", lambda: 0 < len(
            attrs(browser, "line.link[data-excess-us]", "data-link")) == len(attrs(browser, "line.link", "data-link"))
            and "probe paths queued now" in " ".join(texts(browser, "p.legend span.muted")), timeout_s=10)
        errors = [e for e in browser.get_log("browser") if e["level"] == "SEVERE"]
        assert not errors, errors
    finally:
        forward.close()
        stop(procs, grace_s=5.0)


def test_swapped_cables_raise_the_drift_alert_on_the_page(fleet, browser):
    lab = fleet.lab
    a, b = Port("h1", "eth0"), Port("h3", "eth0")  # under different leaves; the controller is elsewhere
    wait_for("LLDP neighbours", lambda: [s for s in fleet.api("/api/v1/samples",
                                                         name="lldp_neighbour", host="leaf0")["items"]
                                         if s["value"] == 1.0], timeout_s=15, every_s=0.5)
    forward = Forward(lab.ns(fleet.host), str(lab.topology.hosts[fleet.host].address), fleet.PORT)
    try:
        sign_in(browser, f"http://127.0.0.1:{forward.port}/dashboard/#events", read_token(fleet.token_file))
        assert not texts(browser, 'tr[data-alert="topology_drift"]')
        impair.swap_cables(lab, a, b)
        try:
            rows = wait_for("the drift alert on both leaf ports", lambda: (found := texts(
                browser, 'tr[data-alert="topology_drift"]')) and len(found) >= 2 and found, timeout_s=20, every_s=0.5)
            assert all(r.startswith("open") for r in rows), rows
            said = " ".join(rows)
            assert "sees h3:eth0" in said and "sees h1:eth0" in said, rows
        finally:
            impair.swap_cables(lab, a, b)
        errors = [e for e in browser.get_log("browser") if e["level"] == "SEVERE"]
        assert not errors, errors
    finally:
        forward.close()
