"""The workload monitor's sock_diag reader (workload/sockets.py), on real loopback sockets, against
pyroute2's reading of the same sockets (traffic/steer_kernel.FlowReader) and the bytes sent."""

from __future__ import annotations

import socket
import time

import pytest

from clockfabric.workload.sockets import KernelSockets


@pytest.fixture
def readers():
    try:
        from clockfabric.traffic.steer_kernel import FlowReader, dscp
        ours, theirs = KernelSockets(), FlowReader()
    except Exception as e:  # noqa: BLE001 - a sandbox without sock_diag
        pytest.skip(f"no sock_diag here: {e}")
    yield ours, theirs, dscp
    ours.close()
    theirs.close()


def test_a_connection_reads_as_pyroute2_reads_it_with_its_bytes_and_dscp(readers):
    ours, theirs, dscp = readers
    with socket.create_server(("127.0.0.1", 0)) as server:
        client = socket.socket()
        client.setsockopt(socket.IPPROTO_IP, socket.IP_TOS, 34 << 2)  # AF41
        client.connect(server.getsockname())
        peer, _ = server.accept()
        with client, peer:
            client.sendall(b"x" * 100_000)
            got = 0
            while got < 100_000:
                got += len(peer.recv(1 << 16))
            peer.sendall(b"y" * 5_000)
            client.recv(5_000, socket.MSG_WAITALL)
            time.sleep(0.05)  # the last ACKs land
            sport = client.getsockname()[1]
            ports = {sport, peer.getsockname()[1]}
            mine = {r.key: r for r in ours() if r.key.lport in ports and r.key.rport in ports}
            pyroute = {key: (m, info) for key, m, info in theirs.diag() if key in mine}
    assert len(mine) == 2 and set(pyroute) == set(mine)
    out = next(r for r in mine.values() if r.key.lport == sport)
    assert out.bytes_acked >= 100_000 and out.bytes_received == 5_000 and out.dscp == 34
    for key, r in mine.items():
        m, info = pyroute[key]
        assert (r.inode, r.cookie, r.dscp) == (m["idiag_inode"], m["idiag_cookie"], dscp(m))
        assert (r.bytes_acked, r.bytes_received, r.retransmits, r.cwnd) == (
            info["tcpi_bytes_acked"], info["tcpi_bytes_received"], info["tcpi_total_retrans"], info["tcpi_snd_cwnd"])
        assert (r.data_segs_out, r.data_segs_in) == (info["tcpi_data_segs_out"], info["tcpi_data_segs_in"])
        if "tcpi_rwnd_limited" in info:  # the chrono counters, where this pyroute2 decodes them
            assert r.wanting_us == max(0, info["tcpi_busy_time"] - info["tcpi_rwnd_limited"])
    back = next(r for r in mine.values() if r.key.lport != sport)
    assert out.data_segs_out == back.data_segs_in > 0 and back.data_segs_out == out.data_segs_in > 0
