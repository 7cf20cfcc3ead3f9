"""A command used wrongly exits USAGE_EXIT (64), never a code the audit gives a verdict with (0 ok,
1 warn, 2 fail, 3 unknown): a typo in a Slurm prolog or a health check must not drain a node."""

import pytest

from clockfabric.errors import USAGE_EXIT

AUDIT_VERDICTS = {0, 1, 2, 3}


@pytest.mark.parametrize("argv, says", [
    (["audit", "--bogus"], "No such option"),                    # click: an unknown flag
    (["audit", "--only", "nosuch", "--lab", "x"], "names no check"),  # ours: a bad value
    (["lab", "status", "--json", "extra", "args"], "unexpected extra"),
    (["topology", "show", "/nonexistent.yaml"], "cannot read topology"),
    (["bench", "contention", "--seeds", "0"], "--seeds"),
    (["nosuchcommand"], "No such command"),
    (["audit", "--hosts", "examples/leafspine-8.yaml", "--via", "true", "--host", "h99"], "not a host of"),
])
def test_usage_errors_exit_64_not_an_audit_verdict(cli, argv, says):
    proc = cli(*argv, check=False)
    assert proc.returncode == USAGE_EXIT and USAGE_EXIT not in AUDIT_VERDICTS, (proc.returncode, proc.stderr)
    assert says in proc.stderr and "Traceback" not in proc.stderr
