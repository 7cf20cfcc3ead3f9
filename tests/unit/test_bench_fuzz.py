"""`clockfabric bench fuzz`: the fuzzer finds a planted crash, a planted forgery and a planted
dead loop in deliberately broken parsers, and finds nothing in the real ones at a small count."""

from __future__ import annotations

import itertools
import json
import logging
import struct

import pytest
from typer.testing import CliRunner

from clockfabric.agent.service import Router
from clockfabric.bench.fuzz import command as fuzz
from clockfabric.bench.fuzz.mutate import inputs
from clockfabric.bench.fuzz.parsers import PARSERS, Parser
from clockfabric.errors import ClockfabricError

SEEDS = [struct.pack("!HHI", 4, 7, 99), struct.pack("!HHI", 4, 8, 100)]


def _length_prefixed(data: bytes) -> bool:
    """Refuses what it does not know with ValueError, but trusts the length field for a short input."""
    if data[:2] != b"\x00\x04":
        raise ValueError("not ours")
    length, = struct.unpack_from("!H", data, 2)  # struct.error on a truncated input: the planted crash
    return length < 1000


def test_it_finds_a_planted_crash_and_keeps_the_input():
    broken = {"broken": lambda: Parser(SEEDS, _length_prefixed, (ValueError,))}
    tally, = fuzz.run(["broken"], 3000, None, parsers=broken)
    assert tally.inputs == 3000 and tally.crashes > 0 and tally.accepted > 0 and tally.refused > 0
    crash = tally.first_crashes[0]
    assert "struct.error" in crash["error"] or "unpack" in crash["error"]
    data = bytes.fromhex(crash["input_hex"])
    assert data[:2] == b"\x00\x04" and len(data) < 4  # the truncated input that trips it, as it was fed


def test_a_sealed_parser_that_takes_a_forgery_is_counted():
    def no_mac(data: bytes) -> bool:  # a "seal" that reads the key id and forgets the MAC
        if len(data) < 8:
            raise ValueError("short")
        return True

    tally, = fuzz.run(["no-mac"], 500, None, parsers={"no-mac": lambda: Parser(SEEDS, no_mac, (ValueError,),
                                                                               sealed=True)})
    assert tally.forgeries_accepted == tally.accepted > 0
    assert fuzz.targets([tally], 500)[1].met is False
    assert f"{tally.accepted} forged or replayed accepted" in fuzz.summary(tally)


@pytest.mark.filterwarnings("ignore::pytest.PytestUnhandledThreadExceptionWarning")
def test_a_loop_thread_killed_by_an_input_is_found_dead():
    def dies(data: bytes) -> bool:
        if len(data) > 12:
            raise SystemExit("what a loop does not catch ends it")
        return True

    tally, = fuzz.run(["dies"], 2000, None, parsers={"dies": lambda: Parser(SEEDS, dies, threaded=True)})
    assert tally.loop_alive is False and tally.crashes > 0
    assert fuzz.targets([tally], 2000)[2].value == 1


def test_the_real_parsers_have_no_crash_no_forgery_and_live_loops():
    told: list[str] = []
    tallies = fuzz.run(PARSERS.names(), 1500, None, seed=1, done=lambda t: told.append(t.parser))
    assert [t.parser for t in tallies] == told == PARSERS.names() and len(tallies) >= 9
    for t in tallies:
        assert (t.parser, t.inputs, t.crashes) == (t.parser, 1500, 0), t.first_crashes
        assert t.refused > 0  # the mutants reach the refusals
    sealed = {t.parser: t.forgeries_accepted for t in tallies if t.forgeries_accepted is not None}
    assert sealed == {"probe-seal": 0, "control-seal": 0}
    assert {t.parser: t.loop_alive for t in tallies if t.loop_alive is not None} == {
        "agent-control": True, "controller-push": True}
    assert all(t.accepted > 0 for t in tallies if t.parser not in sealed)  # the seeds at least are good


def test_the_mutants_hold_deep_nesting_huge_numbers_and_lone_surrogates():
    seeds = [json.dumps({"t": "map", "hosts": {"h0": {"offset_ns": 1.0}}}).encode()]
    made = list(itertools.islice(inputs(seeds, True, 65_507), 20_000))
    assert made[0] == seeds[0]  # the seeds themselves first
    assert any(b"[" * 1000 in m or b'{"x":' * 1000 in m for m in made)
    assert any(b"1" + b"0" * 100 in m for m in made)
    assert any(b"\\ud800" in m or "\ud800".encode("utf-8", "surrogatepass") in m for m in made)
    assert any(b"NaN" in m or b"Infinity" in m for m in made)
    assert all(len(m) <= 65_507 for m in made)
    assert list(itertools.islice(inputs(seeds, True, 65_507), 2000)) == made[:2000]  # seeded: repeatable


def test_a_control_message_nested_past_the_json_reader_is_a_bad_message_not_a_logged_bug(caplog):
    router = Router([])
    with caplog.at_level(logging.ERROR, logger="clockfabric.agent.service"):
        assert router.deliver(b"[" * 5000 + b"]" * 5000, ("10.0.0.1", 7299)) is False
    assert router.bad_messages == 1 and not caplog.records


def test_the_command_writes_its_record(tmp_path):
    from clockfabric.cli.bench_cmds import app

    out = tmp_path / "fuzz.json"
    result = CliRunner().invoke(app, ["fuzz", "--count", "300", "--parser", "probe-wire", "--parser", "lldp",
                                      "--out", str(out), "--json"])
    assert result.exit_code == 0, result.output
    saved = json.loads(out.read_text())
    assert [p["parser"] for p in saved["report"]["parsers"]] == ["probe-wire", "lldp"]
    assert all(t["met"] for t in saved["targets"]) and saved["figures"]["lldp"].startswith("300 inputs, ")
    bad = CliRunner().invoke(app, ["fuzz", "--count", "10", "--parser", "nope", "--out", str(out)])
    # one clear line at the console script (cli.main prints a ClockfabricError), no traceback
    assert isinstance(bad.exception, ClockfabricError) and "no fuzz parser named 'nope'" in str(bad.exception)


def test_an_exception_in_a_finalizer_is_counted_apart_from_crashes():
    class Leaky:
        def __del__(self):
            raise RuntimeError("a finalizer's own bug")

    def step(data: bytes) -> bool:
        Leaky()  # dropped at once: its finalizer raises, which Python can only print
        return True

    tally, = fuzz.run(["leaky"], 50, None, parsers={"leaky": lambda: Parser(SEEDS, step)})
    assert tally.crashes == 0 and len(tally.unraisable) == 50
    assert tally.unraisable[0] == "RuntimeError in a finalizer of function"
    assert "50 exceptions in finalizers" in fuzz.summary(tally)
