#!/usr/bin/env bash
# Stops what tools/slurm-up.sh DIR started (slurmd, slurmctld, munged), by their pid files.
#   usage: tools/slurm-down.sh DIR
set -u
DIR=${1:?usage: tools/slurm-down.sh DIR}
export SLURM_CONF="$DIR/slurm.conf"
for pidfile in "$DIR/slurmd.pid" "$DIR/slurmctld.pid" "$DIR/munge/munged.pid"; do
  [ -f "$pidfile" ] || continue
  pid=$(cat "$pidfile" 2>/dev/null)
  [ -n "$pid" ] && kill "$pid" 2>/dev/null
done
sleep 0.5
for pidfile in "$DIR/slurmd.pid" "$DIR/slurmctld.pid" "$DIR/munge/munged.pid"; do
  pid=$(cat "$pidfile" 2>/dev/null)
  [ -n "$pid" ] && kill -0 "$pid" 2>/dev/null && kill -9 "$pid" 2>/dev/null
done
exit 0
