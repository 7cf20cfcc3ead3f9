"""Every benchmark, declared: its name, the module that registers its command, its one-line help
(what `clockfabric bench` lists) and its meta, so the list, `bench --help` and `bench report`
import no benchmark's module (their stacks, scipy, psycopg, fastapi, torch, cost a second of CPU);
`clockfabric bench NAME` imports NAME's alone, which registers the command alone (its help and
meta are said here only: Registry.declare). The order is the order `clockfabric bench` lists them: the lab, clocks,
monitoring, failover, the collective and path steering, the audit, workload monitoring, packet
authentication, fuzzing the parsers, spares (ZeRO-1's cost and the measured goodput apart), the
dashboard, the chaos soak."""

from typing import Any

from clockfabric.bench.harness import BENCHMARKS


def _declare(name: str, module: str, help: str, **meta: Any) -> None:
    BENCHMARKS.declare(name, f"clockfabric.bench.{module}", help=help, **meta)


_declare("lab-bringup", "bringup.command", "Lab bring-up and tear-down at 8-64 hosts, against the same lab built with "
         "one ip/tc process per step.")
_declare("clocksync", "clocksync.command", "Clock sync on 8- and 32-host labs, idle and loaded, against NTP-style and "
         "ptp4l in the same run.")
_declare("clocksync-faults", "clocksync.faults_bench", "Clock sync faults (reference loaded first or killed, two "
         "hosts loaded, a clock stepped, one at 500 ppm), repeated: the worst repeat and the spread.")
_declare("clocksync-solve", "clocksync.solve", "The network-effect clock solve on 1k-100k synthetic hosts: time and "
         "accuracy, against a sparse direct solve.")
_declare("fleet-scale", "controller.fleet_scale", "Simulated agents pushing to a controller and writing their series "
         "through its gate every 10 s, up to 10,000: samples dropped, push p99, the detectors' feed, CPU a "
         "host-second, bytes a sample.")
_declare("controller-scale", "controller.scale", "Simulated agents against 1 and 3 controller replicas, SQLite and "
         "PostgreSQL: pushes/s, p99, growth, failover.")
_declare("agent-overhead", "monitoring.agent_overhead", "Fleet monitoring: what an agent costs its host (CPU, RSS), "
         "against the agent probing at full rate.")
_declare("series-disk", "monitoring.series_disk", "A day of a real lab fleet's series on the series engine's disk "
         "at 10 s, data a sample and index a series apart, and a year of 100,000 hosts, against the SQL store.")
_declare("monitor-latency", "monitoring.latency", "Fleet monitoring: link flap to event at the controller, against "
         "a 1 s and a 15 s scrape.")
_declare("failover", "steering.failover", "A real DDP job through link and NIC failures, without and with the agents.")
_declare("transparent", "steering.transparent", "Transparent mode: a DDP job under elephant flows, agents off against "
         "agents steering.")
_declare("allreduce", "collective.command", "All-reduce between lab hosts over TCP subflows pinned to planes; "
         "nccl-tests' columns.", running_lab=True)
_declare("alltoall", "collective.command", "All-to-all between lab hosts over TCP subflows pinned to planes; "
         "nccl-tests' columns. Sizes are bytes per rank's send buffer, rounded down to a multiple of 4 x hosts.",
         running_lab=True)
_declare("allreduce-vs-tcp", "collective.vs_tcp", "All-reduce busbw (ring, hier; 1-8 subflows) against link rates and "
         "against plain TCP (iperf3) along the ring.")
_declare("contention", "contention.command", "The schedulers where flows collide, on an 8-host leaf-spine lab it "
         "builds and removes.")
_declare("audit", "audit.fleet", "Fleet audit: a 32-host lab's audit time, a planted slow link found, false fails over "
         "clean runs.")
_declare("slurm-prolog", "audit.slurm_prolog", "The Slurm prolog's passive audit of a healthy node, end to end, "
         "against a baseline in the same run.")
_declare("workload", "workload.command", "Workload root cause: fault classes injected on a lab with two jobs, `job "
         "why`'s first verdict scored against the truth.")
_declare("rootcause", "rootcause.command", "Workload root cause on random cases: each its own fabric, jobs and fault "
         "(class, tier, intensity); `job why`'s verdict and the link or host it names, per class and tier.")
_declare("workload-healthy", "workload.healthy", "Workload monitoring's false alarms: two healthy jobs and background "
         "traffic for minutes, every slow-flow alert and mismatch.")
_declare("workload-cost", "workload.cost", "Workload monitoring: CPU per update at 4 jobs x 16 flows, against the bare "
         "sock_diag read; a DDP job's step time, paired runs with and without it.")
_declare("qos", "qos.command", "A critical DDP job beside a scavenger bulk job, on a fabric with classes and one "
         "without: step time with and without QoS.")
_declare("auth-cost", "auth.cost", "The fleet key: per-datagram seal/open time and the agent CPU it adds")
_declare("fuzz", "fuzz.command", "Mutation fuzzing of every parser: crashes, forgeries taken, dead loops")
_declare("spares", "spares.command", "Spares against checkpoint restarts and torchft: failure -> next step, goodput, "
         "per-step cost")
_declare("spares-zero", "spares.zero", "ZeRO-1 in the elastic wrapper (each shard mirrored on its buddy) against "
         "ZeRO-1 without it and plain DDP: per-step time, paired runs")
_declare("spares-launchers", "spares.launchers", "Spares under each launcher (the lab's, ssh from a fleet file, "
         "torchrun, srun): failure -> next step p95 against the lab's, split by phase")
_declare("spares-goodput", "spares.goodput", "Goodput measured: ours, checkpoint restarts and torchft, each a long run "
         "with a failure every --every seconds")
_declare("dashboard", "controller.dashboard", "The dashboard on a synthetic 2,000-host fleet: route p95 and first "
         "render")
_declare("chaos", "monitoring.chaos", "A lab fleet under random faults: nothing acknowledged lost, every fault seen")
