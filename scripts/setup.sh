#!/usr/bin/env bash
# Install everything clockfabric needs on a fresh Debian/Ubuntu machine: system packages
# (as root), then a virtual environment in .venv with the package, its test tools and torch
# (the CPU build, for the lab's real PyTorch job).
set -euo pipefail
cd "$(dirname "$0")/.."

need=()
command -v ip >/dev/null || need+=(iproute2)
command -v iperf3 >/dev/null || need+=(iperf3)
command -v ping >/dev/null || need+=(iputils-ping)
command -v ptp4l >/dev/null || need+=(linuxptp)
[ -x /usr/sbin/lldpd ] || need+=(lldpd)  # the lab's switches run it where discover reads their tables
command -v prometheus >/dev/null || need+=(prometheus)  # the server the /metrics test scrapes with
# the controller's alerts go out through Alertmanager (one is started when no URL is given)
[ -x /usr/bin/prometheus-alertmanager ] || need+=(prometheus-alertmanager)
# the series engine the controller starts (victoria-metrics), the gate hosts write through (vmauth)
# and the rules evaluator (vmalert)
command -v victoria-metrics >/dev/null && command -v vmauth >/dev/null && command -v vmalert >/dev/null \
    || need+=(victoria-metrics)
[ -x /usr/bin/chromium ] || need+=(chromium)  # the headless browser the dashboard tests drive
[ -x /usr/bin/chromedriver ] || need+=(chromium-driver)
[ -x /usr/sbin/sshd ] || need+=(openssh-server)  # the real sshd the audit's ssh tests log in to
# the Slurm cluster the prolog test runs on a lab: controller, node daemon, sbatch and munge
[ -x /usr/sbin/slurmctld ] || need+=(slurmctld)
[ -x /usr/sbin/slurmd ] || need+=(slurmd)
command -v sbatch >/dev/null || need+=(slurm-client)
[ -x /usr/sbin/munged ] || need+=(munge)
# the throwaway server the storage tests start; Debian keeps its binaries off PATH
compgen -G '/usr/lib/postgresql/*/bin/initdb' >/dev/null || command -v initdb >/dev/null || need+=(postgresql)
# the container image (scripts/build-image.sh, make image-test): its root filesystem, podman to make
# and run it, runc where crun cannot run (cgroup v1 and v2 controllers side by side)
command -v mmdebstrap >/dev/null || need+=(mmdebstrap)
command -v podman >/dev/null || need+=(podman)
command -v runc >/dev/null || need+=(runc)
command -v python3 >/dev/null || need+=(python3)
python3 -c 'import ensurepip, venv' 2>/dev/null || need+=(python3-venv)
if [ ${#need[@]} -gt 0 ]; then
  if [ "$(id -u)" -ne 0 ]; then
    echo "setup: missing system packages (${need[*]}); run as root or: sudo apt-get install ${need[*]}" >&2
    exit 1
  fi
  echo "setup: installing ${need[*]}"
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq
  apt-get install -y -qq --no-install-recommends "${need[@]}" >/dev/null
fi

python3 -c 'import sys; sys.exit(sys.version_info < (3, 10))' || {
  echo "setup: clockfabric needs Python 3.10 or newer (found $(python3 --version))" >&2; exit 1; }
[ -x .venv/bin/python ] || python3 -m venv .venv
.venv/bin/pip install -q --disable-pip-version-check -e '.[controller,solver,test,job]'  # controller: the lab starts one; job: torch and torchft, for the lab's DDP jobs
echo "setup: ready (.venv)"
