#!/usr/bin/env bash
# Build the attnload image with podman and smoke-test it: `attnload --version`, a
# non-root, read-only-rootfs check, and a short `attnload sim` request inside it.
#
# No container registry is reachable on the build machines, so the Dockerfile's
# pinned base (a Debian bookworm slim tag) is made locally with debootstrap and
# `podman import`, under the very name the Dockerfile's FROM uses. Where a registry
# is reachable (a laptop, CI with Docker Hub), set ATTNLOAD_PULL_BASE=1 to pull it.
#
# The host's CA bundle is passed to pip as a build secret (never baked into a
# layer), because here PyPI is reached through a TLS-intercepting proxy.
#
# Usage: scripts/test-image.sh            (make test-image)
#   IMAGE=attnload:dev  BASE_CACHE=~/.cache/attnload  ATTNLOAD_PULL_BASE=0
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
IMAGE="${IMAGE:-localhost/attnload:dev}"
BASE="$(sed -n 's/^ARG BASE_IMAGE=//p' "$ROOT/Dockerfile" | head -1)"
SUITE="${SUITE:-bookworm}"
MIRROR="${DEBIAN_MIRROR:-http://deb.debian.org/debian}"
BASE_CACHE="${BASE_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/attnload}"
CA_BUNDLE="${CA_BUNDLE:-/etc/ssl/certs/ca-certificates.crt}"
start=$(date +%s)
# crun refuses hybrid cgroup v1/v2 hosts (this CI); runc copes. Low explicit ulimits because
# podman's defaults (1048576) exceed what an unprivileged CI container may set.
RUNTIME="${PODMAN_RUNTIME:-$(command -v runc >/dev/null && echo runc || echo crun)}"
RUN=(podman --runtime "$RUNTIME" run --rm --ulimit nofile=4096:4096 --ulimit nproc=4096:4096)

log() { printf '[test-image %3ss] %s\n' "$(( $(date +%s) - start ))" "$*" >&2; }

make_base() {
  if podman image exists "$BASE"; then
    log "base $BASE present"
    return
  fi
  if [[ "${ATTNLOAD_PULL_BASE:-0}" == 1 ]]; then
    podman pull "$BASE"
    return
  fi
  local tarball="$BASE_CACHE/$SUITE-minbase.tar"
  if [[ ! -s "$tarball" ]]; then
    log "debootstrap $SUITE (minbase) -> $tarball (a few minutes, once)"
    mkdir -p "$BASE_CACHE"
    local rootfs
    rootfs="$(mktemp -d "$BASE_CACHE/rootfs.XXXXXX")"
    trap 'rm -rf "$rootfs"' RETURN
    debootstrap --variant=minbase "$SUITE" "$rootfs" "$MIRROR" >"$BASE_CACHE/debootstrap.log" 2>&1 \
      || { tail -20 "$BASE_CACHE/debootstrap.log" >&2; exit 1; }
    # What the official slim images drop: apt lists, docs, caches.
    rm -rf "$rootfs"/var/lib/apt/lists/* "$rootfs"/var/cache/apt/*.bin "$rootfs"/usr/share/doc/* \
           "$rootfs"/usr/share/man/* "$rootfs"/usr/share/info/*
    tar --numeric-owner -C "$rootfs" -cf "$tarball.tmp" .
    mv "$tarball.tmp" "$tarball"
  fi
  log "podman import -> $BASE"
  podman import --change 'CMD ["bash"]' "$tarball" "$BASE" >/dev/null
}

build() {
  log "podman build -> $IMAGE"
  local secret=()
  [[ -r "$CA_BUNDLE" ]] && secret=(--secret "id=cacert,src=$CA_BUNDLE")
  # --format docker keeps HEALTHCHECK (the OCI format drops it); chroot isolation and host
  # networking let the build run inside an unprivileged CI container.
  podman build --format docker --isolation chroot --network host --pull=never "${secret[@]}" \
    -t "$IMAGE" -f "$ROOT/Dockerfile" "$ROOT"
}

smoke() {
  log "smoke: --version"
  local version
  version="$("${RUN[@]}" --network none --read-only "$IMAGE" --version)"
  [[ "$version" == attnload* ]] || { echo "unexpected --version: $version" >&2; exit 1; }
  log "  $version"
  log "smoke: the compiled client path is in the image"
  local impl
  impl="$("${RUN[@]}" --network none --read-only --entrypoint python3 "$IMAGE" -c \
    'from attnload import native; print(native.implementation())')"
  [[ "$impl" == compiled ]] || { echo "image runs the pure-Python client path: $impl" >&2; exit 1; }
  log "smoke: the image carries no Kubernetes client (attnload[cluster] is not installed)"
  local cluster_rc=0 cluster_err
  cluster_err="$("${RUN[@]}" --network none --read-only "$IMAGE" cluster status 2>&1)" || cluster_rc=$?
  [[ "$cluster_rc" == 2 && "$cluster_err" == *"attnload[cluster]"* ]] \
    || { echo "cluster status in the image: exit $cluster_rc: $cluster_err" >&2; exit 1; }
  log "smoke: runs as non-root"
  local uid
  uid="$("${RUN[@]}" --network none --entrypoint id "$IMAGE" -u)"
  [[ "$uid" != 0 ]] || { echo "image runs as root" >&2; exit 1; }
  log "smoke: attnload sim answers /health and a chat completion (read-only rootfs)"
  "${RUN[@]}" --network none --read-only --tmpfs /tmp --entrypoint /bin/sh "$IMAGE" -c '
    attnload sim --host 127.0.0.1 --port 8000 --models llama-3-70b,deepseek-chat --kv-capacity-scale 0.05 &
    pid=$!
    python - <<PY
import json, time, urllib.request
base = "http://127.0.0.1:8000"
for _ in range(100):
    try:
        urllib.request.urlopen(base + "/health", timeout=1).read(); break
    except OSError:
        time.sleep(0.1)
else:
    raise SystemExit("sim did not answer /health in 10 s")
body = json.dumps({"model": "deepseek-chat", "max_tokens": 8,
                   "messages": [{"role": "user", "content": "hi"}]}).encode()
req = urllib.request.Request(base + "/v1/chat/completions", body, {"Content-Type": "application/json"})
reply = json.load(urllib.request.urlopen(req, timeout=30))
assert reply["choices"][0]["message"]["content"], reply
print("sim ok:", reply["usage"])
PY
    rc=$?; kill $pid; wait $pid 2>/dev/null; exit $rc'
}

make_base
build
smoke
log "image $IMAGE ok; size $(podman image inspect "$IMAGE" --format '{{.Size}}' | awk '{printf "%.0f MB", $1/1e6}')"
