#!/usr/bin/env bash
# Build the container image the Kubernetes manifests run (deploy/kubernetes), clockfabric:VERSION,
# from Debian's packages and PyPI alone: a Debian minbase root filesystem (mmdebstrap, from the
# mirror this machine's apt uses) with the controller's package from scripts/build-deb.sh installed
# into it (the venv with the agent and the controller; victoria-metrics and prometheus-alertmanager
# come as its dependencies), made an image by podman. Nothing downloads when the image runs.
# Writes OUTDIR/clockfabric-image_VERSION_ARCH.tar, a docker-archive (`podman load`, `docker
# load`, `ctr -n k8s.io images import`, `kind load image-archive`), and loads it into podman's
# local storage unless --no-load. Run as root, on the Debian release the image is made of (the
# package's venv is bound to this machine's Python).
# Usage: scripts/build-image.sh [-o OUTDIR] [--no-load]
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
out=$ROOT/dist
load=1
while [ $# -gt 0 ]; do
  case $1 in
    -o) [ $# -ge 2 ] || { echo "build-image: -o needs a folder, e.g. -o dist" >&2; exit 64; }; out=$2; shift 2 ;;
    --no-load) load=0; shift ;;
    *) echo "build-image: unknown argument '$1'; usage: scripts/build-image.sh [-o OUTDIR] [--no-load]" >&2
       exit 64 ;;
  esac
done
[ "$(id -u)" -eq 0 ] || { echo "build-image: run as root (mmdebstrap builds the root filesystem in a chroot)" >&2; exit 1; }
missing=()
for tool in mmdebstrap podman dpkg apt-get; do command -v $tool >/dev/null || missing+=("$tool"); done
if [ ${#missing[@]} -gt 0 ]; then
  echo "build-image: ${missing[*]} missing; apt-get install --no-install-recommends mmdebstrap podman" >&2; exit 1
fi
# shellcheck disable=SC1091
codename=$(. /etc/os-release && [ "${ID:-}" = debian ] && echo "${VERSION_CODENAME:-}") || codename=
[ -n "$codename" ] || {
  echo "build-image: run on Debian: the image is this machine's release, as the package's venv is built with its Python" >&2
  exit 1; }

version=$(/usr/bin/python3 -c 'import sys, tomllib; print(tomllib.load(open(sys.argv[1], "rb"))["project"]["version"])' \
  "$ROOT/pyproject.toml")
arch=$(dpkg --print-architecture)
# the name containerd and the kubelet give `clockfabric:VERSION`; podman would otherwise save it
# as localhost/clockfabric, a name the manifests' image never matches once imported into containerd
name=docker.io/library/clockfabric:$version
archive=$out/clockfabric-image_${version}_${arch}.tar

# this release's suites from the sources apt uses here (sources.list or deb822 .sources alike)
sources=$(apt-get indextargets --format '$(REPO_URI) $(RELEASE) $(COMPONENT)' 'Created-By: Packages' \
  | awk -v c="$codename" '$2 == c || $2 == c "-updates" || $2 == c "-security" {print "deb " $0}' | sort -u)
[ -n "$sources" ] || {
  echo "build-image: apt has no source for $codename here; add one to /etc/apt/sources.list.d and apt-get update" >&2
  exit 1; }

work=$(mktemp -d)
trap 'rm -rf "$work" "$archive.part"' EXIT
mkdir -p "$out"

echo "build-image: the controller's package (scripts/build-deb.sh)" >&2
deb=$("$ROOT/scripts/build-deb.sh" -o "$work" controller)

# minbase, no Recommends, no documentation, no device nodes (the runtime makes /dev), no vm* tools
# the controller never starts; merged /usr made as debootstrap makes it (else usrmerge, and perl
# with it, would). /etc/clockfabric is made 755: the pods mount their files below it, and the
# controller runs as a user outside the package's group
echo "build-image: the root filesystem ($codename, mmdebstrap)" >&2
mmdebstrap --variant=minbase --mode=root --skip=output/dev \
  --aptopt='APT::Install-Recommends "false"' \
  --dpkgopt='path-exclude=/usr/share/doc/*' --dpkgopt='path-include=/usr/share/doc/*/copyright' \
  --dpkgopt='path-exclude=/usr/share/man/*' --dpkgopt='path-exclude=/usr/share/info/*' \
  --dpkgopt='path-exclude=/usr/share/locale/*' \
  --dpkgopt='path-exclude=/usr/bin/vmagent' --dpkgopt='path-exclude=/usr/bin/vmbackup' \
  --dpkgopt='path-exclude=/usr/bin/vmrestore' --dpkgopt='path-exclude=/usr/bin/vmctl' \
  --hook-dir=/usr/share/mmdebstrap/hooks/maybe-merged-usr \
  --hook-dir=/usr/share/mmdebstrap/hooks/file-mirror-automount --include="$deb" \
  --customize-hook='chmod 755 "$1/etc/clockfabric"' \
  --customize-hook='rm -rf "$1"/var/log/* "$1"/var/cache/debconf/*-old "$1"/var/lib/dpkg/*-old' \
  "$codename" "$work/rootfs.tar" - <<<"$sources" >"$work/mmdebstrap.log" 2>&1 || {
  tail -n 30 "$work/mmdebstrap.log" >&2; echo "build-image: mmdebstrap failed (above)" >&2; exit 1; }

# a store of its own, removed with $work: the build leaves no image or layer behind but the archive
echo "build-image: the image $name (podman import, save)" >&2
store=(--root "$work/storage" --runroot "$work/run" --tmpdir "$work/tmp" --storage-driver vfs --events-backend none)
podman "${store[@]}" import -q \
  --change 'ENTRYPOINT ["clockfabric"]' --change 'CMD ["--help"]' \
  --change 'ENV PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin' --change 'ENV LANG=C.UTF-8' \
  --change 'USER 65532:65532' \
  --change 'LABEL org.opencontainers.image.title=clockfabric' \
  --change "LABEL org.opencontainers.image.version=$version" \
  "$work/rootfs.tar" "$name" >/dev/null
rm -f "$archive.part"
podman "${store[@]}" save -q --format docker-archive -o "$archive.part" "$name"
mv "$archive.part" "$archive"
echo "$archive"

if [ $load -eq 1 ]; then
  podman load -q -i "$archive" >/dev/null || {
    echo "build-image: podman load failed; the archive is whole: load it where the image runs" >&2; exit 1; }
  echo "$name (podman)"
fi
