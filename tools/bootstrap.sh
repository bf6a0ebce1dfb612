#!/usr/bin/env bash
# Prepare a fresh Debian 12 machine (root) for clusterprobe: the system packages the pipeline and
# its tests use, a running Docker engine, and a virtual environment in .venv with the package.
# Idempotent: a second run only checks.
set -euo pipefail
cd "$(dirname "$0")/.."

PACKAGES=(
  squashfs-tools       # mksquashfs/unsquashfs: the native squash backend
  squashfuse fuse3     # mount a .sqsh without root tricks (tests)
  debootstrap          # `invoke local-base`: a Debian rootfs without any image registry
  slurm-wlm munge      # real Slurm daemons for the job tests
  openmpi-bin          # mpirun launcher tests of the entrypoints
  shellcheck           # staged sbatch files and workflow run: steps must pass it
  docker-registry apache2-utils  # a local registry with htpasswd auth for push tests
  git ca-certificates
  python3-venv         # python3 -m venv (not on every Debian/Ubuntu image)
)

# apt and the daemons need root. As root (our machines, which have no sudo) commands run as
# they are; as a user with sudo (GitHub's runners: `runner`) they go through `sudo -n`.
as_root=()
if [ "$(id -u)" -ne 0 ]; then as_root=(sudo -n); fi

missing=()
# A machine that already has a Docker engine (GitHub's runners: docker-ce) keeps it; docker.io
# would conflict with it.
command -v dockerd >/dev/null 2>&1 || missing+=(docker.io)
for pkg in "${PACKAGES[@]}"; do
  dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null | grep -q "install ok installed" || missing+=("$pkg")
done
if ((${#missing[@]})); then
  echo "==> apt-get install ${missing[*]}"
  "${as_root[@]}" apt-get update -qq
  "${as_root[@]}" env DEBIAN_FRONTEND=noninteractive \
    apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi
# Debian starts none of the daemons for us; keep the packaged services from trying.
for svc in slurmctld slurmd munge docker-registry; do
  "${as_root[@]}" systemctl disable --now "$svc" >/dev/null 2>&1 || true
done

if ! docker info >/dev/null 2>&1; then
  echo "==> starting dockerd (log: /var/log/clusterprobe-dockerd.log)"
  setsid dockerd >>/var/log/clusterprobe-dockerd.log 2>&1 < /dev/null &
  for _ in $(seq 60); do docker info >/dev/null 2>&1 && break; sleep 1; done
  docker info >/dev/null 2>&1 || { echo "dockerd did not start; see /var/log/clusterprobe-dockerd.log" >&2; exit 1; }
fi

if [ ! -x .venv/bin/python ]; then
  echo "==> creating .venv"
  python3 -m venv .venv
fi
# torch first and pinned: the CPU wheel of 2.13.0 lies on these machines; an unpinned torch
# would pull a multi-GB CUDA build.
if ! .venv/bin/python -c "import torch" 2>/dev/null; then
  echo "==> installing torch 2.13.0 (CPU)"
  .venv/bin/pip install -q "torch==2.13.0"
fi
echo "==> installing clusterprobe with its dev extras"
.venv/bin/pip install -q -e ".[dev]" 2>&1 | grep -v "^WARNING: Location" || true
echo "==> ready: .venv/bin/invoke --list"
