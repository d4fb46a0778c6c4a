#!/usr/bin/env bash
# A one-node SLURM cluster on this machine, for trying `spinsa scan run --cluster slurm`
# against a real scheduler (tests/test_scan_slurm_real.py runs when `sinfo` answers).
#
#   sudo bash scripts/slurm-localhost.sh install   apt-get install slurm-wlm munge (Debian/Ubuntu)
#   sudo bash scripts/slurm-localhost.sh start     munged, slurmctld, slurmd; waits until a job runs
#   sudo bash scripts/slurm-localhost.sh status    what runs, and `sinfo`
#   sudo bash scripts/slurm-localhost.sh stop      stops the three daemons that `start` started
#
# Needs root (the daemons, /etc/slurm/slurm.conf) and nothing but Debian's packages
# (slurm-wlm 22.05 on Debian 12, munge); no systemd: the daemons are started directly.
#
# `start` writes a munge key if there is none, and /etc/slurm/slurm.conf with this host
# as the controller and its only node, with the CPUs and memory `slurmd -C` reads from the
# hardware, one partition `debug` (the default), no accounting database. It refuses to
# replace a slurm.conf it did not write (the first line marks its own). State, logs and
# pid files go to $SLURM_LOCALHOST_DIR (default /var/lib/spinsa-slurm). Every action is
# idempotent: `start` on a running cluster only checks it, `stop` on a stopped one says so.
# `stop` ends only the processes whose pid files `start` wrote, and leaves munge's key,
# slurm.conf and the state directory in place (the next `start` reuses them).
set -euo pipefail

DIR=${SLURM_LOCALHOST_DIR:-/var/lib/spinsa-slurm}
CONF=/etc/slurm/slurm.conf
MARK="# written by spinsa's scripts/slurm-localhost.sh"
HOST=$(hostname -s)
WAIT_S=${SLURM_LOCALHOST_WAIT:-60}
MUNGE_PID=/run/munge/munged-spinsa.pid  # only a munged that `start` started has it

say() { echo "slurm-localhost: $*"; }
die() { echo "slurm-localhost: error: $*" >&2; exit 1; }

need_root() {
    [[ $(id -u) -eq 0 ]] || die "run as root (sudo bash $0 $1): the daemons and $CONF need it"
}

need_packages() {
    local missing=()
    for cmd in munged slurmctld slurmd sinfo; do
        command -v "$cmd" >/dev/null || missing+=("$cmd")
    done
    if [[ ${#missing[@]} -gt 0 ]]; then
        die "${missing[*]} not found: install them first with: sudo bash $0 install"
    fi
}

# The pid in pid file $1, if that process still runs.
running_pid() {
    local pid
    [[ -s $1 ]] || return 1
    pid=$(<"$1")
    kill -0 "$pid" 2>/dev/null && echo "$pid"
}

do_install() {
    need_root install
    command -v apt-get >/dev/null || die "no apt-get: install SLURM and munge with your system's packages"
    say "installing slurm-wlm and munge with apt-get"
    apt-get update -qq
    DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends slurm-wlm munge
    say "installed: $(slurmd -V)"
}

write_conf() {
    if [[ -e $CONF ]] && [[ $(head -n 1 "$CONF") != "$MARK" ]]; then
        die "$CONF exists and was not written by this script: not replacing it (move it away first)"
    fi
    # this node as slurmd sees it: NodeName=HOST CPUs=... RealMemory=... (the hardware)
    local node
    node=$(slurmd -C | head -n 1)
    [[ $node == NodeName=* ]] || die "slurmd -C did not describe this node: $node"
    mkdir -p /etc/slurm "$DIR/slurmctld" "$DIR/slurmd" "$DIR/log"
    cat >"$CONF.tmp" <<CONF
$MARK
# A one-node cluster on $HOST; stop it with: sudo bash scripts/slurm-localhost.sh stop
ClusterName=localhost
SlurmctldHost=$HOST(127.0.0.1)
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
CredType=cred/munge
MpiDefault=none
ProctrackType=proctrack/linuxproc
TaskPlugin=task/affinity
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
JobCompType=jobcomp/none
SchedulerType=sched/backfill
SelectType=select/cons_tres
SelectTypeParameters=CR_Core_Memory
DefMemPerCPU=1024
ReturnToService=2
MinJobAge=600
StateSaveLocation=$DIR/slurmctld
SlurmdSpoolDir=$DIR/slurmd
SlurmctldPidFile=$DIR/slurmctld.pid
SlurmdPidFile=$DIR/slurmd.pid
SlurmctldLogFile=$DIR/log/slurmctld.log
SlurmdLogFile=$DIR/log/slurmd.log
$node NodeAddr=127.0.0.1 State=UNKNOWN
PartitionName=debug Nodes=$HOST Default=YES MaxTime=INFINITE State=UP
CONF
    if cmp -s "$CONF.tmp" "$CONF"; then
        rm -f "$CONF.tmp"
        return
    fi
    mv "$CONF.tmp" "$CONF"
    say "wrote $CONF (node ${node#NodeName=})"
    if running_pid "$DIR/slurmctld.pid" >/dev/null || running_pid "$DIR/slurmd.pid" >/dev/null; then
        say "the running daemons read the new $CONF after: $0 stop; $0 start"
    fi
}

start_munge() {
    if running_pid "$MUNGE_PID" >/dev/null; then
        say "munged runs already"
        return
    fi
    if munge -n 2>/dev/null | unmunge >/dev/null 2>&1; then
        say "a munged started by someone else answers: using it"
        return
    fi
    if [[ ! -s /etc/munge/munge.key ]]; then
        say "creating the munge key /etc/munge/munge.key"
        mkdir -p /etc/munge
        dd if=/dev/urandom of=/etc/munge/munge.key bs=1 count=1024 status=none
    fi
    chown munge:munge /etc/munge /etc/munge/munge.key
    chmod 0700 /etc/munge
    chmod 0400 /etc/munge/munge.key
    mkdir -p /run/munge /var/log/munge /var/lib/munge
    chown munge:munge /run/munge /var/log/munge /var/lib/munge
    # munged runs as the munge user, which writes its pid file (hence under /run/munge)
    runuser -u munge -- munged --pid-file="$MUNGE_PID" || die "munged did not start"
    munge -n | unmunge >/dev/null || die "munge does not round-trip a credential"
    say "munged started (pid $(<"$MUNGE_PID"))"
}

start_daemon() {  # slurmctld or slurmd
    local name=$1
    if running_pid "$DIR/$name.pid" >/dev/null; then
        say "$name runs already"
        return
    fi
    "$name" || die "$name did not start: see $DIR/log/$name.log"
    say "$name started"
}

wait_idle() {
    local state="" t=0
    while (( t < WAIT_S )); do
        state=$(sinfo -h -N -n "$HOST" -o %T 2>/dev/null || true)
        [[ $state == idle || $state == mixed || $state == allocated ]] && break
        sleep 1
        t=$((t + 1))
    done
    if [[ $state != idle && $state != mixed && $state != allocated ]]; then
        echo "--- $DIR/log/slurmctld.log (end)" >&2
        tail -n 15 "$DIR/log/slurmctld.log" >&2 || true
        echo "--- $DIR/log/slurmd.log (end)" >&2
        tail -n 15 "$DIR/log/slurmd.log" >&2 || true
        die "node $HOST is '${state:-not known}' after ${WAIT_S} s, not idle"
    fi
    say "node $HOST is $state after ${t} s"
    sinfo
    # a node can be idle and still unable to run a job (slurmstepd failing): try one
    if ! (cd /tmp && timeout 60 srun -N 1 -n 1 -t 1 --quiet true); then
        tail -n 15 "$DIR/log/slurmd.log" >&2 || true
        die "the node is up but a one-second job (srun true) did not run"
    fi
    say "a test job ran: the cluster takes jobs"
}

do_start() {
    need_root start
    need_packages
    write_conf
    mkdir -p "$DIR/slurmctld" "$DIR/slurmd" "$DIR/log"
    start_munge
    start_daemon slurmctld
    start_daemon slurmd
    wait_idle
}

stop_pid_file() {  # stop_pid_file NAME [PIDFILE]: SIGTERM, then wait up to 20 s
    local name=$1 file=${2:-$DIR/$1.pid} pid t=0
    if ! pid=$(running_pid "$file"); then
        say "$name is not running (none started by this script)"
        rm -f "$file"
        return
    fi
    kill -TERM "$pid"
    while kill -0 "$pid" 2>/dev/null && (( t < 40 )); do
        sleep 0.5
        t=$((t + 1))
    done
    if kill -0 "$pid" 2>/dev/null; then
        say "$name (pid $pid) ignored SIGTERM for 20 s: sending SIGKILL"
        kill -KILL "$pid" 2>/dev/null || true
    fi
    rm -f "$file"
    say "$name stopped (pid $pid)"
}

do_stop() {
    need_root stop
    if command -v scancel >/dev/null && running_pid "$DIR/slurmctld.pid" >/dev/null; then
        scancel --full --quiet --nodelist="$HOST" 2>/dev/null || true  # jobs would be orphaned
    fi
    stop_pid_file slurmd
    stop_pid_file slurmctld
    stop_pid_file munged "$MUNGE_PID"
}

do_status() {
    local name pid
    for name in munged slurmctld slurmd; do
        local file=$DIR/$name.pid
        [[ $name == munged ]] && file=$MUNGE_PID
        if pid=$(running_pid "$file"); then
            say "$name runs (pid $pid)"
        else
            say "$name is not running"
        fi
    done
    if command -v sinfo >/dev/null; then
        sinfo || true
    fi
}

case "${1:-}" in
    install) do_install ;;
    start) do_start ;;
    stop) do_stop ;;
    status) do_status ;;
    *)
        echo "usage: bash $0 install|start|status|stop" >&2
        exit 2
        ;;
esac
