"""`--log-format json`: one JSON object a line (ts, level, logger, msg, the extra fields), for the
agent, the switch agent and the controller; text stays the default. And an agent on a node not in
the fleet file: refused with a clear answer, logged once by the controller, as a JSON line here."""

from __future__ import annotations

import io
import json
import logging
import re
import sys
import time

import pytest

from clockfabric.agent.push import Pusher
from clockfabric.auth.credential import host_token
from clockfabric.controller.fleet import Fleet
from clockfabric.controller.server import Listen, server, start_in_thread
from clockfabric.controller.storage.sqlite import SqliteStorage
from clockfabric.errors import ClockfabricError
from clockfabric.logs import setup_logging
from tests.unit.cli_flags import accepted_options

TOKEN = "t" * 32


@pytest.fixture
def logged():
    """setup_logging into a buffer; the root logger as it was afterwards (pytest's handlers too)."""
    root = logging.getLogger()
    handlers, level = list(root.handlers), root.level
    buf = io.StringIO()
    yield buf
    for h in list(root.handlers):
        root.removeHandler(h)
    for h in handlers:
        root.addHandler(h)
    root.setLevel(level)


def lines(buf: io.StringIO) -> list[dict]:
    return [json.loads(line) for line in buf.getvalue().splitlines()]


def test_a_json_line_has_time_level_logger_message_and_extra_fields(logged):
    setup_logging("json", stream=logged)
    logging.getLogger("clockfabric.x").warning("host %s is stale", "h1", extra={"host": "h1", "age_s": 6.5})
    logging.getLogger("clockfabric.x").debug("not at INFO")
    (line,) = lines(logged)
    assert line["level"] == "warning" and line["logger"] == "clockfabric.x" and line["msg"] == "host h1 is stale"
    assert line["host"] == "h1" and line["age_s"] == 6.5
    assert re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z", line["ts"])
    assert abs(time.mktime(time.strptime(line["ts"][:19], "%Y-%m-%dT%H:%M:%S")) - time.mktime(time.gmtime())) < 5


def test_exceptions_and_values_json_cannot_hold_still_make_one_line(logged):
    setup_logging("json", stream=logged, verbose=True)
    try:
        raise ValueError("bad\nvalue")
    except ValueError:
        logging.getLogger("c").exception("failed", extra={"path": logged.__class__})
    logging.getLogger("c").debug("at DEBUG when verbose")
    first, second = lines(logged)  # a traceback's newlines are inside the string, not between lines
    assert first["level"] == "error" and "ValueError: bad" in first["exc"] and "StringIO" in first["path"]
    assert second["msg"] == "at DEBUG when verbose"


def test_text_is_the_default_and_a_second_setup_replaces_the_first(logged):
    setup_logging("json", stream=io.StringIO())
    setup_logging(stream=logged)
    logging.getLogger("c").info("plain %d", 1)
    assert re.fullmatch(r"\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d{3} plain 1\n", logged.getvalue())
    assert len(logging.getLogger().handlers) == 1


def test_lines_go_to_stderr_as_it_is_when_they_are_written(monkeypatch):
    root = logging.getLogger()
    saved = (list(root.handlers), root.level)
    try:
        setup_logging()
        first = io.StringIO()
        monkeypatch.setattr(sys, "stderr", first)
        logging.getLogger("clockfabric.t").warning("one")
        first.close()  # a test's capture, closed once its test ended
        later = io.StringIO()
        monkeypatch.setattr(sys, "stderr", later)
        logging.getLogger("clockfabric.t").warning("two")  # no "--- Logging error ---" on a closed stream
        assert later.getvalue().rstrip().endswith("two")
    finally:
        root.handlers[:] = saved[0]
        root.setLevel(saved[1])


def test_an_unknown_format_is_one_clear_line():
    with pytest.raises(ClockfabricError, match="--log-format 'yaml': give one of text, json"):
        setup_logging("yaml")


@pytest.mark.parametrize("command", ["agent", "controller", "switch-agent"])
def test_the_daemons_take_log_format(command):
    assert "--log-format" in accepted_options(command)


def test_an_agent_not_in_the_fleet_file_is_refused_and_logged_once(logged, tmp_path):
    setup_logging("json", stream=logged)
    storage = SqliteStorage(tmp_path / "c.db")
    srv = server(Fleet(storage, hosts=["h1"]), TOKEN, Listen(port=0))
    thread = start_in_thread(srv)
    url = f"http://127.0.0.1:{srv.servers[0].sockets[0].getsockname()[1]}"
    try:
        p = Pusher(url, host_token(TOKEN, "stray"), "stray",
                   snapshot=lambda: ([{"t_ns": time.time_ns(), "kind": "tick"}], [], {}))
        for _ in range(3):
            assert p.push_once()  # a refusal for good: not retried, the agent goes on
        assert p.counters["pushes"] == 0 and p.counters["quarantined"] == 3
        assert storage.host("stray") is None and not storage.events(host="stray")
    finally:
        srv.should_exit = True
        thread.join(5)
        storage.close()
    refused = [x for x in lines(logged) if x.get("reason") == "not_enrolled"]
    assert len(refused) == 1 and refused[0]["host"] == "stray" and refused[0]["level"] == "warning"
    assert "--enroll-unknown" in refused[0]["msg"]
    agent_side = [x for x in lines(logged) if x["logger"] == "clockfabric.agent.push"]
    assert len(agent_side) == 1 and "not enrolled" in agent_side[0]["msg"]  # the agent's log names the fix


def test_httpx_request_lines_are_kept_below_info_unless_verbose(logged):
    setup_logging(stream=logged)
    logging.getLogger("httpx").info('HTTP Request: GET http://127.0.0.1/health "HTTP/1.1 200 OK"')
    logging.getLogger("httpx").warning("retrying")
    assert "HTTP Request" not in logged.getvalue() and "retrying" in logged.getvalue()
    setup_logging(stream=logged, verbose=True)
    logging.getLogger("httpx").info("HTTP Request: shown when verbose")
    assert "shown when verbose" in logged.getvalue()
