"""Every push, event detail and audit is checked against its declared model before it is stored,
and no name the controller takes can carry a newline or other control character into a log line."""

from __future__ import annotations

import logging
import unicodedata

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from pydantic import ValidationError

from clockfabric.controller.schemas import AuditIn, FailoverDetail, LinkDetail, Push, detail_errors
from tests.unit.credentials import as_host
from tests.unit.schema_strategies import from_schema
from tests.unit.test_controller_app import AUTH, TOKEN, env  # noqa: F401 - env is a fixture

PUSHES = from_schema(Push.model_json_schema())
CONTROL = st.sampled_from(["\n", "\r", "\x00", "\x1b", "\x7f", "\x85", "\u2028", "\u2029", "\t"])
SETTINGS = settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])


def names(push: dict) -> list[str]:
    """Every name in a push: what a log line or a label may carry."""
    out = [push["host"], push["boot"], *(push.get("boots") or [])]
    for e in push.get("events", []):
        out += [e["kind"], e.get("device", ""), *e.get("detail", {}), *([e["boot"]] if e.get("boot") else [])]
    for s in push.get("samples", []):
        out += [s["name"], *s.get("labels", {}), *s.get("labels", {}).values()]
    return out


@SETTINGS
@given(PUSHES)
def test_what_the_push_schema_allows_the_model_takes_and_it_holds_no_control_character(push):
    taken = Push.model_validate(push)
    for name in names(taken.model_dump()):
        assert not [c for c in name if unicodedata.category(c) in ("Cc", "Zl", "Zp")], repr(name)
        assert len(logging.Formatter().format(logging.makeLogRecord({"msg": name})).splitlines()) <= 1


@SETTINGS
@given(PUSHES, st.data(), CONTROL)
def test_a_control_character_in_any_name_is_refused(push, data, bad):
    where = data.draw(st.sampled_from(["host", "boot", "kind", "device", "sample", "label_key", "label_value"]))
    event = {"seq": 1, "t_ns": 0, "kind": "note"}
    sample = {"name": "up", "value": 1.0, "labels": {"device": "eth0"}}
    at = data.draw(st.sampled_from(["start", "middle", "end"]))

    def spoil(s: str) -> str:
        return {"start": bad + s, "middle": s[:1] + bad + s[1:], "end": s + bad}[at]

    if where in ("host", "boot"):
        push[where] = spoil(push[where])
    elif where in ("kind", "device"):
        push["events"] = [{**event, where: spoil(event.get(where, "eth0"))}]
    elif where == "sample":
        push["samples"] = [{**sample, "name": spoil("up")}]
    elif where == "label_key":
        push["samples"] = [{**sample, "labels": {spoil("device"): "eth0"}}]
    else:
        push["samples"] = [{**sample, "labels": {"device": spoil("eth0")}}]
    with pytest.raises(ValidationError):
        Push.model_validate(push)


@SETTINGS
@given(from_schema(FailoverDetail.model_json_schema()), from_schema(LinkDetail.model_json_schema()))
def test_declared_details_take_what_their_schema_allows(failover, link):
    push = Push.model_validate({"host": "h1", "boot": "b", "events": [
        {"seq": 1, "t_ns": 0, "kind": "failover_moved", "device": "h2", "detail": failover},
        {"seq": 2, "t_ns": 0, "kind": "link_down", "device": "eth0", "detail": link}]})
    assert detail_errors(push) == []


def test_a_failover_event_with_planes_as_a_string_is_refused_with_one_clear_line(env):
    client, fleet, *_ = env
    r = client.post("/api/v1/push", headers=as_host(TOKEN, "h1"), json={"host": "h1", "boot": "b", "events": [
        {"seq": 1, "t_ns": 1, "kind": "failover_moved", "device": "h2", "detail": {"planes": "0,1", "reason": "x"}}]})
    assert r.status_code == 422
    (error,) = r.json()["detail"]
    assert error["loc"] == ["body", "events", 0, "detail", "planes"] and "list" in error["msg"]
    assert fleet.storage.events() == []


def test_an_audit_with_a_check_without_findings_is_refused_with_one_clear_line(env):
    client, fleet, *_ = env
    report = {"fleet": "lab demo", "verdict": "pass", "exit_code": 0, "started_ns": 1, "counts": {"pass": 1},
              "checks": [{"id": "frontend.mtu", "verdict": "pass"}]}
    r = client.post("/api/v1/audits", headers=AUTH, json=report)
    assert r.status_code == 422
    (error,) = r.json()["detail"]
    assert error["loc"] == ["body", "checks", 0, "findings"] and error["msg"] == "Field required"
    report["checks"][0]["findings"] = [{"verdict": "pass", "message": "ok", "host": "h1", "device": "eth0"}]
    assert client.post("/api/v1/audits", headers=AUTH, json=report).status_code == 201
    report["checks"][0]["findings"][0]["host"] = "h1\nFAKE LOG LINE"
    assert client.post("/api/v1/audits", headers=AUTH, json=report).status_code == 422
    AuditIn.model_validate({**report, "checks": []})  # an audit of no checks is a report still


def test_a_device_name_cannot_forge_a_log_line(env):
    client, fleet, *_ = env
    r = client.post("/api/v1/push", headers=as_host(TOKEN, "h1"), json={"host": "h1", "boot": "b", "events": [
        {"seq": 1, "t_ns": 1, "kind": "link_down", "device": "eth0\n2026-01-01 ERROR forged"}]})
    assert r.status_code == 422 and r.json()["detail"][0]["loc"] == ["body", "events", 0, "device"]
