#!/usr/bin/env bash
# Stop the test cluster that tests/cluster/slurm-up.sh DIR started: slurmd, slurmctld, munged, each by its PID file
# (DIR/run/slurmd.pid, DIR/run/slurmctld.pid, DIR/munge/munged.pid; TERM, then KILL after 20 s). Nothing else is
# stopped; DIR is left for its logs; the link /etc/slurm/slurm.conf to DIR's configuration is removed.
set -uo pipefail
DIR=${1:?usage: slurm-down.sh DIR}
for pidfile in "$DIR/run/slurmd.pid" "$DIR/run/slurmctld.pid" "$DIR/munge/munged.pid"; do
    name=$(basename "$pidfile" .pid)
    [ -s "$pidfile" ] || continue
    pid=$(cat "$pidfile")
    if kill -0 "$pid" 2>/dev/null; then
        kill -TERM "$pid" 2>/dev/null
        for _ in $(seq 20); do kill -0 "$pid" 2>/dev/null || break; sleep 1; done
        if kill -0 "$pid" 2>/dev/null; then
            echo "slurm-down: $name ($pid) still running after 20 s: KILL" >&2
            kill -KILL "$pid" 2>/dev/null
        fi
        echo "slurm-down: stopped $name ($pid)"
    fi
    rm -f "$pidfile"
done
# the link slurm-up.sh made (only if it is that link)
conf=$(cd "$DIR" 2>/dev/null && pwd)/etc/slurm.conf
if [ -L /etc/slurm/slurm.conf ] && [ "$(readlink /etc/slurm/slurm.conf)" = "$conf" ]; then
    rm -f /etc/slurm/slurm.conf
fi
exit 0
