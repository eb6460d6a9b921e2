#!/usr/bin/env bash
# Makes dockerd usable for the docker provider's specs and runs:
#   1. installs docker.io and debootstrap (make deps-docker) when missing;
#   2. starts dockerd when /_ping does not answer, and records that it did (build/docker/started),
#      so tools/docker-down.sh stops only what this script started;
#   3. waits for /_ping;
#   4. builds the base image (./cseng images base) when cseng/debian:bookworm is absent.
# Exit status 0 when dockerd answers and the base image exists; otherwise 1, with the reason on
# stderr and in build/docker/unavailable (the docker specs then report every test as skipped).
# DOCKER_HOST=unix:///path selects another socket; DOCKERD_ARGS adds flags to a started dockerd.
set -u
cd "$(dirname "$0")/.."
STATE=build/docker
mkdir -p "$STATE"
rm -f "$STATE/unavailable"
case "${DOCKER_HOST:-}" in
  unix://*) SOCK=${DOCKER_HOST#unix://} ;;
  "") SOCK=/var/run/docker.sock ;;
  *) echo "docker-up: DOCKER_HOST=$DOCKER_HOST is not unix://PATH; checking /var/run/docker.sock" >&2
     SOCK=/var/run/docker.sock ;;
esac
BASE=${CSENG_DOCKER_BASE:-cseng/debian:bookworm}
CSENG=${CSENG:-./cseng}

unavailable() {
  echo "docker-up: DOCKER UNAVAILABLE: $*" >&2
  echo "docker-up: the docker specs will be reported as skipped" >&2
  echo "$*" >"$STATE/unavailable"
  exit 1
}

ping() { curl -sf --max-time 3 --unix-socket "$SOCK" http://docker/_ping >/dev/null 2>&1; }

if ! command -v dockerd >/dev/null 2>&1 || ! command -v debootstrap >/dev/null 2>&1; then
  echo "docker-up: installing docker.io and debootstrap (make deps-docker)"
  make --no-print-directory deps-docker || unavailable "make deps-docker failed"
fi
command -v curl >/dev/null 2>&1 || unavailable "curl is not installed (needed to ping dockerd)"

if ping; then
  echo "docker-up: dockerd answers at $SOCK"
else
  [ "$(id -u)" = 0 ] || unavailable "dockerd is not running at $SOCK and starting it needs root"
  echo "docker-up: starting dockerd (log: $STATE/dockerd.log)"
  # DOCKERD_ARGS: extra flags (e.g. a separate --data-root/--exec-root/--pidfile for a second
  # daemon). A second daemon shares the host's network namespace: never give it --bridge=none,
  # with which dockerd deletes docker0, the first daemon's bridge.
  # shellcheck disable=SC2086
  dockerd -H "unix://$SOCK" ${DOCKERD_ARGS:-} >"$STATE/dockerd.log" 2>&1 &
  pid=$!
  echo "$pid" >"$STATE/started"
  for _ in $(seq 1 120); do
    ping && break
    if ! kill -0 "$pid" 2>/dev/null; then
      rm -f "$STATE/started"
      unavailable "dockerd exited at start: $(tail -n 5 "$STATE/dockerd.log" | tr '\n' ' ')"
    fi
    sleep 0.5
  done
  ping || unavailable "dockerd (pid $pid) did not answer /_ping within 60 s: $(tail -n 5 "$STATE/dockerd.log" | tr '\n' ' ')"
  echo "docker-up: dockerd $pid answers at $SOCK"
fi

if curl -sf --unix-socket "$SOCK" "http://docker/v1.41/images/$BASE/json" >/dev/null 2>&1; then
  echo "docker-up: base image $BASE present"
else
  echo "docker-up: building the base image $BASE ($CSENG images base)"
  "$CSENG" images base --tag "$BASE" || unavailable "building the base image $BASE failed"
fi
exit 0
