#!/usr/bin/env bash
# The clockfabric demo: an emulated dual-plane cluster on this machine, checked, audited, its clocks
# synced and its one-way delays measured, monitored while a link flaps (the agents fail traffic
# over to the other plane), steered around a slow spine link, impaired, loaded and taken down. Every step is a plain `clockfabric` command you can run yourself.
set -euo pipefail
cd "$(dirname "$0")/.."
LAB=demo
TOPO=examples/dualplane-8.yaml
step() { printf '\n\033[1m== %s\033[0m\n' "$*"; }
trap 'clockfabric lab down "$LAB" >/dev/null 2>&1 || true' EXIT   # never leave the lab behind

if [ "$(id -u)" -ne 0 ]; then echo "demo: the lab needs root (network namespaces); run: sudo make demo" >&2; exit 1; fi
clockfabric lab down "$LAB" >/dev/null 2>&1 || true

step "topology: 8 hosts, 2 planes, each a leaf-spine with 2 leaves and 2 spines"
clockfabric topology show "$TOPO"

step "lab up: a namespace per host and switch, veth cables, htb link speeds, ECMP routing"
clockfabric lab up "$TOPO" --name "$LAB"

step "lab check: every host reaches every other, on every plane and every spine path"
clockfabric lab check --lab "$LAB" | tail -n 4

step "fleet audit: versions, memory, PCIe, GPUs, MTU, names, NICs, cabling (LLDP), rail reach and latency"
# (the all-reduce check wants links this 2-core machine can forward at full rate: `make test` runs
#  it on 25 Mbit/s labs, with six planted faults; see docs/audit.md)
clockfabric audit --lab "$LAB" --skip collective || echo "(audit exit code $?)"

step "a cabling mistake: h1's and h5's plane-0 cables swapped; the audit names both NICs (exit 2)"
clockfabric lab swap h1:eth0 h5:eth0 --lab "$LAB"
clockfabric audit --lab "$LAB" --only backend --skip backend.latency || echo "(audit exit code $?)"
clockfabric lab swap h1:eth0 h5:eth0 --lab "$LAB"

step "each host runs on its own virtual clock (the ground truth for clock sync)"
clockfabric lab clock show --lab "$LAB"

step "clock sync: an agent per host probes its peers; errors judged against the lab's truth"
clockfabric sync --lab "$LAB" --seconds 25 --keep

step "one-way delays, per direction, from the synced clocks (µs)"
clockfabric owd --lab "$LAB"

step "real traffic: iperf3 h0 -> h7 across the spines"
clockfabric lab traffic h0 h7 --seconds 3 --lab "$LAB"

step "a spine link fails: the fabric routes around it, and lab check names the lost paths"
clockfabric lab link down p0-leaf0 p0-spine1 --lab "$LAB"
clockfabric lab check --lab "$LAB" | tail -n 3 || true
clockfabric lab link up p0-leaf0 p0-spine1 --lab "$LAB"

step "path steering: which source port takes which spine, learned with TTL-limited probes"
clockfabric paths --lab "$LAB" --from h0 --to h4 --plane 0

step "p0-leaf0 -> p0-spine0 at a quarter rate: a 4-host all-reduce on plane 0, ecmp vs owd (ours)"
clockfabric lab rate p0-leaf0 p0-spine0 25mbit --lab "$LAB"
for s in ecmp owd; do
  clockfabric bench allreduce --lab "$LAB" --hosts h0,h4,h1,h5 --planes 0 --subflows 2 --sizes 8M --iters 1 \
    --scheduler "$s" | grep -E "^# scheduler|\(8M\)"
done
clockfabric lab rate p0-leaf0 p0-spine0 100mbit --lab "$LAB"

step "fleet monitoring: a controller on h0, an agent on every switch and host, pushing to it"
clockfabric monitor --lab "$LAB" --seconds 8 --keep

step "a host NIC flaps twice (1 s down, 1 s up)"
clockfabric lab flap h3 p1-leaf0 --down 1s --up 1s --count 2 --lab "$LAB"

step "the controller has every down and up, on both ends of the cable, stamped by the synced clocks"
clockfabric events --lab "$LAB" --kind link_down
clockfabric events --lab "$LAB" --kind link_up

step "fault tolerance: every agent moved its traffic to h3 off plane 1 within ms (back after a 5 s hold-down)"
clockfabric events --lab "$LAB" --kind failover_moved

step "monitor again: the flapping alert is open (it resolves after a quiet minute)"
clockfabric monitor --lab "$LAB" --seconds 3

step "a cabling mistake while monitored: h1's and h5's plane-0 cables swapped; the leaves hear it over LLDP"
clockfabric lab swap h1:eth0 h5:eth0 --lab "$LAB"
sleep 6
clockfabric monitor --lab "$LAB" --seconds 2 | grep -E "topology_drift" || echo "(no drift alert yet)"
clockfabric lab swap h1:eth0 h5:eth0 --lab "$LAB"

step "lab status: live link state, rates and carrier changes, read from the kernel"
clockfabric lab status "$LAB" | grep -E "^lab|h3:eth1|p0-leaf0:swp6"

step "lab check again: all healthy"
clockfabric lab check --lab "$LAB" | tail -n 1

step "lab down"
clockfabric lab down "$LAB"
trap - EXIT
