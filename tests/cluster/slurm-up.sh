#!/usr/bin/env bash
# A one-node SLURM cluster on this machine, for tests/cluster/test_slurm.py (and to try profiles/slurm-cpu):
#
#   sudo tests/cluster/slurm-up.sh DIR      # install (apt, if missing), configure under DIR, start
#   export KVDIV_SLURM_DIR=DIR             # tests/cluster/test_slurm.py runs when this is set (or sinfo works)
#   tests/cluster/slurm-down.sh DIR         # stop the daemons by their PID files
#
# Debian's slurm-wlm (22.05) and munge from the package registry; slurmctld + slurmd on localhost, select/cons_tres,
# one partition `cpu`, no GPUs, no accounting database (hence `slurm-status-command: squeue` in the profile).
# The node is sized like the smallest real node the profiles target (KVDIV_SLURM_CPUS, default 8; KVDIV_SLURM_MEM_MB,
# default 64000) whatever this machine has (SlurmdParameters=config_overrides), with EnforcePartLimits=ALL, so a
# request larger than the node is refused by sbatch rather than left pending. Everything it writes is under DIR
# (config, munge key, socket, log and PID file in munge/, state, spool, logs, PID files run/*.pid) but the link
# /etc/slurm/slurm.conf -> DIR/etc/slurm.conf (removed by slurm-down.sh).
# Needs root. Every step runs under `timeout -k`; on failure it says what failed, stops what it started, exits 1.
set -euo pipefail

DIR=${1:?usage: slurm-up.sh DIR}
mkdir -p "$DIR"
DIR=$(cd "$DIR" && pwd)
CPUS=${KVDIV_SLURM_CPUS:-8}
MEM_MB=${KVDIV_SLURM_MEM_MB:-64000}
HERE=$(cd "$(dirname "$0")" && pwd)

fail() { echo "slurm-up: FAILED: $*" >&2; "$HERE/slurm-down.sh" "$DIR" >/dev/null 2>&1 || true; exit 1; }
step() { local secs=$1; shift; timeout -k 10 "$secs" "$@"; }

[ "$(id -u)" = 0 ] || fail "needs root (it installs packages and runs munged/slurmctld/slurmd)"

# --- install ---------------------------------------------------------------------------------------------------
if ! command -v slurmctld >/dev/null || ! command -v slurmd >/dev/null || ! command -v munged >/dev/null \
    || ! command -v sbatch >/dev/null; then
    command -v apt-get >/dev/null || fail "slurm-wlm/munge not installed and no apt-get to install them"
    t0=$(date +%s)
    # no service may start from the packages' scripts (the daemons are started below, under DIR)
    added_policy=
    if [ ! -e /usr/sbin/policy-rc.d ]; then
        printf '#!/bin/sh\nexit 101\n' >/usr/sbin/policy-rc.d && chmod +x /usr/sbin/policy-rc.d && added_policy=1
    fi
    export DEBIAN_FRONTEND=noninteractive
    why=
    if ! step 300 apt-get update -qq >"$DIR/apt.log" 2>&1; then
        why="apt-get update failed (no network or package registry?): $(tail -n 1 "$DIR/apt.log")"
    elif ! step 600 apt-get install -y -qq --no-install-recommends slurm-wlm munge >>"$DIR/apt.log" 2>&1; then
        why="apt-get install slurm-wlm munge failed: $(tail -n 1 "$DIR/apt.log")"
    fi
    [ -z "$added_policy" ] || rm -f /usr/sbin/policy-rc.d
    [ -z "$why" ] || fail "$why (log: $DIR/apt.log)"
    echo "slurm-up: installed slurm-wlm and munge in $(( $(date +%s) - t0 )) s"
fi
echo "slurm-up: $(slurmctld -V)"

# --- configure -------------------------------------------------------------------------------------------------
mkdir -p "$DIR"/{etc,munge,state,spool,log,run}
chmod 0755 "$DIR"  # munged runs as user munge and must reach DIR/munge (mktemp -d makes DIR 0700)
id munge >/dev/null 2>&1 || fail "no user munge (the munge package creates it)"
chown munge:munge "$DIR/munge"
chmod 0755 "$DIR/munge"  # munged: the socket's folder must be searchable by all
if [ ! -s "$DIR/munge/munge.key" ]; then
    step 30 dd if=/dev/urandom of="$DIR/munge/munge.key" bs=1024 count=1 status=none \
        || fail "cannot write the munge key"
fi
chown munge:munge "$DIR/munge/munge.key"
chmod 0400 "$DIR/munge/munge.key"

NODE=$(hostname -s)
cat >"$DIR/etc/slurm.conf" <<CONF
# written by tests/cluster/slurm-up.sh: a one-node test cluster under $DIR
ClusterName=kvdiv-test
SlurmctldHost=$NODE(127.0.0.1)
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
CredType=cred/munge
AuthInfo=socket=$DIR/munge/munge.socket
StateSaveLocation=$DIR/state
SlurmdSpoolDir=$DIR/spool/slurmd-%n
SlurmctldPidFile=$DIR/run/slurmctld.pid
SlurmdPidFile=$DIR/run/slurmd.pid
SlurmctldLogFile=$DIR/log/slurmctld.log
SlurmdLogFile=$DIR/log/slurmd.log
SlurmctldPort=${KVDIV_SLURMCTLD_PORT:-6817}
SlurmdPort=${KVDIV_SLURMD_PORT:-6818}
# no cgroups in a container: track processes by their parent, no task confinement, no accounting database
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
JobCompType=jobcomp/none
MpiDefault=none
SchedulerType=sched/backfill
SelectType=select/cons_tres
SelectTypeParameters=CR_Core_Memory
# refuse at submission what no node of the partition can run (instead of leaving it pending)
EnforcePartLimits=ALL
# the node as configured here, not as this machine is (a test node sized like a real one)
SlurmdParameters=config_overrides
ReturnToService=2
# finished jobs stay visible to squeue for 10 min: the executor's status queries need them (no sacct)
MinJobAge=600
InactiveLimit=0
KillWait=10
SlurmctldTimeout=60
SlurmdTimeout=120
NodeName=$NODE NodeAddr=127.0.0.1 CPUs=$CPUS RealMemory=$MEM_MB State=UNKNOWN
PartitionName=cpu Nodes=$NODE Default=YES MaxTime=04:00:00 DefaultTime=01:00:00 DefMemPerCPU=1000 State=UP
CONF
# The job steps' srun reads the default path (snakemake-executor-plugin-slurm-jobstep drops SLURM_CONF from their
# environment), so /etc/slurm/slurm.conf is a link to this file; another cluster's slurm.conf is never replaced.
ETC_CONF=/etc/slurm/slurm.conf
if [ -e "$ETC_CONF" ] || [ -L "$ETC_CONF" ]; then
    [ "$(readlink "$ETC_CONF")" = "$DIR/etc/slurm.conf" ] \
        || fail "$ETC_CONF exists and is not this test cluster's: not replacing it (a real cluster's configuration?)"
fi
mkdir -p /etc/slurm
ln -sfn "$DIR/etc/slurm.conf" "$ETC_CONF"
export SLURM_CONF=$DIR/etc/slurm.conf

# --- start -----------------------------------------------------------------------------------------------------
pid_alive() { [ -s "$1" ] && kill -0 "$(cat "$1")" 2>/dev/null; }
wait_for() {  # wait_for SECONDS WHAT COMMAND...: poll COMMAND every second
    local secs=$1 what=$2; shift 2
    for _ in $(seq "$secs"); do "$@" >/dev/null 2>&1 && return 0; sleep 1; done
    fail "$what did not come up in $secs s (logs: $DIR/log)"
}

if ! pid_alive "$DIR/munge/munged.pid"; then
    step 30 runuser -u munge -- munged --key-file="$DIR/munge/munge.key" --socket="$DIR/munge/munge.socket" \
        --pid-file="$DIR/munge/munged.pid" --log-file="$DIR/munge/munged.log" --seed-file="$DIR/munge/munged.seed" \
        || fail "munged did not start (log: $DIR/munge/munged.log)"
fi
wait_for 30 "munged" sh -c "munge -n --socket='$DIR/munge/munge.socket' | unmunge --socket='$DIR/munge/munge.socket'"

if ! pid_alive "$DIR/run/slurmctld.pid"; then
    step 60 slurmctld -f "$SLURM_CONF" || fail "slurmctld did not start (log: $DIR/log/slurmctld.log)"
fi
wait_for 60 "slurmctld" timeout -k 5 10 scontrol ping
if ! pid_alive "$DIR/run/slurmd.pid"; then
    # KVDIV_SLURM_NICE: the jobs' CPU niceness (they inherit slurmd's), for a machine shared with other work
    step 60 nice -n "${KVDIV_SLURM_NICE:-0}" slurmd -f "$SLURM_CONF" -N "$NODE" \
        || fail "slurmd did not start (log: $DIR/log/slurmd.log)"
fi
idle() { timeout -k 5 10 sinfo -h -N -n "$NODE" -o %t | grep -Eq '^(idle|mix|alloc)'; }
wait_for 90 "node $NODE (slurmd)" idle

echo "slurm-up: cluster up under $DIR: node $NODE, $CPUS CPUs, $MEM_MB MB, partition cpu"
echo "slurm-up: sinfo, sbatch and snakemake --executor slurm now use it (/etc/slurm/slurm.conf -> $SLURM_CONF)"
