#!/usr/bin/env bash
# Multi-host check: runs a torchrun job of N "hosts" x 2 ranks on this one machine, each host
# a set of Linux namespaces, so that commux's cross-host paths (UCX over TCP between hosts,
# shared memory only between the ranks of one host) run without a second machine.
#
#   scripts/multihost_check.sh                # 2 hosts x 2 ranks (world size 4)
#   scripts/multihost_check.sh --hosts 3      # 3 hosts x 2 ranks (world size 6)
#   scripts/multihost_check.sh --break        # cut host 1's link after the first collective:
#                                             # the job must FAIL (non-zero exit) in bounded time
#   scripts/multihost_check.sh --kill         # SIGKILL the last rank after the first
#                                             # collective: every rank of the other hosts must
#                                             # fail its next all_reduce naming it, in seconds
#   scripts/multihost_check.sh --job benchmarks/hierarchical.py   # another torchrun script
#                                             # (a benchmark) on the same hosts
#   scripts/multihost_check.sh --exec "build/x/capi_ranks --rank-from-env"   # no torchrun:
#                                             # a program without torch, --nproc copies per
#                                             # host, meeting through COMMUX_BOOTSTRAP (the
#                                             # C API's init from the environment) on host 0
#
# Options: --hosts N (2..9), --nproc N (ranks per host, default 2), --timeout S (hard limit
# per torchrun, default 240), --break, --kill, --keep-logs, --exec COMMAND. Environment: PYTHON (interpreter, default
# python3), MULTIHOST_BACKEND (default ucx; "gloo" checks the harness itself),
# MULTIHOST_PG_TIMEOUT (seconds, init_process_group's timeout; default 60, 20 with --break).
#
# What a "host" is here (each one gets its own):
#   * network namespace "cmxmh-hI": loopback, plus eth0 = 10.213.0.(10+I)/24, a veth whose
#     other end sits on a bridge in a namespace of its own ("cmxmh-br"). Both veth ends are
#     created directly inside their namespaces, so the root namespace's interfaces and routes
#     are never touched, and the hosts have no route anywhere but 10.213.0.0/24;
#   * UTS namespace: host name cmx-hostI (commux's shared-memory channel compares host names);
#   * IPC namespace and a mount namespace with a private tmpfs on /dev/shm (commux also
#     compares /dev/shm's device and inode; UCX's shared-memory transports live there), its
#     own /etc/hosts naming every host, and its own /proc;
#   * PID namespace: as on real hosts, a rank cannot see another host's processes, so commux
#     watches cross-host peers through UCX's peer error handling, not a pidfd. It also makes
#     cleanup certain: torchrun is the namespace's init, and when it dies the kernel kills
#     every process of that host.
# The kernel (and its boot id) is shared, which real hosts do not do; commux's host identity
# still differs through the host name and /dev/shm.
#
# No UCX_* variable reaches the job: a multi-host job must work with UCX's defaults.
# Only one run at a time (a lock); leftovers of a killed earlier run are removed first, and
# everything this script made is removed on exit, whatever the outcome.
set -euo pipefail
cd "$(dirname "$0")/.."
REPO=$PWD

HOSTS=2
NPROC=2
TIMEOUT=240
BREAK=0
KILL=0
KEEP_LOGS=0
JOB=tests/python/multihost_job.py
EXEC=""
while [[ $# -gt 0 ]]; do
    case $1 in
        --hosts) HOSTS=$2; shift 2 ;;
        --hosts=*) HOSTS=${1#*=}; shift ;;
        --nproc) NPROC=$2; shift 2 ;;
        --nproc=*) NPROC=${1#*=}; shift ;;
        --timeout) TIMEOUT=$2; shift 2 ;;
        --timeout=*) TIMEOUT=${1#*=}; shift ;;
        --break) BREAK=1; shift ;;
        --kill) KILL=1; shift ;;
        --keep-logs) KEEP_LOGS=1; shift ;;
        --job) JOB=$2; shift 2 ;;
        --job=*) JOB=${1#*=}; shift ;;
        --exec) EXEC=$2; shift 2 ;;
        -h|--help) sed -n '2,/^set -euo/p' "$0" | sed '$d'; exit 0 ;;
        *) echo "multihost_check: unknown argument $1" >&2; exit 2 ;;
    esac
done
[[ $HOSTS =~ ^[2-9]$ ]] || { echo "multihost_check: --hosts must be 2..9" >&2; exit 2; }
[[ $NPROC =~ ^[1-8]$ ]] || { echo "multihost_check: --nproc must be 1..8" >&2; exit 2; }
[[ $TIMEOUT =~ ^[0-9]+$ ]] || { echo "multihost_check: --timeout must be seconds" >&2; exit 2; }

die() { echo "multihost_check: $*" >&2; exit 2; }
[[ $(id -u) -eq 0 ]] || die "needs root (network, UTS, IPC, mount and PID namespaces)"
for tool in ip unshare timeout flock; do
    command -v "$tool" >/dev/null || die "needs '$tool'"
done
PY=${PYTHON:-python3}
# The real interpreter (not a pyenv shim), so that every host runs the same one.
PY=$("$PY" -c 'import sys; print(sys.executable)')

PREFIX=cmxmh
BR_NS=$PREFIX-br
SUBNET=10.213.0
MASTER_PORT=29513
WORLD=$((HOSTS * NPROC))
host_ns() { echo "$PREFIX-h$1"; }
host_ip() { echo "$SUBNET.$((10 + $1))"; }

# One run at a time: the namespace names are fixed. Holding the lock also means that any
# cmxmh-* namespace found now is a leftover of a run that was killed. A run that holds it
# ends within its own timeout, so wait that long for it.
LOCK_DIR=/run/lock
[[ -d $LOCK_DIR && -w $LOCK_DIR ]] || LOCK_DIR=/tmp
exec 9>"$LOCK_DIR/commux-multihost.lock"
if ! flock -n 9; then
    echo "multihost_check: another multihost check is running; waiting for it"
    flock -w $((TIMEOUT + 120)) 9 || die "another multihost check still holds the lock"
fi

# Kills every process inside our namespaces and deletes them (veths go with them; the
# tmpfs, proc and /etc/hosts mounts live only in the hosts' mount namespaces, which vanish
# with their last process).
remove_namespaces() {
    local ns pids
    for ns in $(ip netns list 2>/dev/null | awk -v p="^$PREFIX-" '$1 ~ p {print $1}'); do
        pids=$(ip netns pids "$ns" 2>/dev/null || true)
        [[ -n $pids ]] && kill -9 $pids 2>/dev/null || true
        ip netns del "$ns" 2>/dev/null || true
    done
}

WORK=""
LAUNCHER_PIDS=()
cleanup() {
    local rc=$?
    trap - EXIT INT TERM
    local pid
    # Launchers still running (failure, signal): kill them, then every process left in the
    # hosts' network namespaces (unshare, torchrun and the ranks).
    for pid in "${LAUNCHER_PIDS[@]}"; do
        kill -9 "$pid" 2>/dev/null || true
    done
    remove_namespaces
    wait 2>/dev/null || true
    if [[ -n $WORK && -d $WORK ]]; then
        if [[ $KEEP_LOGS -eq 1 ]]; then
            touch "$WORK/.keep"
            echo "multihost_check: logs kept in $WORK"
        else
            rm -rf "$WORK"
        fi
    fi
    exit "$rc"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

# Leftovers of a killed earlier run: its namespaces (and processes), its scratch folder
# (unless it was asked to keep its logs).
remove_namespaces
for d in /tmp/commux-multihost.*; do
    [[ -d $d && ! -e $d/.keep ]] && rm -rf "$d"
done
WORK=$(mktemp -d /tmp/commux-multihost.XXXXXX)
chmod 755 "$WORK"

# ---- the network: a bridge in its own namespace, one veth per host --------------------
ip netns add "$BR_NS"
ip -n "$BR_NS" link set lo up
ip -n "$BR_NS" link add br0 type bridge
ip -n "$BR_NS" link set br0 up
# Every host knows every host's name, also as the IPv4-mapped IPv6 address that a dual-stack
# listener (torch's TCPStore) sees, so that no lookup goes to a DNS server.
{
    echo "127.0.0.1 localhost"
    echo "::1 localhost"
    for ((i = 0; i < HOSTS; i++)); do
        echo "$(host_ip "$i") cmx-host$i"
        echo "::ffff:$(host_ip "$i") cmx-host$i"
    done
} >"$WORK/hosts"
for ((i = 0; i < HOSTS; i++)); do
    ns=$(host_ns "$i")
    ip netns add "$ns"
    ip -n "$ns" link set lo up
    # Both ends are born inside their namespaces: nothing appears in the root namespace.
    ip link add eth0 netns "$ns" type veth peer name "h$i" netns "$BR_NS"
    ip -n "$BR_NS" link set "h$i" master br0 up
    ip -n "$ns" addr add "$(host_ip "$i")/24" dev eth0
    ip -n "$ns" link set eth0 up
done
# The hosts reach each other (and nothing else: the only route is the /24 on eth0).
for ((i = 1; i < HOSTS; i++)); do
    ok=0
    for _ in $(seq 50); do
        if ip netns exec "$(host_ns "$i")" "$PY" -c "
import socket, sys
s = socket.socket(); s.settimeout(0.2)
try: s.connect(('$(host_ip 0)', 9))
except ConnectionRefusedError: sys.exit(0)   # a RST came back: host 0 is reachable
except OSError: sys.exit(1)
sys.exit(0)" 2>/dev/null; then ok=1; break; fi
        sleep 0.1
    done
    [[ $ok -eq 1 ]] || die "host $i cannot reach host 0 over the bridge"
done

# ---- the job's environment ------------------------------------------------------------
# No UCX_* variable: the job must work with UCX's defaults across hosts.
for v in $(compgen -e | grep '^UCX_' || true); do unset "$v"; done
export OMP_NUM_THREADS=1 PYTHONUNBUFFERED=1 PYTHONFAULTHANDLER=1
export MULTIHOST_BACKEND=${MULTIHOST_BACKEND:-ucx}
if [[ $BREAK -eq 1 ]]; then
    export MULTIHOST_BREAK_DIR=$WORK/break
    mkdir -p "$MULTIHOST_BREAK_DIR"
    export MULTIHOST_PG_TIMEOUT=${MULTIHOST_PG_TIMEOUT:-20}
else
    unset MULTIHOST_BREAK_DIR
    export MULTIHOST_PG_TIMEOUT=${MULTIHOST_PG_TIMEOUT:-60}
fi
if [[ $KILL -eq 1 ]]; then export MULTIHOST_KILL=1; else unset MULTIHOST_KILL; fi
# gloo (harness self-check only) must be told which interface is the cross-host one.
if [[ $MULTIHOST_BACKEND == gloo ]]; then export GLOO_SOCKET_IFNAME=eth0; fi

# ---- start every host at once ---------------------------------------------------------
# Inside the host's network namespace, unshare makes the rest of the host; torchrun becomes
# the PID namespace's init. --kill-child: if unshare dies (timeout, cleanup), the kernel
# SIGKILLs torchrun, and with it every process of the host.
# --exec: the host's ranks are copies of the program, each told its rank, the world's size
# and where rank 0 serves the bootstrap store; a rank that succeeds says so as torchrun's
# jobs do ("multihost ok rank R").
if [[ -n $EXEC ]]; then
    read -r -a EXEC_ARGS <<<"$EXEC"
    LAUNCH=(sh -c '
        host=$1 n=$2 world=$3 store=$4; shift 4
        pids=""
        for l in $(seq 0 $((n - 1))); do
            r=$((host * n + l))
            ( COMMUX_RANK=$r COMMUX_SIZE=$world COMMUX_BOOTSTRAP=$store "$@" \
                && echo "multihost ok rank $r (exec)" ) &
            pids="$pids $!"
        done
        rc=0
        for p in $pids; do wait "$p" || rc=1; done
        exit $rc' sh)
fi
start=$(date +%s)
for ((i = 0; i < HOSTS; i++)); do
    if [[ -n $EXEC ]]; then
        JOB_COMMAND=("${LAUNCH[@]}" "$i" "$NPROC" "$WORLD" "$(host_ip 0):$((MASTER_PORT + 1))"
                     "${EXEC_ARGS[@]}")
    else
        JOB_COMMAND=("$PY" -m torch.distributed.run
            --nnodes="$HOSTS" --nproc-per-node="$NPROC" --node-rank="$i"
            --rdzv-backend=static --master-addr="$(host_ip 0)" --master-port=$MASTER_PORT
            --max-restarts=0 --monitor-interval=0.5
            "$REPO/$JOB")
    fi
    timeout --kill-after=10 "$TIMEOUT" \
        ip netns exec "$(host_ns "$i")" \
        unshare --uts --ipc --mount --pid --kill-child --mount-proc --propagation private \
        sh -c '
            set -e
            hostname "cmx-host$1"
            mount -t tmpfs -o size=512m,mode=1777 tmpfs /dev/shm
            mount --bind "$2" /etc/hosts
            shift 2
            exec "$@"' sh "$i" "$WORK/hosts" "${JOB_COMMAND[@]}" \
        >"$WORK/host$i.log" 2>&1 &
    LAUNCHER_PIDS+=($!)
done

# True while any of the given launcher pids still runs. Read from the shell's own job table:
# a reaped launcher's pid may belong to another process by now, which kill -0 would take
# for a running host.
running() {
    local live pid
    live=" $(jobs -rp | tr '\n' ' ') "
    for pid in "$@"; do [[ $live == *" $pid "* ]] && return 0; done
    return 1
}

# ---- --break: cut host 1 off once every rank has finished its first collective --------
if [[ $BREAK -eq 1 ]]; then
    deadline=$((SECONDS + TIMEOUT))
    while (($(find "$MULTIHOST_BREAK_DIR" -name 'ready.*' | wc -l) < WORLD)); do
        if ! running "${LAUNCHER_PIDS[@]}" || [[ $SECONDS -ge $deadline ]]; then
            echo "multihost_check: --break: the job never got to the break point" >&2
            break
        fi
        sleep 0.2
    done
    # The link goes down on host 1's side; its TCP connections stay open but nothing
    # crosses any more, as when a cable is pulled. The ranks then fail on their own.
    ip -n "$(host_ns 1)" link set eth0 down
    touch "$MULTIHOST_BREAK_DIR/broken"
    echo "multihost_check: --break: eth0 of host 1 is down after $(($(date +%s) - start)) s"
fi

# ---- --kill: the surviving hosts are judged by their ranks' lines ---------------------
# torchrun's agents meet at an exit barrier (5 min) that the host which lost a worker never
# reaches, so the surviving hosts' torchruns are stopped once their ranks have reported.
if [[ $KILL -eq 1 ]]; then
    last=$((HOSTS - 1))
    deadline=$((SECONDS + TIMEOUT))
    while (($(cat "$WORK"/host*.log | grep -c "^multihost kill ok rank " || true) < last * NPROC)); do
        running "${LAUNCHER_PIDS[@]:0:last}" && [[ $SECONDS -lt $deadline ]] || break
        sleep 0.2
    done
    sleep 1  # the ranks' own exit
    for pid in "${LAUNCHER_PIDS[@]:0:last}"; do kill -TERM "$pid" 2>/dev/null || true; done
fi

# ---- a failed host: the others would wait out torchrun's exit barrier (5 min) ----------
# Once one host's torchrun fails, the others get a short grace to finish on their own (a
# rank's error reaches its peers in seconds), then are stopped, so a failure is reported in
# well under a minute instead of at the hard timeout.
# (--break and --kill judge how each host fails on its own, so they are left alone.)
STOPPED=()
if [[ $KILL -eq 0 && $BREAK -eq 0 ]]; then
    grace_end=-1
    while :; do
        any=0
        for ((i = 0; i < HOSTS; i++)); do
            [[ -n ${RCS[$i]:-} ]] && continue
            if running "${LAUNCHER_PIDS[$i]}"; then
                any=1
            else
                rc=0
                wait "${LAUNCHER_PIDS[$i]}" || rc=$?
                RCS[$i]=$rc
                [[ $rc -ne 0 && $grace_end -lt 0 ]] && grace_end=$((SECONDS + 20))
            fi
        done
        [[ $any -eq 1 ]] || break
        if [[ $grace_end -ge 0 && $SECONDS -ge $grace_end ]]; then
            for ((i = 0; i < HOSTS; i++)); do
                [[ -n ${RCS[$i]:-} ]] && continue
                kill -TERM "${LAUNCHER_PIDS[$i]}" 2>/dev/null || true
                STOPPED[$i]=1
            done
            break
        fi
        sleep 0.5
    done
fi

# ---- collect --------------------------------------------------------------------------
show_logs() {
    local i
    for ((i = 0; i < HOSTS; i++)); do
        echo "===== host $i output (last 400 lines) ====="
        tail -n 400 "$WORK/host$i.log"
    done
}
# Ranks 0..$2-1 each printed their "$1 rank R " line (what the script reads as passed).
reported() {
    local r ok=0
    for ((r = 0; r < $2; r++)); do
        grep -h "^$1 rank $r " "$WORK"/host*.log || { echo "rank $r: no '$1' line"; ok=1; }
    done
    return $ok
}
fail=0
for ((i = 0; i < HOSTS; i++)); do
    if [[ -z ${RCS[$i]:-} ]]; then
        rc=0
        wait "${LAUNCHER_PIDS[$i]}" || rc=$?
        RCS[$i]=$rc
    fi
    [[ ${RCS[$i]} -eq 0 ]] || fail=1
done
LAUNCHER_PIDS=()
elapsed=$(($(date +%s) - start))

for ((i = 0; i < HOSTS; i++)); do
    note=""
    [[ ${RCS[$i]} -eq 124 || ${RCS[$i]} -eq 137 ]] && note=" (HARD TIMEOUT of ${TIMEOUT}s)"
    [[ $KILL -eq 1 && $i -lt $((HOSTS - 1)) ]] && note=" (stopped after its ranks reported)"
    [[ -n ${STOPPED[$i]:-} ]] && note=" (stopped: another host failed first)"
    echo "multihost_check: host $i ($(host_ip "$i")): torchrun exit ${RCS[$i]}$note"
done
if [[ $KILL -eq 1 ]]; then
    # The last host lost a worker, so its torchrun fails on its own; every rank of the
    # other hosts must say what it saw.
    fail=0
    [[ ${RCS[$last]} -ne 0 && ${RCS[$last]} -ne 124 && ${RCS[$last]} -ne 137 ]] || fail=1
    reported "multihost kill ok" $((last * NPROC)) || fail=1
    if [[ $fail -ne 0 ]]; then
        show_logs
        echo "multihost_check: --kill FAILED ($HOSTS hosts x $NPROC ranks, ${elapsed}s)"
        exit 1
    fi
    echo "multihost_check: --kill PASSED ($HOSTS hosts x $NPROC ranks, ${elapsed}s)"
    exit 0
fi
if [[ $fail -ne 0 ]]; then
    show_logs
    echo "multihost_check: FAILED ($HOSTS hosts x $NPROC ranks, ${elapsed}s)"
    exit 1
fi
# Success also needs every rank's last line.
if ! reported "multihost ok" "$WORLD"; then
    show_logs
    echo "multihost_check: FAILED (a rank did not report)"
    exit 1
fi
echo "multihost_check: PASSED ($HOSTS hosts x $NPROC ranks, backend $MULTIHOST_BACKEND, ${elapsed}s)"
