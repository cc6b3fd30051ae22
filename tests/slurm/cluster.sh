#!/usr/bin/env bash
# A throwaway one-node Slurm cluster with job accounting, for the Slurm test
# tier and for trying Slurm on a laptop (Debian/Ubuntu, as root, no systemd
# needed). It runs munged, MariaDB, slurmdbd, slurmctld and slurmd, and keeps
# every file (configs, keys, spool, logs, pid files, the database) under
# ${LAUNCHER_SLURM_DIR:-/tmp/launcher-slurm}; /etc/slurm is not touched.
#
#   tests/slurm/cluster.sh install          # apt-get what is missing (root; make test-tools)
#   tests/slurm/cluster.sh up               # start (idempotent)
#   eval "$(tests/slurm/cluster.sh env)"    # point sbatch/squeue/sacct at it
#   tests/slurm/cluster.sh down             # cancel jobs, stop daemons, delete the state dir
#
# `up` exits 0 when the node is idle, 3 when the packages are missing (one line
# "slurm: missing ...", naming `install`), 1 when a daemon does not come up (one
# line naming it, with the end of its log). `install` exits 3 when it cannot
# install them (one line "slurm: cannot install ...").
set -euo pipefail

DIR=${LAUNCHER_SLURM_DIR:-/tmp/launcher-slurm}
export SLURM_CONF=$DIR/etc/slurm.conf
export PATH=$PATH:/usr/sbin:/sbin
CLUSTER=launcher
DB_PORT=3307 # MariaDB on 127.0.0.1 only; 3307 keeps clear of a system MariaDB
PACKAGES=(slurmctld slurmd slurm-client slurmdbd munge mariadb-server)
COMMANDS=(munged mariadbd mariadb-install-db mariadb-admin slurmdbd slurmctld slurmd sbatch sacctmgr)
STOP_ORDER=(slurmd slurmctld slurmdbd mariadbd munged)

pid_file() { echo "$DIR/run/$1.pid"; }
log_file() { echo "$DIR/log/$1.log"; }

# alive DAEMON: its pid file names a live process (a zombie counts as gone).
alive() {
    local pid state
    pid=$(cat "$(pid_file "$1")" 2>/dev/null) || return 1
    read -r _ _ state _ <"/proc/$pid/stat" 2>/dev/null || return 1
    [[ $state != Z ]]
}

cannot_install() {
    echo "slurm: cannot install $*" >&2
    exit 3
}

# fail DAEMON WHY: one line with the reason and the last lines of its log; the daemons already
# started are stopped (the state dir stays, for its logs).
fail() {
    local log tail_ daemon
    log=$(log_file "$1")
    tail_=$(tail -n 5 "$log" 2>/dev/null | tr -s '\n' '|') || true
    echo "slurm: $1 failed to start: $2; last lines of $log: ${tail_:-(none)}" >&2
    for daemon in "${STOP_ORDER[@]}"; do stop "$daemon"; done
    exit 1
}

# wait_for SECONDS DAEMON WHAT COMMAND...: poll COMMAND (a command or a function of this file,
# each of whose client calls has its own timeout) until it succeeds.
wait_for() {
    local limit=$1 daemon=$2 what=$3 end=$((SECONDS + $1))
    shift 3
    until "$@" >/dev/null 2>&1; do
        alive "$daemon" || fail "$daemon" "it exited while waiting for $what"
        ((SECONDS < end)) || fail "$daemon" "gave up after ${limit}s waiting for $what"
        sleep 0.5
    done
}

# missing_commands: the cluster's commands not on PATH, space-separated (empty: all there).
missing_commands() {
    local missing=() cmd
    for cmd in "${COMMANDS[@]}"; do
        command -v "$cmd" >/dev/null || missing+=("$cmd")
    done
    echo "${missing[*]}"
}

install_packages() {
    local missing
    missing=$(missing_commands)
    [[ -n $missing ]] || return 0
    mkdir -p "$DIR/log"
    command -v apt-get >/dev/null || cannot_install "${PACKAGES[*]}: no apt-get (missing $missing)"
    local log=$DIR/log/apt.log
    export DEBIAN_FRONTEND=noninteractive
    timeout 300 apt-get update -q >"$log" 2>&1 ||
        cannot_install "${PACKAGES[*]}: apt-get update failed: $(tail -n 1 "$log")"
    timeout 600 apt-get install -y -q --no-install-recommends "${PACKAGES[@]}" >>"$log" 2>&1 ||
        cannot_install "${PACKAGES[*]}: apt-get install failed: $(tail -n 1 "$log")"
}

write_configs() {
    local host mem
    host=$(hostname -s)
    mem=$(awk '/^MemTotal:/ {print int($2 / 1024 * 0.95)}' /proc/meminfo)
    cat >"$SLURM_CONF" <<EOF
ClusterName=$CLUSTER
SlurmctldHost=$host(127.0.0.1)
SlurmUser=root
SlurmctldPort=6817
SlurmdPort=6818
AuthType=auth/munge
AuthInfo=socket=$DIR/munge/munge.socket
CredType=cred/munge
StateSaveLocation=$DIR/spool/slurmctld
SlurmdSpoolDir=$DIR/spool/slurmd
SlurmctldPidFile=$(pid_file slurmctld)
SlurmdPidFile=$(pid_file slurmd)
SlurmctldLogFile=$(log_file slurmctld)
SlurmdLogFile=$(log_file slurmd)
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
MpiDefault=none
MailProg=/bin/true
ReturnToService=2
AccountingStorageType=accounting_storage/slurmdbd
AccountingStorageHost=localhost
AccountingStoragePort=6819
# the munge socket for slurmdbd connections (AuthInfo covers only the others)
AccountingStoragePass=$DIR/munge/munge.socket
JobAcctGatherType=jobacct_gather/linux
JobCompType=jobcomp/none
KillWait=5
MinJobAge=5
OverTimeLimit=0
InactiveLimit=0
NodeName=$host NodeAddr=127.0.0.1 CPUs=$(nproc) RealMemory=$mem State=UNKNOWN
PartitionName=debug Nodes=$host Default=YES MaxTime=INFINITE State=UP
EOF
    # slurmdbd has no -f: it reads slurmdbd.conf next to $SLURM_CONF.
    (umask 077 && cat >"$DIR/etc/slurmdbd.conf") <<EOF
AuthType=auth/munge
AuthInfo=socket=$DIR/munge/munge.socket
DbdHost=localhost
DbdPort=6819
SlurmUser=root
LogFile=$(log_file slurmdbd)
PidFile=$(pid_file slurmdbd)
StorageType=accounting_storage/mysql
StorageHost=127.0.0.1
StoragePort=$DB_PORT
StorageUser=slurm
StoragePass=slurm
StorageLoc=slurm_acct_db
EOF
}

start_munged() {
    local key=$DIR/munge/munge.key
    [[ -s $key ]] || (umask 077 && head -c 1024 /dev/urandom >"$key")
    munged --key-file="$key" --socket="$DIR/munge/munge.socket" \
        --pid-file="$(pid_file munged)" --log-file="$(log_file munged)" \
        --seed-file="$DIR/munge/munge.seed" >/dev/null 2>&1 ||
        fail munged "munged exited with status $?"
    wait_for 30 munged "a munge credential" timeout 10 munge -S "$DIR/munge/munge.socket" -n
}

mariadb_sql() { timeout 30 mariadb --no-defaults --socket="$DIR/mysql/mysqld.sock" -u root "$@"; }

start_mariadbd() {
    local log
    log=$(log_file mariadbd)
    mariadb-install-db --no-defaults --user=root --datadir="$DIR/mysql/data" \
        --auth-root-authentication-method=normal --skip-test-db >>"$log" 2>&1 ||
        fail mariadbd "mariadb-install-db failed"
    setsid mariadbd --no-defaults --user=root --datadir="$DIR/mysql/data" \
        --socket="$DIR/mysql/mysqld.sock" --pid-file="$(pid_file mariadbd)" \
        --port=$DB_PORT --bind-address=127.0.0.1 --skip-name-resolve \
        --innodb-buffer-pool-size=64M --innodb-lock-wait-timeout=900 \
        --log-error="$log" </dev/null >>"$log" 2>&1 &
    echo $! >"$(pid_file mariadbd)"
    wait_for 60 mariadbd "connections on $DIR/mysql/mysqld.sock" mariadb_sql -e 'SELECT 1'
    mariadb_sql -e "CREATE USER IF NOT EXISTS 'slurm'@'127.0.0.1' IDENTIFIED BY 'slurm';
        GRANT ALL ON slurm_acct_db.* TO 'slurm'@'127.0.0.1';" >>"$log" 2>&1 ||
        fail mariadbd "could not create the slurm database user"
}

start_slurmdbd() {
    slurmdbd >/dev/null 2>&1 || fail slurmdbd "slurmdbd exited with status $?"
    wait_for 60 slurmdbd "sacctmgr show cluster to answer" timeout 10 sacctmgr -n show cluster
    if ! timeout 10 sacctmgr -n -P show cluster format=cluster | grep -qx "$CLUSTER"; then
        timeout 30 sacctmgr -i add cluster "$CLUSTER" >/dev/null || fail slurmdbd "sacctmgr add cluster $CLUSTER failed"
    fi
}

start_slurmctld() {
    slurmctld -f "$SLURM_CONF" >/dev/null 2>&1 || fail slurmctld "slurmctld exited with status $?"
    wait_for 60 slurmctld "scontrol ping to answer" bash -c 'timeout 10 scontrol ping | grep -q UP'
}

node_idle() { [[ $(timeout 10 sinfo -h -o %T) == idle ]]; }

start_slurmd() {
    slurmd -f "$SLURM_CONF" >/dev/null 2>&1 || fail slurmd "slurmd exited with status $?"
    wait_for 60 slurmd "sinfo to report the node idle" node_idle
}

is_up() {
    local daemon
    for daemon in "${STOP_ORDER[@]}"; do alive "$daemon" || return 1; done
    timeout 10 sinfo -h -o %T 2>/dev/null | grep -qx idle
}

up() {
    [[ $(id -u) == 0 ]] || cannot_install "or run the cluster: not root (slurmd and SlurmUser=root need root)"
    local missing
    missing=$(missing_commands)
    if [[ -n $missing ]]; then
        echo "slurm: missing $missing; install them with $0 install (Debian/Ubuntu, root)" >&2
        exit 3
    fi
    if [[ -d $DIR ]]; then
        is_up && return 0
        down # half up: start again from nothing
    fi
    mkdir -p "$DIR"/{etc,run,log,munge,mysql,spool/slurmctld,spool/slurmd}
    chmod 755 "$DIR" "$DIR/munge" # munged refuses a writable dir; clients need the socket
    write_configs
    start_munged
    start_mariadbd
    start_slurmdbd
    start_slurmctld
    start_slurmd
}

cancel_jobs() {
    alive slurmctld || return 0
    local jobs end=$((SECONDS + 60))
    jobs=$(timeout 10 squeue -h -o %A 2>/dev/null) || return 0
    [[ -n $jobs ]] || return 0
    # shellcheck disable=SC2086  # one job id a word
    scancel $jobs 2>/dev/null || true
    while [[ -n $(timeout 10 squeue -h -o %A 2>/dev/null) ]]; do
        ((SECONDS < end)) || { echo "slurm: jobs still queued after 60s: $jobs" >&2; return 0; }
        sleep 0.5
    done
}

# stop DAEMON: SIGTERM, then SIGKILL after 30 s; returns once it is gone or a zombie.
stop() {
    local pid end=$((SECONDS + 30))
    alive "$1" || return 0
    pid=$(cat "$(pid_file "$1")")
    kill "$pid" 2>/dev/null || true
    while alive "$1"; do
        if ((SECONDS >= end)); then
            echo "slurm: $1 (pid $pid) ignored SIGTERM for 30s, killing it" >&2
            kill -KILL "$pid" 2>/dev/null || true
            end=$((SECONDS + 30))
        fi
        sleep 0.2
    done
}

down() {
    [[ -d $DIR ]] || return 0
    cancel_jobs
    local daemon
    for daemon in "${STOP_ORDER[@]}"; do stop "$daemon"; done
    rm -rf "$DIR"
}

case ${1:-} in
install) install_packages ;;
up) up ;;
down) down ;;
env) printf 'export SLURM_CONF=%q\n' "$SLURM_CONF" ;;
*)
    echo "usage: $0 install|up|down|env" >&2
    exit 2
    ;;
esac
