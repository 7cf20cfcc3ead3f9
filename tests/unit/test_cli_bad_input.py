"""Bad input to the `clockfabric` command, as a careless operator types it: every invocation here
exits USAGE_EXIT (64) with one line on stderr and no traceback. Each fails before it touches a lab or anything
that needs root, so the whole corpus runs in-process in seconds."""

from __future__ import annotations

import os
import sys

import pytest

from clockfabric.cli.main import main
from clockfabric.errors import USAGE_EXIT
from clockfabric.topology import dumps, leafspine

TOKEN = "t" * 32
NOLAB = "no-such-lab-x9"

# {d}: a directory of files made below (good.yaml a valid topology, tok a valid token file)
CORPUS: list[str] = [
    # unknown commands, options and names
    "frobnicate", "topology frob", "lab frob", "bench frob", "topology generate torus",
    "paths --bogus", "agent --frequency 3", "controller --token-file {d}/tok --bogus",
    "lab up {d}/good.yaml --name", "events --limit",
    # missing arguments and options
    "topology show", "lab up", "lab exec", "lab exec h0", "lab rate h0", "lab rate h0 leaf0", "lab swap h0:eth0",
    "lab clock step h0", "lab link down h0", "paths", "paths --from h0", "paths --to h1", "switch-agent",
    "controller", "lab flap h0",
    # wrong types and ranges
    "agent --peers 0", "agent --peers many", "agent --window 0.1", "agent --update 0", "agent --probe-rate 0",
    "agent --probe-rate 1e9", "agent --metrics-port 70000", "agent --metrics-port -1", "agent --probe-budget 1",
    "agent --hold-down -1", "agent --lldp-interval -5", "agent --window nan", "sync --peers 0",
    "sync --window abc", "paths --from h0 --to h1 --ports 0", "paths --from h0 --to h1 --ports 65",
    "paths --from h0 --to h1 --dport 0", "paths --from h0 --to h1 --ttl 0", "paths --from h0 --to h1 --plane -1",
    "paths --from h0 --to h1 --seed x", "events --limit 0", "events --limit x", "controller --stale 0.1",
    "controller --token-file {d}/tok --stale abc", "topology generate leafspine --hosts many",
    "topology generate leafspine --mtu big", "topology generate multirail --planes x",
    "lab up {d}/good.yaml --seed x", "lab up {d}/good.yaml --max-drift fast", "audit --ssh-port x",
    "tls new {d}/pki", "tls new {d}/pki --name 'bad name'", "tls new {d}/pki --name -x.example",
    "qos set J --class gold", "qos set J --class critical --weight 0", "qos set J --class critical --weight 101",
    "qos set 'a b' --class critical", "qos clear 'a b'", "qos set J", "job run --name J --qos gold -- true",
    "job run --name J --qos critical:x -- true",
    # bad durations, rates and addresses
    "sync --lab " + NOLAB + " --seconds forever", "lab up {d}/bad.yaml --max-offset 5parsecs",
    "events --controller http://127.0.0.1:9 --token-file {d}/tok --since yesterday",
    "events --controller http://127.0.0.1:9 --token-file {d}/tok --since -5m",
    "monitor --lab " + NOLAB + " --seconds soon",
    "topology generate leafspine --host-rate fast", "topology generate leafspine --fabric-rate 10parsec",
    "topology generate multirail --host-rate -1gbit", "topology generate leafspine --hosts 0",
    "topology generate leafspine --leaves 0", "topology generate leafspine --spines -1",
    "topology generate leafspine --mtu 10", "topology generate leafspine --buffer -3",
    "topology generate multirail --planes 0", "topology generate leafspine --hosts 3 --leaves 5",
    "controller --token-file {d}/tok --listen nowhere", "controller --token-file {d}/tok --listen 1.2.3.4:99999",
    "controller --token-file {d}/tok --listen :7400", "controller --token-file {d}/tok --listen host:port",
    "controller --token-file {d}/tok --series-url nowhere", "controller --token-file {d}/tok --series-retention soon",
    "controller --token-file {d}/tok --rules {d}/missing.yaml",
    "controller --token-file {d}/tok --rules {d}/bad.yaml --no-rules",
    # missing, unreadable and malformed files
    "topology show {d}/missing.yaml", "topology show {d}/bad.yaml", "topology show {d}/list.yaml",
    "topology show {d}/empty.yaml", "topology show {d}/binary.yaml", "topology show {d}/wrongtype.yaml",
    "topology show {d}/badlink.yaml", "topology show {d}/scalar.yaml",
    "lab up {d}/missing.yaml", "lab up {d}/bad.yaml", "lab up {d}/binary.yaml", "lab up {d}/wrongtype.yaml",
    "agent --host h0 --topology {d}/missing.yaml", "agent --host h0 --topology {d}/bad.yaml",
    "agent --host h0 --topology {d}/list.yaml", "agent --host h9 --topology {d}/good.yaml",
    "agent --host h0 --topology {d}/good.yaml --reference h9",
    "agent --host h0 --topology {d}/good.yaml --controller http://127.0.0.1:9",
    "agent --host h0 --topology {d}/good.yaml --controller http://127.0.0.1:9 --token-file {d}/short",
    "agent --host h0 --topology {d}/good.yaml --collector no-such-collector",
    "agent --host h0 --topology {d}/good.yaml --disable no-such-service",
    "controller --token-file {d}/missing-token", "controller --token-file {d}/short",
    "controller --token-file {d}/sub", "controller --token-file {d}/tok --topology {d}/bad.yaml",
    "controller --token-file {d}/tok --topology {d}/missing.yaml",
    "controller --token-file {d}/tok --config {d}/bad.yaml --db {d}/c.db",
    "controller --token-file {d}/tok --config {d}/missing.yaml --db {d}/c.db",
    "controller --token-file {d}/tok --config {d}/list.yaml --db {d}/c.db",
    "controller --token-file {d}/tok --config {d}/badconfig.yaml --db {d}/c.db",
    "controller --token-file {d}/tok --tls-cert {d}/good.yaml",
    "controller --token-file {d}/tok --tls-cert {d}/good.yaml --tls-key {d}/good.yaml",
    "audit --hosts {d}/missing.yaml", "audit --hosts {d}/bad.yaml", "audit --hosts {d}/sub",
    "audit --hosts {d}/good.yaml --expect {d}/bad.yaml", "audit --hosts {d}/good.yaml --only no-such-check",
    "audit --hosts {d}/good.yaml --controller http://127.0.0.1:9",
    # a directory where a file is expected, and databases that cannot be opened
    "topology show {d}/sub", "lab up {d}/sub", "agent --host h0 --topology {d}/sub",
    "controller --token-file {d}/tok --db {d}/sub", "controller --token-file {d}/tok --db {d}/notadb",
    "controller --token-file {d}/tok --db {d}/nodir/c.db", "controller --token-file {d}/tok --db sqlite://relative",
    "controller --token-file {d}/tok --db mysql://x/y", "controller --token-file {d}/tok --db ''",
    "topology generate leafspine -o {d}/sub", "topology generate leafspine -o {d}/nodir/t.yaml",
    # conflicting flags
    "agent --host h0 --lab " + NOLAB + " --topology {d}/good.yaml",
    "controller --token-file {d}/tok --lab " + NOLAB + " --topology {d}/good.yaml",
    "paths --lab " + NOLAB + " --from h0 --to h1 --plane 0 --nic eth0",
    "audit --lab " + NOLAB + " --hosts {d}/good.yaml", "audit --lab " + NOLAB + " --via 'kubectl exec {{host}} --'",
    "agent --host h0 --topology {d}/good.yaml --collector nvidia --no-collector nvidia",
    # unknown labs, hosts and links
    "lab status " + NOLAB, "lab exec --lab " + NOLAB + " h0 -- true",
    "lab check --lab " + NOLAB, "lab clock show --lab " + NOLAB, "owd --lab " + NOLAB,
    "sync --lab " + NOLAB, "monitor --lab " + NOLAB, "switch-agent --switch s0 --lab " + NOLAB,
    "events --lab " + NOLAB, "paths --lab " + NOLAB + " --from h0 --to h1",
    "lab flap h0 leaf0 --lab " + NOLAB, "agent --host h0 --lab " + NOLAB, "agent --host h0",
    # discovery: agents with no fleet file, hosts held for approval, switches' tables
    "agent --discover", "agent --discover --host h0 --topology {d}/good.yaml",
    "agent --discover --host h0 --controller http://127.0.0.1:9 --token-file {d}/tok",
    "agent --discover --host 'h 0' --controller http://127.0.0.1:9 --token-file {d}/tok",
    "agent --host h0 --topology {d}/good.yaml --address 10.0.0.9",
    "controller --token-file {d}/tok --enroll maybe",
    "controller --token-file {d}/tok --enroll pending --enroll-unknown",
    "hosts approve --controller http://127.0.0.1:9 --token-file {d}/tok",
    "hosts approve h1 --all --controller http://127.0.0.1:9 --token-file {d}/tok",
    "hosts reject --controller http://127.0.0.1:9 --token-file {d}/tok",
    "hosts pending --controller http://127.0.0.1:9 --token-file {d}/tok",
    "hosts frob", "hosts pending --lab " + NOLAB,
    "discover --controller http://127.0.0.1:9 --token-file {d}/tok --lldp-file leaf0",
    "discover --controller http://127.0.0.1:9 --token-file {d}/tok --lldp-file leaf0={d}/missing.json",
    "discover --controller http://127.0.0.1:9 --token-file {d}/tok --lldp-file leaf0={d}/good.yaml",
    "discover --controller http://127.0.0.1:9 --token-file {d}/tok --lldp-file leaf0={d}/binary.yaml",
    "discover --controller http://127.0.0.1:9 --token-file {d}/tok --switch leaf0=",
    "discover --controller http://127.0.0.1:9 --token-file {d}/tok --switch leaf0 --snmp leaf0",
    "discover --controller http://127.0.0.1:9 --token-file {d}/tok --lldpcli ''",
    "discover --controller http://127.0.0.1:9 --token-file {d}/tok",
]


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    d = tmp_path_factory.mktemp("bad-input")
    (d / "good.yaml").write_text(dumps(leafspine(4, 2, 2)))
    (d / "bad.yaml").write_text("hosts: [h0, h1\n  nodes: {\n")
    (d / "list.yaml").write_text("- 1\n- 2\n")
    (d / "scalar.yaml").write_text("42\n")
    (d / "empty.yaml").write_text("")
    (d / "binary.yaml").write_bytes(b"\xff\xfe\x00\x81garbage")
    (d / "wrongtype.yaml").write_text("name: x\nhosts: abc\nswitches: []\nlinks: []\n")
    (d / "badlink.yaml").write_text(dumps(leafspine(4, 2, 2)).replace("h0:eth0", "h0:eth0:x", 1))
    (d / "badconfig.yaml").write_text("flapping: {window_s: fast}\nno_such_detector: {}\n")
    (d / "tok").write_text(TOKEN)
    (d / "short").write_text("abc")
    (d / "notadb").write_text("this is not a database, it is a text file" * 100)
    (d / "sub").mkdir()
    return d


def run(argv: list[str], monkeypatch, capsys) -> tuple[int, str]:
    """`clockfabric *argv` in-process, as the console script runs it: its exit code and stderr."""
    monkeypatch.setattr(sys, "argv", ["clockfabric", *argv])
    with pytest.raises(SystemExit) as exit_:
        main()
    return exit_.value.code, capsys.readouterr().err


@pytest.mark.parametrize("line", CORPUS)
def test_bad_input_is_one_line_and_exits_usage(line, files, monkeypatch, capsys):
    import shlex

    for var in ("CLOCKFABRIC_LAB", "CLOCKFABRIC_NODE"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.chdir(files)
    code, err = run(shlex.split(line.format(d=files)), monkeypatch, capsys)
    lines = [ln for ln in err.splitlines() if ln.strip()]
    assert code == USAGE_EXIT and "Traceback" not in err and len(lines) == 1, f"exit {code}:\n{err}"
    assert lines[0].startswith("error: "), err


def test_the_corpus_is_large_and_distinct():
    assert len(CORPUS) >= 100 and len(set(CORPUS)) == len(CORPUS)


@pytest.mark.parametrize("line, both", [
    ("agent --host h0 --lab " + NOLAB + " --topology {d}/good.yaml", ("--lab", "--topology")),
    ("controller --token-file {d}/tok --lab " + NOLAB + " --topology {d}/good.yaml", ("--lab", "--topology")),
    ("paths --lab " + NOLAB + " --from h0 --to h1 --plane 0 --nic eth0", ("--plane", "--nic")),
    ("audit --lab " + NOLAB + " --hosts {d}/good.yaml", ("--lab", "--hosts")),
    ("agent --host h0 --topology {d}/good.yaml --collector nvidia --no-collector nvidia",
     ("--collector", "--no-collector")),
])
def test_conflicting_flags_name_both(line, both, files, monkeypatch, capsys):
    import shlex

    code, err = run(shlex.split(line.format(d=files)), monkeypatch, capsys)
    assert code == USAGE_EXIT and all(flag in err for flag in both), err


def test_unreadable_file_as_a_user(files, monkeypatch, capsys):
    if os.geteuid() == 0:
        pytest.skip("root reads any file")
    locked = files / "locked.yaml"
    locked.write_text("x: 1\n")
    locked.chmod(0)
    code, err = run(["topology", "show", str(locked)], monkeypatch, capsys)
    assert code == USAGE_EXIT and "cannot read" in err
