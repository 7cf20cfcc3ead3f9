"""The host's established TCP sockets with their tcp_info, as the workload monitor reads them:
traffic's sock_diag reader (steer_kernel.FlowReader), with the fields flows need."""

from __future__ import annotations

from clockfabric.traffic.steer_kernel import FlowReader, dscp
from clockfabric.workload.flows import SocketReading


class KernelSockets:
    """Call it for a reading; made and read on one thread, in the namespace to watch (FlowReader's rule)."""

    def __init__(self) -> None:
        self.reader = FlowReader()

    def __call__(self) -> list[SocketReading]:
        return [SocketReading(key, m["idiag_inode"], m["idiag_cookie"], info["tcpi_bytes_acked"],
                              info["tcpi_bytes_received"], info["tcpi_total_retrans"], info["tcpi_rtt"],
                              info["tcpi_snd_cwnd"], info["tcpi_delivery_rate"] * 8.0, dscp(m))
                for key, m, info in self.reader.diag()]

    def close(self) -> None:
        self.reader.close()
