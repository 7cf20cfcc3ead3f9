"""`clockfabric bench contention`: the schedulers against each other where flows collide.

The package: model (the lab, its jobs, the ideal), scenarios (the runs), summary (medians and
verdicts), run (the whole benchmark), command (its options and tables).

Lab (`fabric`): a leaf-spine of 8 hosts (h0-h3 under leaf0, h4-h7 under leaf1) and 2
spines (or `spines`, 2-4), or the same with 2 spines on each of 2 planes (dual-plane: a NIC
per plane, subflow i on plane i % 2). Hosts at HOST_RATE and leaf-spine links at FABRIC_RATE, so the uplinks, not the
NICs, set the pace and where each flow lands matters. Job A is a ring all-reduce over h0,
h4, h1, h5 (every hop crosses the spines), job B the same over h2, h6, h3, h7. "leaf0" and
"spine0" below are plane 0's on a dual-plane lab. Scenarios:

  none            job A alone: nothing to fix
  two-alltoall    jobs A and B as all-to-alls (oneshot: every peer at once, as NCCL's
                  grouped sends), at once
  two-allreduce   jobs A and B at once: four flows per direction share the two spines
  elephants       job A, while iperf3 elephants (h2 -> h6, h7 -> h3, TCP CUBIC) are pinned
                  on spine0 by source ports learned for it
  degraded        job A, with leaf0-spine0 at a quarter of its rate

Each scenario runs under each scheduler, `seeds` times (a hashed run gets new kernel
source ports each time, so seeds are fresh ECMP draws). Per run: each job's time per
all-reduce and busbw. Per scenario and scheduler: the median over seeds of the slowest
job's time, and its ratio to ecmp's, to least-outstanding's, and to the ideal: the time
the link rates allow with every flow perfectly placed (ideal_time_s below). Two more
columns say what was possible at all: the ideal at TCP/IP's ceiling (at MTU 1500, 1448
bytes of every 1514-byte frame carry data, and a link carries half a 66-byte ack per frame
for the other way's data: 0.936 of its bytes are data; at 9000, 0.989), and ecmp's time over
the ideal, the most any scheduler could gain over ecmp here.

The report also judges `owd` against its targets (TARGETS below): per scenario with
contention, whether it is 1.5x faster than ecmp, 1.2x faster than least-outstanding and
within 10% of the ideal; with nothing to fix, whether it is within 3% of the best baseline.
A ratio is marked out of reach where no scheduler could have met it: the baseline itself ran
within that ratio of the bound at TCP's ceiling (the ideal, except with elephants: there the
ideal gives the jobs a TCP-fair share of the elephants' spine, and a scheduler may take
more, so the bound gives them all of it). Each judged ratio carries a 90% bootstrap
interval over the seeds: a baseline's median is one of a few draws of paths that spread by
tens of percent, so a ratio a point or two from its bar may read met or short by the draw.

The transport moves its bytes in Python, so a CPU-starved machine slows every scheduler.
Each run records the CPU steal meanwhile (on a VM: time the hypervisor gave elsewhere), and
the report its median, so a slow run can be told from a slow scheduler.

Every cable runs at one MTU (`mtu`, MTU below). The port buffers hold the same bytes at
any MTU (BUFFER_BYTES: 200 full-sized frames at 1500), so a larger MTU means fewer, larger
packets in the same queues, not deeper queues.

Every scheduler's subflows run with a fixed receive window (RCVBUF, `rcvbuf`), so the
kernel's autotuning cannot grow it until the lab's FIFOs overflow. Every host runs
its agent, as a fleet would. Subflows that the agents placed on spines (learned placement:
`owd`'s) then take their share of RCVBUF_BUDGET (`rcvbuf_budget`) instead: split among the
subflows that the jobs under the leaf hold on that spine, so a job alone keeps wide windows
against someone else's elephant flows, and jobs that crowd an uplink keep narrow ones.

With `standby` (the default), every subflow on learned ports has a standby beside it on its
spine, at work only while traffic from outside the jobs' claims crowds that spine
(collective/standby.py): against the elephants, then, a job holds two subflows per peer on
their spine, and one elsewhere.

With elephants, each run also records what the jobs left them: their rate alone just before
the run (the jobs not yet started), and over the job's timed iterations, from the bytes
their senders' sockets had acknowledged (sock_diag). The report's `outside_kept` is the
second over the first: a scheduler's speed bought from someone else's flows shows there.

Source ports (`placement`): by default each scheduler runs as it would ship, `owd` on ports
learned per spine and the baselines on the kernel's (hashed). `placement="learned"` puts
every scheduler on learned ports, so what the path discovery buys and what the scheduling
buys can be told apart.
"""

from clockfabric.bench.contention.model import (
    ALLTOALL_ALGORITHM,
    ALONE_S,
    BUFFER_BYTES,
    ELEPHANT_CONGESTION,
    ELEPHANT_SECONDS,
    ELEPHANTS,
    FABRIC_RATE,
    FABRICS,
    HOST_RATE,
    JOB_A,
    JOB_B,
    MTU,
    MTUS,
    QUIET_SLACK,
    RCVBUF,
    RCVBUF_BUDGET,
    SCENARIOS,
    SETTLE_S,
    SPINES,
    TARGETS,
    WARMUP,
    Plan,
    Run,
    busbw_gbps,
    flows,
    ideal_time_s,
    jobs_of,
    leaf_of,
    plane0,
    spine_paths,
    tcp_payload,
    topology,
)
from clockfabric.bench.contention.run import rejudge, run
from clockfabric.bench.contention.scenarios import (
    Outsiders,
    mbps,
    run_one,
    run_scenario,
    still_running,
)
from clockfabric.bench.contention.summary import judge, median_steal, outside, standby_share, summarize

__all__ = ["ALLTOALL_ALGORITHM", "ALONE_S", "BUFFER_BYTES", "ELEPHANTS", "ELEPHANT_CONGESTION", "ELEPHANT_SECONDS",
           "FABRICS", "FABRIC_RATE", "HOST_RATE", "JOB_A", "JOB_B", "MTU", "MTUS", "QUIET_SLACK",
           "RCVBUF", "RCVBUF_BUDGET", "SCENARIOS", "SETTLE_S", "SPINES", "TARGETS", "WARMUP", "Outsiders", "Plan",
           "Run", "busbw_gbps", "flows", "ideal_time_s", "jobs_of", "judge", "leaf_of", "mbps", "median_steal",
           "outside", "plane0", "rejudge", "run", "run_one", "run_scenario",
           "spine_paths", "standby_share", "still_running", "summarize", "tcp_payload", "topology"]
