"""Alerts through a real prometheus-alertmanager on loopback (the `alertmanager` fixture): what the
controller posts appears with its labels, a resolve ends it, a silence suppresses it, inhibition
holds back what another alert explains, and a queue waits, bounded, while Alertmanager is away."""

import socket
import subprocess
import sys
import time

import httpx
import pytest
from fastapi.testclient import TestClient

from clockfabric.controller.alertmanager import AlertmanagerClient
from clockfabric.controller.alertmanager_embedded import EmbeddedAlertmanager, config_yaml
from clockfabric.controller.alerts import AlertManager
from clockfabric.controller.app import create_app
from clockfabric.controller.detectors import Finding
from clockfabric.controller.fleet import Fleet
from clockfabric.controller.monitor import Monitor
from clockfabric.controller.storage.base import Alert
from clockfabric.controller.storage.sqlite import SqliteStorage
from clockfabric.errors import ClockfabricError
from tests.ports import controller_port
from tests.unit.cli_flags import accepted_options
from tests.waiting import wait_for

S = 1_000_000_000
TOKEN = "t" * 32


def held(am_url: str, key: str) -> list[dict]:
    """Alertmanager's alerts (any state) with this key."""
    return [a for a in httpx.get(f"{am_url}/api/v2/alerts").json() if a["labels"].get("key") == key]


def link_down(link: str) -> Finding:
    return Finding(f"link_down:{link}", "link_down", "critical", f"link {link} is down",
                   {"link": link, "ends_down": {f"{link}:a": 1}, "since_ns": 1})


@pytest.fixture
def storage(tmp_path):
    s = SqliteStorage(tmp_path / "db.sqlite")
    yield s
    s.close()


@pytest.fixture
def manager(storage, alertmanager):
    m = AlertManager(storage, alertmanager=AlertmanagerClient([alertmanager.url], generator_url="http://ctl:7400/"))
    yield m
    m.close()


def test_an_alert_appears_with_stable_labels_and_ends_when_resolved(manager, alertmanager):
    f = link_down("leaf0-spine0")
    now = time.time_ns()
    manager.sync({f.key: f}, now)
    (got,) = wait_for("the alert in alertmanager", lambda: held(alertmanager.url, f.key), timeout_s=5)
    assert got["labels"] == {"alertname": "ClockfabricLinkDown", "severity": "critical", "key": f.key,
                             "link": "leaf0-spine0"}
    assert got["annotations"] == {"summary": f.message}
    assert (got["status"]["state"], got["generatorURL"]) == ("active", "http://ctl:7400/")
    manager.sync({}, now + S)  # resolved: posted with its endsAt, Alertmanager no longer holds it active
    wait_for("the alert ended", lambda: not held(alertmanager.url, f.key), timeout_s=5)
    assert manager.alertmanager.sent == 2 and manager.alertmanager.pending == 0


def test_a_restarted_controller_posts_again_what_storage_has_open(storage, alertmanager):
    f = link_down("leaf3-spine1")
    AlertManager(storage).sync({f.key: f}, time.time_ns())  # opened by a controller with no Alertmanager
    again = AlertManager(storage, alertmanager=AlertmanagerClient([alertmanager.url]))
    assert again.sync({f.key: f}, time.time_ns()) == []  # nothing new to log or store
    wait_for("the open alert in alertmanager", lambda: held(alertmanager.url, f.key), timeout_s=5)
    again.close()


def test_a_silence_made_through_the_api_suppresses_the_alert(manager, alertmanager):
    f = link_down("leaf1-spine1")
    manager.sync({f.key: f}, time.time_ns())
    wait_for("the alert", lambda: held(alertmanager.url, f.key), timeout_s=5)
    silence = {"matchers": [{"name": "key", "value": f.key, "isRegex": False}], "createdBy": "test",
               "comment": "maintenance", "startsAt": "2020-01-01T00:00:00Z", "endsAt": "2099-01-01T00:00:00Z"}
    sid = httpx.post(f"{alertmanager.url}/api/v2/silences", json=silence).json()["silenceID"]
    (got,) = wait_for("suppressed", lambda: [a for a in held(alertmanager.url, f.key)
                                             if a["status"]["state"] == "suppressed"], timeout_s=5)
    assert got["status"]["silencedBy"] == [sid]
    httpx.delete(f"{alertmanager.url}/api/v2/silence/{sid}")


def test_a_down_link_inhibits_congestion_named_on_it(manager, alertmanager):
    down = link_down("leaf2-spine0")
    queue = Finding("congestion:leaf2-spine0:leaf2>spine0", "congestion", "warning", "congestion on leaf2-spine0",
                    {"links": [{"link": "leaf2-spine0", "direction": "leaf2->spine0"}], "paths": []})
    manager.sync({down.key: down, queue.key: queue}, time.time_ns())
    (got,) = wait_for("inhibited", lambda: [a for a in held(alertmanager.url, queue.key)
                                            if a["status"]["state"] == "suppressed"], timeout_s=5)
    assert got["labels"]["link"] == "leaf2-spine0" and got["status"]["inhibitedBy"]
    assert [a["status"]["state"] for a in held(alertmanager.url, down.key)] == ["active"]


def test_alerts_queue_while_alertmanager_is_away_and_go_when_it_returns(tmp_path, storage):
    am = EmbeddedAlertmanager(tmp_path / "am").start()
    client = AlertmanagerClient([am.url], resend_s=0.5, first_wait_s=0.05, max_wait_s=0.2)
    manager = AlertManager(storage, alertmanager=client)
    early, late = link_down("a-b"), link_down("c-d")
    try:
        manager.sync({early.key: early}, time.time_ns())
        wait_for("the first alert", lambda: held(am.url, early.key), timeout_s=5)
        am.stop()
        manager.sync({early.key: early, late.key: late}, time.time_ns())
        away = wait_for("alertmanager seen away", client.away, timeout_s=5)
        assert list(away) == [am.url] and client.pending >= 1
        am = EmbeddedAlertmanager(tmp_path / "am", port=am.port).start()  # its alerts are gone with it
        wait_for("both alerts, the queued and the re-posted",
                 lambda: held(am.url, late.key) and held(am.url, early.key), timeout_s=5)
        # an alert is held a moment before its post returns, and firing ones are re-queued each
        # resend_s: the queue is seen empty between posts, not at once
        wait_for("the queue drained", lambda: client.away() == {} and client.pending == 0, timeout_s=5)
    finally:
        client.close()
        am.stop()


def test_the_controller_raises_an_alert_of_its_own_while_alertmanager_is_away(storage):
    with socket_closed() as url:
        monitor = Monitor.create(storage, alertmanagers=[url])
        monitor.alerts.alertmanager.first_wait_s = 0.05
        f = link_down("x-y")
        monitor.alerts.sync({f.key: f}, time.time_ns())
        wait_for("seen away", monitor.alerts.alertmanager.away, timeout_s=5)
        monitor.tick(time.time_ns())
        (own,) = [a for a in storage.alerts(open_only=True) if a.kind == "alertmanager_unreachable"]
        assert (own.key, own.severity, own.detail) == (f"alertmanager:{url}", "critical", {"url": url})
        assert "1 alerts queued" in own.message or "2 alerts queued" in own.message
        monitor.alerts.close()


def test_the_queue_is_bounded(storage):
    with socket_closed() as url:
        client = AlertmanagerClient([url], queue_max=2)
        for key in ("a", "b", "c"):
            client.send("opened", storage_alert(key))
        assert (client.pending, client.dropped) == (2, 1)
        client.send("resolved", storage_alert("c"))  # the newer state of one queued replaces it
        assert (client.pending, client.dropped) == (2, 1)
        client.close()


def test_the_generated_config_passes_amtool_and_bad_urls_get_one_line(tmp_path):
    (tmp_path / "am.yml").write_text(config_yaml())
    done = subprocess.run(["amtool", "check-config", str(tmp_path / "am.yml")], capture_output=True, text=True)
    assert done.returncode == 0 and "3 inhibit rules" in done.stdout, done.stdout + done.stderr
    for bad in ("alertmanager:9093", "ftp://am/", "http://"):
        with pytest.raises(ClockfabricError, match=f"--alertmanager '{bad}' is not an http"):
            AlertmanagerClient([bad])


def storage_alert(key):
    return Alert(key=key, kind="link_down", severity="critical", message=key, opened_ns=time.time_ns())


class socket_closed:
    """A loopback URL where nothing listens: its port stays bound (and refuses connections) while
    the block runs, so no other server of a busy test run can take it meanwhile."""

    def __enter__(self):
        self.held = socket.socket()
        self.held.bind(("127.0.0.1", 0))
        return f"http://127.0.0.1:{self.held.getsockname()[1]}"

    def __exit__(self, *exc):
        self.held.close()
        return False


def test_readyz_and_metrics_say_alertmanager_is_away_and_the_controller_stays_ready(storage):
    with socket_closed() as url:
        monitor = Monitor.create(storage, alertmanagers=[url])
        monitor.alerts.alertmanager.first_wait_s = 0.05
        fleet = Fleet(storage, hosts=["h0"], stale_s=60, monitor=monitor)
        with TestClient(create_app(fleet, TOKEN, tick_s=0.1, check_s=0.05)) as client:
            # ready first (the storage checked once): a busy machine may answer before the first check
            wait_for("ready", lambda: client.get("/readyz").status_code == 200, timeout_s=10)
            f = link_down("x-y")
            monitor.alerts.sync({f.key: f}, time.time_ns())
            r = wait_for("degraded", lambda: (r := client.get("/readyz")).json().get("degraded") and r, timeout_s=5)
            assert r.status_code == 200 and list(r.json()["degraded"]) == [f"alertmanager {url}"]
            text = client.get("/metrics", headers={"Authorization": f"Bearer {TOKEN}"}).text
            assert f'clockfabric_controller_alertmanager_up{{url="{url}"}} 0.0' in text
            assert "clockfabric_controller_alertmanager_post_failures_total" in text
            pending = [ln for ln in text.splitlines() if ln.startswith("clockfabric_controller_alertmanager_pending ")]
            assert pending and float(pending[0].split()[1]) >= 1


def test_a_bare_controller_starts_its_alertmanager_and_it_dies_with_the_controller(tmp_path):
    """No --alertmanager: one on loopback, its data and URL beside the database; a controller
    killed outright (no clean-up of its own) takes it down too."""
    token = tmp_path / "fleet.token"
    listen = f"http://127.0.0.1:{controller_port()}"  # and the port above it free, for the series gate
    argv = [sys.executable, "-m", "clockfabric.cli", "controller", "--db", str(tmp_path / "fleet.db"),
            "--listen", listen.removeprefix("http://"), "--token-file", str(token), "--new-token"]
    log = tmp_path / "controller.log"
    with open(log, "w") as out:
        proc = subprocess.Popen(argv, stdout=out, stderr=subprocess.STDOUT)
    try:
        url_file = tmp_path / "fleet.db.alertmanager" / "url"
        try:  # a bare controller starts four engines: on a busy machine that takes its time
            wait_for("the controller up", lambda: proc.poll() is None and url_file.exists()
                     and answers(f"{listen}/healthz"), timeout_s=45)
        except AssertionError as e:
            raise AssertionError(f"{e} (exit {proc.poll()}); its log:\n{log.read_text()[-3000:]}") from None
        am = url_file.read_text().strip()
        assert am.startswith("http://127.0.0.1:") and answers(f"{am}/-/ready")
        assert f"alerts to Alertmanager {am} (started here)" in " ".join(log.read_text().split())
    finally:
        proc.kill()
        proc.wait(5)
    wait_for("the alertmanager gone with it", lambda: not answers(f"{am}/-/ready"), timeout_s=5)


def test_the_embedded_alertmanager_is_restarted_when_it_exits(tmp_path):
    am = EmbeddedAlertmanager(tmp_path / "am", watch_s=0.05).start()
    try:
        am.proc.kill()
        wait_for("restarted", lambda: am.restarts == 1 and answers(f"{am.url}/-/ready"), timeout_s=10)
    finally:
        am.stop()
    assert am.proc.poll() is not None


def test_controller_and_monitor_take_alertmanager_and_no_webhook():
    for command in ("controller", "monitor"):
        options = accepted_options(command)
        assert "--alertmanager" in options and not {"--webhook", "--alert-webhook"} & options


def answers(url: str) -> bool:
    try:
        return httpx.get(url, timeout=1.0).status_code < 500
    except httpx.HTTPError:
        return False
