#!/usr/bin/env bash
# Stops dockerd only when tools/docker-up.sh started it (build/docker/started holds its pid).
set -u
cd "$(dirname "$0")/.."
STATE=build/docker
[ -f "$STATE/started" ] || exit 0
pid=$(cat "$STATE/started")
rm -f "$STATE/started"
if kill -0 "$pid" 2>/dev/null && grep -q dockerd "/proc/$pid/comm" 2>/dev/null; then
  echo "docker-down: stopping dockerd $pid (started by docker-up)"
  kill -TERM "$pid"
  for _ in $(seq 1 60); do kill -0 "$pid" 2>/dev/null || exit 0; sleep 0.5; done
  echo "docker-down: dockerd $pid still running after 30 s; sending KILL" >&2
  kill -KILL "$pid" 2>/dev/null
fi
exit 0
