"""The audit's report gathered through the hosts seam: each host's own Host.run, the real report
module on this machine, and a host ssh cannot reach named in one line while the rest report."""

from __future__ import annotations

import socket
import sys

from clockfabric.audit.gather import HostsSession, gather
from clockfabric.hosts.local import LocalHost
from clockfabric.hosts.options import SshOptions
from clockfabric.hosts.ssh import SshHost


def test_reports_come_back_through_each_hosts_run_and_an_unreachable_host_is_one_line():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        closed = s.getsockname()[1]
    hosts = {"here": LocalHost("here", "127.0.0.1"),
             "gone": SshHost("gone", "127.0.0.2", SshOptions(user="root", port=closed))}
    session = HostsSession(hosts, lambda host: [sys.executable])
    spec = {"nics": [], "names": {}, "reach": {}, "sources": {}, "pings": 0, "lldp_wait_s": 0.0}
    reports, missing = gather({h: spec | {"host": h} for h in hosts}, session, timeout_s=30)
    assert set(reports) == {"here"} and isinstance(reports["here"], dict) and reports["here"]
    assert set(missing) == {"gone"} and "Connection refused" in missing["gone"] and "\n" not in missing["gone"]
