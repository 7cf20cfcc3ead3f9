"""The dashboard's time-series charts in Chromium, without a controller: the static files served
from loopback under the controller's own Content-Security-Policy, a chart drawn from known data.
Its panels plot the points given, in the unit their values reach; the axes tick with units and
wall times; the cursor reads a value; a drag zooms every panel, a re-render with new data keeps the
zoom and the chart, a double-click resets; and the browser logs no error (a CSP violation is one)."""

from __future__ import annotations

import functools
import re
import threading
from http.server import SimpleHTTPRequestHandler, ThreadingHTTPServer

import pytest

from clockfabric.bench import chromium
from clockfabric.controller.dashboard.routes import STATIC
from clockfabric.controller.headers import CSP
from tests.waiting import wait_for

webdriver = pytest.importorskip("selenium.webdriver", reason="selenium is not installed (pip install -e '.[test]')")
pytestmark = pytest.mark.skipif(not chromium.available(),
                                reason="needs Debian's chromium and chromium-driver (scripts/setup.sh)")
from selenium.webdriver.common.action_chains import ActionChains  # noqa: E402
from selenium.webdriver.common.by import By  # noqa: E402

PAGE = (b'<!doctype html><html lang="en"><head><meta charset="utf-8"><title>chart</title>'
        b'<link rel="icon" href="data:,">'
        b'<link rel="stylesheet" href="/dashboard/static/vendor/uplot/uPlot.min.css">'
        b'<link rel="stylesheet" href="/dashboard/static/dashboard.css">'
        b'</head><body><main id="view"></main></body></html>')
T0_S = 1_767_225_600  # 2026-01-01 00:00:00 UTC
N = 20
THROUGHPUT_BPS = [100e6 + 5e6 * i for i in range(N)]
DELAY_US = [200.0 + 10 * i for i in range(N)]
DELAY_US[5] = DELAY_US[6] = None  # a missed push or two: bridged, the line goes on
# draws the chart under one id from the first `n` readings, as a view re-rendering does
DRAW = """
const [n, throughput, delay, t0] = arguments;
const { chart } = await import("/dashboard/static/js/chart.js");
const t = [...Array(n).keys()].map((i) => (t0 + i) * 1e9);
const node = chart("test", t, [
  { label: "throughput", quantity: "bit/s", scale: 1,
    lines: [{ name: "job", values: throughput.slice(0, n), colour: "#000" }] },
  { label: "delay", quantity: "s", scale: 1e-6,
    lines: [{ name: "flow a", values: delay.slice(0, n), colour: "#d62d20" },
    { name: "flow b", values: delay.slice(0, n).map((v) => v === null ? null : v * 20), colour: "#2e9e4f" }] }],
  "Throughput and delay");
document.getElementById("view").replaceChildren(node);
window.drawn = [...(window.drawn || []), node];
"""
PLOTS = "return [...document.querySelectorAll('.timechart-panel')].map((p) => p.uplot)"


class Static(SimpleHTTPRequestHandler):
    """The dashboard's files at the controller's paths, the test page at /, the controller's CSP on all."""

    def do_GET(self) -> None:
        if self.path == "/":
            self.send_response(200)
            self.send_header("content-type", "text/html")
            self.end_headers()
            self.wfile.write(PAGE)
        else:
            self.path = self.path.removeprefix("/dashboard/static")
            super().do_GET()

    def end_headers(self) -> None:
        self.send_header("content-security-policy", CSP)
        super().end_headers()

    def log_message(self, *args) -> None:
        pass


@pytest.fixture(scope="module")
def page():
    server = ThreadingHTTPServer(("127.0.0.1", 0), functools.partial(Static, directory=str(STATIC)))
    threading.Thread(target=server.serve_forever, daemon=True).start()
    driver = chromium.driver()
    try:
        driver.get(f"http://127.0.0.1:{server.server_address[1]}/")
        yield driver
    finally:
        driver.quit()
        server.shutdown()


def draw(driver, n: int) -> None:
    driver.execute_script(f"return (async () => {{ {DRAW} }})()", n, THROUGHPUT_BPS, DELAY_US, T0_S)


def x_range(driver) -> list[list[float]]:
    return driver.execute_script("return [...document.querySelectorAll('.timechart-panel')]"
                                 ".map((p) => [p.uplot.scales.x.min, p.uplot.scales.x.max])")


def test_a_chart_plots_its_points_with_units_reads_them_and_zooms(page):
    draw(page, N)
    wait_for("the panels laid out to the page", lambda: page.execute_script(
        "return document.querySelector('.timechart-panel').uplot.width") > 800, timeout_s=5)
    throughput, delay = page.execute_script(PLOTS + ".map((u) => u.data)")
    assert throughput[0] == [T0_S + i for i in range(N)]
    assert throughput[1] == pytest.approx([v / 1e6 for v in THROUGHPUT_BPS])  # Mbit/s: the top is 195e6
    # ms: flow b's top is 7.8 ms; the missed pushes bridged (undefined, which uPlot spans: None here)
    assert delay[1] == pytest.approx([None if v is None else v / 1e3 for v in DELAY_US], nan_ok=True)
    assert delay[2][5:7] == [None, None]
    rows = page.execute_script("return [...document.querySelectorAll('.timechart tr[data-series]')]"
                               ".map((r) => [r.dataset.series, r.dataset.points])")
    assert rows == [["job", str(N)], ["flow a", str(N - 2)], ["flow b", str(N - 2)]]

    ticks = page.execute_script(PLOTS + ".map((u) => u.axes.map((a) => a._values))")
    assert len(ticks[0][1]) >= 3 and all(t.endswith(" Mbit/s") for t in ticks[0][1]), ticks
    assert all(t.endswith(" ms") for t in ticks[1][1]), ticks
    assert len(ticks[0][0]) >= 3 and all(re.fullmatch(r"\d\d:\d\d:\d\d", t) for t in ticks[0][0]), ticks

    over = page.find_element(By.CSS_SELECTOR, ".timechart-panel .u-over")
    width = over.size["width"]
    left = page.execute_script(PLOTS + "[0].valToPos(arguments[0], 'x')", T0_S + 10)  # CSS px from the plot's left
    ActionChains(page).move_to_element_with_offset(over, round(left - width / 2), 0).perform()
    read = wait_for("the cursor's reading", lambda: page.execute_script(
        "return [...document.querySelectorAll('.timechart tr[data-series] .u-value')].map((v) => v.textContent)"),
        timeout_s=5)
    assert read == ["150 Mbit/s", "0.3 ms", "6 ms"], read  # index 10 in every panel at once

    full = x_range(page)
    assert full == [[T0_S, T0_S + N - 1]] * 2, full
    ActionChains(page).move_to_element_with_offset(over, -width // 4, 0).click_and_hold() \
        .move_by_offset(width // 2, 0).release().perform()
    zoomed = wait_for("the zoom", lambda: (r := x_range(page)) != full and r, timeout_s=5)
    assert zoomed[0] == zoomed[1], zoomed  # every panel on the dragged span
    assert T0_S + 3 < zoomed[0][0] < zoomed[0][1] < T0_S + N - 4, zoomed

    draw(page, N - 1)  # a re-render with other data: the same chart, on the same span
    assert page.execute_script("return window.drawn[0] === window.drawn[1]")
    assert page.execute_script(PLOTS + "[0].data[0].length") == N - 1
    assert wait_for("the zoom kept", lambda: x_range(page) == zoomed, timeout_s=5)

    ActionChains(page).double_click(over).perform()
    wait_for("the zoom reset", lambda: x_range(page) == [[T0_S, T0_S + N - 2]] * 2, timeout_s=5)
    errors = [e["message"] for e in page.get_log("browser") if e["level"] == "SEVERE"]
    assert not errors, errors


def test_a_reading_between_gaps_is_a_dot_and_short_gaps_are_bridged(page):
    # 4 nulls in a row break a line, 3 do not: readings 0 and 5 stand alone, 10 and 14 make one line
    values = [1e6, None, None, None, None, 2e6, None, None, None, None, 3e6, None, None, None, 4e6]
    dots = page.execute_script("""
        const { chart } = await import("/dashboard/static/js/chart.js");
        const node = chart("gaps", arguments[0].map((v, i) => i * 1e9), [{ label: "rate", quantity: "bit/s",
          scale: 1, lines: [{ name: "a", values: arguments[0], colour: "#000" }] }], "gaps");
        document.getElementById("view").replaceChildren(node);
        const u = node.querySelector(".timechart-panel").uplot;
        return [u.series[1].points.filter(u, 1, false), u.data[1].map((v) => v === undefined ? "bridged" : v)];
    """, values)
    assert dots[0] == [0, 5], dots
    assert dots[1] == [1, None, None, None, None, 2, None, None, None, None, 3, *["bridged"] * 3, 4], dots


def test_chromium_keeps_its_files_in_a_folder_quit_removes():
    driver = chromium.driver()
    scratch = driver.scratch
    try:
        driver.get("about:blank")
        made = [p.name for p in scratch.iterdir()]
        assert "profile" in made and any(name.startswith("org.chromium.Chromium.") for name in made), made
    finally:
        driver.quit()
    assert not scratch.exists()
