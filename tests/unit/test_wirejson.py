"""JSON from the network: nesting measured before json.loads recurses, so nothing a peer sends
runs the parser into the interpreter's recursion limit. JSON to many hosts: a batch's shared
parts encoded once, the text json.dumps gives."""

from __future__ import annotations

import json
import logging
from unittest import mock

import pytest

from clockfabric import wirejson
from clockfabric.agent.agent import _plain_json
from clockfabric.agent.service import Router, Service
from clockfabric.wirejson import COMPACT, MAX_DEPTH, SharedParts, TooDeep, depth_within


def nested(depth: int, open_: str = "[", close: str = "]") -> str:
    return open_ * depth + close * depth


@pytest.mark.parametrize("kind", ["[]", '{"a":}'])
def test_depth_is_taken_up_to_the_bound_and_refused_one_past_it(kind):
    def make(depth: int) -> str:
        if kind == "[]":
            return nested(depth)
        return '{"a":' * (depth - 1) + "{}" + "}" * (depth - 1)

    assert json.loads(make(MAX_DEPTH)) is not None  # each is valid JSON
    assert depth_within(make(MAX_DEPTH)) and wirejson.loads(make(MAX_DEPTH)) == json.loads(make(MAX_DEPTH))
    assert not depth_within(make(MAX_DEPTH + 1))
    with pytest.raises(TooDeep, match=f"nested deeper than {MAX_DEPTH}"):
        wirejson.loads(make(MAX_DEPTH + 1))


def test_many_shallow_containers_are_not_deep():
    text = json.dumps([{"seq": i, "labels": {"dst": "h2"}, "hops": [1, [2]]} for i in range(5_000)])
    assert depth_within(text, 4) and not depth_within(text, 3)


def test_brackets_inside_strings_do_not_count():
    inside = json.dumps(["[" * 500 + '\\" {{{' + "{" * 500, {"k[[[": "]]]"}])
    assert wirejson.loads(inside, max_depth=2) == json.loads(inside)


def test_an_escaped_quote_does_not_end_a_string_early():
    # were the \" taken for the string's end, the brackets after it would count as structure
    text = json.dumps(['a\\"' + "[" * 100])
    assert wirejson.loads(text, max_depth=1) == json.loads(text)


def test_a_deep_body_is_refused_as_a_value_error_not_a_recursion_error():
    deep = nested(100_000)
    with pytest.raises(RecursionError):
        json.loads(deep)  # what the check spares every parser
    with pytest.raises(TooDeep) as refused:
        wirejson.loads(deep.encode())
    assert isinstance(refused.value, ValueError)


def test_bytes_are_decoded_as_json_loads_decodes_them():
    # in UTF-16, U+225B's bytes hold a quote: the nesting is measured on characters, not bytes
    hidden = '["\u225b", ' + nested(200) + "]"
    assert not depth_within(hidden)
    with pytest.raises(TooDeep):
        wirejson.loads(hidden.encode("utf-16-le"))
    assert wirejson.loads('{"a": ["\u00e9"]}'.encode("utf-16")) == {"a": ["\u00e9"]}
    with pytest.raises(ValueError):
        wirejson.loads(b'["\xff"]')  # not UTF-8, as json.loads refuses it


def test_json_loads_options_pass_through():
    assert wirejson.loads("[NaN]", parse_constant=lambda c: c) == ["NaN"]


class Recorder(Service):
    name, handles = "clock", frozenset({"map"})

    def __init__(self) -> None:
        self.got: list[dict] = []

    def on_message(self, msg, reply_to):
        self.got.append(msg)


def test_the_agents_router_counts_a_deep_control_message_bad_and_logs_nothing(caplog):
    clock = Recorder()
    router = Router([clock])
    with caplog.at_level(logging.ERROR):
        assert not router.deliver(('{"t": "map", "m": ' + nested(5_000) + "}").encode(), ("10.0.0.2", 7400))
    assert router.bad_messages == 1 and clock.got == [] and caplog.records == []
    assert router.deliver(b'{"t": "map"}', ("10.0.0.2", 7400)) and clock.got == [{"t": "map"}]


def test_a_deep_rank_request_is_not_taken_for_plain_json():
    assert _plain_json(b'{"t": "place"}')
    assert not _plain_json(nested(5_000).encode())


def test_a_batch_with_shared_parts_is_the_text_json_dumps_gives_and_encodes_each_part_once():
    frame = {"anchor": "h1", "members": [["h1", 0.5, 1.25, -3e-12], ["h2", 0.5, -7.0, 1e-9]]}
    mappings = {h: {"offset_ns": i * 1.5, "bound_ns": float("inf"), "synced": i % 2 == 0, "reason": "é\n"}
                for i, h in enumerate(["h1", "h2", "h3"])}
    batch = {h: {"t": "map", "frame": frame, "hosts": {p: mappings[p] for p in mappings if p != h},
                 "unsynced": {}, "odd": {1: "an int key", None: []}} for h in mappings}
    batch["h3"] = {**batch["h3"], "urgent": True}  # a message remade around the same parts
    parts = SharedParts()
    with mock.patch("clockfabric.wirejson.json.dumps", wraps=json.dumps) as dumps:
        texts = {h: parts.dumps(msg) for h, msg in batch.items()}
    assert texts == {h: json.dumps(msg, separators=COMPACT) for h, msg in batch.items()}
    encoded = [c.args[0] for c in dumps.call_args_list]
    assert sum(e is frame["members"] for e in encoded) == 1  # once for the batch, not once a message
    assert [sum(e is m for e in encoded) for m in mappings.values()] == [1, 1, 1]  # each in two messages


def test_a_part_changed_after_the_batch_is_encoded_afresh_once_the_memo_is_cleared():
    part = {"offset_ns": 1.0}
    parts = SharedParts()
    assert parts.dumps({"hosts": {"h1": part}}) == '{"hosts":{"h1":{"offset_ns":1.0}}}'
    part["offset_ns"] = 2.0
    parts.clear()
    assert parts.dumps({"hosts": {"h1": part}}) == '{"hosts":{"h1":{"offset_ns":2.0}}}'
