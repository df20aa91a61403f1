#!/usr/bin/env bash
# `make slurm-down`: stop exactly what tools/slurm/up.sh started: cancel its jobs, stop its
# daemons by their pid files (newest first, only if the pid still names that daemon), then any
# process left that carries MONTA_SLURM_OWNER=<this state dir> (a slurmstepd that outlived its job).
# The state directory (configs, key, accounting database, logs) stays for the next slurm-up;
# remove it with: rm -rf "$MONTA_SLURM_DIR".
set -uo pipefail
here=$(cd "$(dirname "$0")" && pwd)
# shellcheck source=env.sh
. "$here/env.sh"

if [ ! -d "$D/run" ]; then
    echo "slurm-down: nothing to stop ($D/run absent)"
    exit 0
fi

ours() {  # ours PID NAME: the process exists and is the daemon NAME
    [ -r "/proc/$1/comm" ] && [ "$(cat "/proc/$1/comm")" = "$2" ]
}
stop() {  # stop PID: TERM, wait up to 20 s, then KILL
    kill -TERM "$1" 2>/dev/null || return 0
    for _ in $(seq 1 80); do kill -0 "$1" 2>/dev/null || return 0; sleep 0.25; done
    echo "slurm-down: pid $1 ignored SIGTERM for 20s, killing it" >&2
    kill -KILL "$1" 2>/dev/null
}

ctld=$(cat "$D/run/slurmctld.pid" 2>/dev/null || true)
if [ -n "$ctld" ] && ours "$ctld" slurmctld; then
    jobs=$(squeue -h -o %A 2>/dev/null | xargs)
    if [ -n "$jobs" ]; then
        echo "slurm-down: cancelling jobs $jobs"
        scancel $jobs
        for _ in $(seq 1 80); do [ -z "$(squeue -h -o %A 2>/dev/null)" ] && break; sleep 0.25; done
    fi
fi

stopped=""
for entry in $(echo "$PIDFILES" | tr ' ' '\n' | tac); do
    name=${entry%%:*}
    file=${entry#*:}
    [ -f "$file" ] || continue
    pid=$(cat "$file")
    if ours "$pid" "$name"; then
        stop "$pid"
        stopped="$stopped $name($pid)"
    fi
    rm -f "$file"
done

# Anything else started by those daemons (slurmstepd and the tasks it forked) carries the marker.
left=""
for p in /proc/[0-9]*; do
    pid=${p#/proc/}
    [ "$pid" = "$$" ] && continue
    { tr '\0' '\n' < "$p/environ"; } 2>/dev/null | grep -qx "MONTA_SLURM_OWNER=$D" && left="$left $pid"
done
for pid in $left; do
    echo "slurm-down: stopping leftover $(cat "/proc/$pid/comm" 2>/dev/null) ($pid)"
    stop "$pid"
done
echo "slurm-down: stopped${stopped:- nothing (no daemon was running)}; state kept in $D"
