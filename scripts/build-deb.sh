#!/usr/bin/env bash
# Build the Debian packages a fleet installs from, from this checkout:
#   clockfabric-agent       every host: the agent's dependencies only, its unit
#   clockfabric-reference   the clock's reference host: the agent and the solver's SciPy
#   clockfabric-controller  the controller's machine: the controller extras (SciPy too), both units
# Each holds a venv at /opt/clockfabric made here with pip (from the index or its cache), so
# nothing downloads at install time; it is bound to this machine's Python minor version and
# architecture. Usage: scripts/build-deb.sh [-o OUTDIR] [agent|reference|controller]...  (default: all)
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
out=$ROOT/dist
packages=()
while [ $# -gt 0 ]; do
  case $1 in
    -o) [ $# -ge 2 ] || { echo "build-deb: -o needs a folder, e.g. -o dist" >&2; exit 64; }; out=$2; shift 2 ;;
    agent|reference|controller) packages+=("$1"); shift ;;
    *) echo "build-deb: unknown argument '$1'; usage: scripts/build-deb.sh [-o OUTDIR] [agent|reference|controller]..." >&2
       exit 64 ;;
  esac
done
[ ${#packages[@]} -gt 0 ] || packages=(agent reference controller)
# the venv runs on the hosts' python3, so it is made with Debian's, never one on PATH (pyenv, conda)
PYTHON=/usr/bin/python3
for tool in dpkg-deb dpkg $PYTHON; do
  command -v $tool >/dev/null || { echo "build-deb: $tool is missing; run on Debian or Ubuntu (apt-get install dpkg python3)" >&2; exit 1; }
done
$PYTHON -c 'import ensurepip, venv' 2>/dev/null || {
  echo "build-deb: $PYTHON cannot make a venv; apt-get install python3-venv" >&2; exit 1; }

PREFIX=/opt/clockfabric
version=$(sed -n 's/^version = "\([^"]*\)"$/\1/p' "$ROOT/pyproject.toml" | head -n 1)  # no tomllib before 3.11
[ -n "$version" ] || { echo "build-deb: no version = \"...\" line in $ROOT/pyproject.toml" >&2; exit 1; }
arch=$(dpkg --print-architecture)
py=$($PYTHON -c 'import sys; print(f"{sys.version_info[0]}.{sys.version_info[1]}")')
py_next=$($PYTHON -c 'import sys; print(f"{sys.version_info[0]}.{sys.version_info[1] + 1}")')
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
mkdir -p "$out"

# pip builds from a copy, so the checkout gets no build/ or egg-info
mkdir "$work/src"
(cd "$ROOT" && tar --exclude=__pycache__ -cf - pyproject.toml README.md LICENSE src) | tar -xf - -C "$work/src"

build() {  # build PACKAGE EXTRAS UNITS DEPENDS SUMMARY [extra control lines]
  local name=$1 extras=$2 units=$3 depends=$4 summary=$5 more=${6:-}
  local root=$work/$name venv=$work/$name$PREFIX
  $PYTHON -m venv "$venv"
  "$venv/bin/pip" install -q --no-compile "$work/src$extras"
  "$venv/bin/python" -m pip uninstall -q -y pip setuptools
  # the venv is moved to /opt/clockfabric: its scripts' #! lines and activate name it there
  grep -rlI --null "$root" "$venv" | xargs -0 -r sed -i "s|$root||g"
  find "$venv" -name __pycache__ -prune -exec rm -rf {} +
  # the dependencies' own test suites (numpy's, scipy's, networkx's): nothing on a host runs them
  find "$venv/lib" -mindepth 4 -type d -name tests -not -path "*/site-packages/clockfabric/*" -prune \
      -exec rm -rf {} +
  # byte code made here, naming the installed paths; /opt stays read-only to the services
  $PYTHON -m compileall -q -j 0 -s "$root" -p / "$venv/lib" >/dev/null
  install -d "$root/usr/bin" "$root/lib/systemd/system" "$root/etc/default" "$root/DEBIAN"
  ln -s "$PREFIX/bin/clockfabric" "$root/usr/bin/clockfabric"
  local unit
  for unit in $units; do
    install -m 644 "$ROOT/deploy/systemd/$unit.service" "$root/lib/systemd/system/"
    install -m 644 "$ROOT/deploy/debian/$unit.default" "$root/etc/default/$unit"
    echo "/etc/default/$unit" >> "$root/DEBIAN/conffiles"
  done
  local script
  for script in postinst prerm postrm; do
    sed "s|@UNITS@|$(printf '%s.service ' $units | sed 's/ $//')|g" "$ROOT/deploy/debian/$script" > "$root/DEBIAN/$script"
    chmod 755 "$root/DEBIAN/$script"
  done
  cat > "$root/DEBIAN/control" <<EOF
Package: $name
Version: $version
Architecture: $arch
Maintainer: clockfabric <clockfabric@users.noreply.github.com>
Installed-Size: $(du -sk --exclude=DEBIAN "$root" | cut -f1)
Depends: python3 (>= $py), python3 (<< $py_next), python3-venv, adduser, init-system-helpers, $depends
Section: net
Priority: optional
Homepage: https://github.com/clockfabric/clockfabric
${more}Description: $summary
 clockfabric is a software-only control layer for AI cluster fabrics: synced clocks,
 one-way delays, audit, monitoring and path control. This package holds a Python
 venv at $PREFIX (built for Python $py), /usr/bin/clockfabric and systemd units.
EOF
  dpkg-deb --root-owner-group -Zzstd --build "$root" "$out/${name}_${version}_${arch}.deb" >/dev/null
  echo "$out/${name}_${version}_${arch}.deb"
}

for package in "${packages[@]}"; do
  case $package in
    agent) build clockfabric-agent "" clockfabric-agent "iproute2" \
      "clockfabric host agent: clock sync, one-way delays, link telemetry, failover" \
      "Recommends: openssh-client
Suggests: linuxptp
" ;;
    # the reference's agent runs the solver: the agent's package and SciPy, in its place
    reference) build clockfabric-reference "[solver]" clockfabric-agent "iproute2" \
      "clockfabric host agent for the clock's reference host: the agent and its solver" \
      "Recommends: openssh-client
Suggests: linuxptp
Provides: clockfabric-agent (= $version)
Conflicts: clockfabric-agent
Replaces: clockfabric-agent
" ;;
    # the controller's machine runs an agent too: this package carries both, in place of the agent's
    controller) build clockfabric-controller "[controller]" "clockfabric-controller clockfabric-agent" \
      "iproute2, victoria-metrics, prometheus-alertmanager" \
      "clockfabric controller: fleet state, detectors, alerts, dashboard" \
      "Recommends: openssh-client
Suggests: linuxptp, postgresql
Provides: clockfabric-agent (= $version)
Conflicts: clockfabric-agent
Replaces: clockfabric-agent
" ;;
  esac
done
