#!/usr/bin/env bash
# The CPU image with Debian's podman, on a machine like the CI's: no Docker daemon and no registry (the
# debian:bookworm base is made with debootstrap from Debian's packages), runc with cgroupfs and no default
# ulimits (these machines refuse crun's rlimits and hybrid cgroups), host network. Where Docker works, use the
# Dockerfile's own commands instead.
#   scripts/container.sh build [TAG]    build the CPU image (default tag localhost/vlm-demo:cpu)
#   scripts/container.sh podman ARGS... podman with these flags (run, stop, logs, rm, ...)
set -euo pipefail
cd "$(dirname "$0")/.."
cache="${VLM_DEMO_CACHE:-$HOME/.cache/vlm-demo}"
mkdir -p "$cache"
export CONTAINERS_CONF="$cache/containers.conf"
[ -f "$CONTAINERS_CONF" ] || printf '[containers]\ndefault_ulimits = []\n' > "$CONTAINERS_CONF"
podman_() { podman --runtime runc --cgroup-manager cgroupfs "$@"; }

base() {  # docker.io/library/debian:bookworm, made here once when it cannot be pulled
  local name=docker.io/library/debian:bookworm root
  podman_ image exists "$name" && return
  if ! command -v debootstrap >/dev/null; then podman_ pull "$name"; return; fi
  echo "container: making $name with debootstrap (once; about a minute)" >&2
  root=$(mktemp -d)
  debootstrap --variant=minbase bookworm "$root/rootfs" >/dev/null
  tar -C "$root/rootfs" -c . | podman_ import -q - "$name" >/dev/null
  rm -rf "$root"
}

build() {
  local tag="${1:-localhost/vlm-demo:cpu}" uv_cache="${UV_CACHE_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/uv}" args=()
  base
  # the host's CA bundle, where it has one, as a build secret (the image keeps none); the host's uv cache
  # (filled by scripts/setup.sh from the same lock) so the build downloads nothing it already has
  [ -s /etc/ssl/certs/ca-certificates.crt ] && args+=(--secret id=ca,src=/etc/ssl/certs/ca-certificates.crt)
  if [ -d "$uv_cache" ]; then args+=(--volume "$uv_cache:/uv-cache" --build-arg UV_CACHE_DIR=/uv-cache); fi
  podman_ build --format docker --network host --pull=never --build-arg RUNTIME=cpu "${args[@]}" -t "$tag" .
}

case "${1:-}" in
  build) shift; build "$@" ;;
  podman) shift; podman_ "$@" ;;
  *) echo "usage: scripts/container.sh build [TAG] | podman ARGS..." >&2; exit 2 ;;
esac
