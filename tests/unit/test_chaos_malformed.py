"""The chaos soak's malformed bodies, read from the door's schemas, are each refused by the real
app with 422 naming the field made wrong, and nothing is stored."""

from __future__ import annotations

import random

import pytest
from pydantic import ValidationError

from clockfabric.bench.monitoring.chaos_malformed import DETAILS, bad_audit, bad_event, field_types, wrong_value
from clockfabric.controller.schemas import FindingIn
from tests.unit.credentials import as_host
from tests.unit.test_controller_app import AUTH, TOKEN, env  # noqa: F401 - env is a fixture


@pytest.mark.parametrize("seed", range(12))
def test_each_drawn_detail_and_finding_is_refused_naming_its_field(env, seed):
    client, fleet, *_ = env
    rng = random.Random(seed)
    kind, field, event = bad_event(rng, 1, 1)
    r = client.post("/api/v1/push", headers=as_host(TOKEN, "h1"), json={"host": "h1", "boot": "b", "events": [event]})
    assert r.status_code == 422 and r.json()["detail"][0]["loc"][-1] == field, (kind, event, r.text)
    finding, report = bad_audit(rng, 1)
    a = client.post("/api/v1/audits", headers=AUTH, json=report)
    assert a.status_code == 422 and a.json()["detail"][0]["loc"][-1] == finding, (report, a.text)
    assert fleet.storage.events() == [] and fleet.storage.audits() == []


@pytest.mark.parametrize("model", [*DETAILS.values(), FindingIn], ids=lambda m: m.__name__)
def test_every_declared_field_has_a_value_its_model_refuses(model):
    for name, schema in model.model_json_schema()["properties"].items():
        assert field_types(schema), (model, name)
        with pytest.raises(ValidationError) as refused:
            model.model_validate({name: wrong_value(schema)})
        assert any(e["loc"] == (name,) for e in refused.value.errors()), (name, refused.value.errors())
