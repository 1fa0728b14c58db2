#!/usr/bin/env bash
# Runs N copies of a program as one job on this host, meeting through COMMUX_BOOTSTRAP
# (the C API's init from the environment) on a free port; fails unless every rank exits 0
# within TIMEOUT seconds (default 60), killing the rest at the limit.
#
#   scripts/run_ranks.sh N program [args...]
set -euo pipefail
ranks=$1
shift
# A free port below the kernel's ephemeral range: one inside it can be handed to another
# process's bind to port 0 (and listened on) before rank 0 binds it (EADDRINUSE in CI).
port=$(python3 - <<'PY'
import random, socket
low = int(open("/proc/sys/net/ipv4/ip_local_port_range").read().split()[0])
for _ in range(50):
    port = random.randrange(10000, low) if low > 12000 else 0
    with socket.socket() as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind(("127.0.0.1", port))
        except OSError:
            continue
        print(s.getsockname()[1])
        break
PY
)
pids=()
for ((r = 0; r < ranks; r++)); do
  COMMUX_BOOTSTRAP=127.0.0.1:$port COMMUX_SIZE=$ranks COMMUX_RANK=$r \
    timeout "${TIMEOUT:-60}" "$@" &
  pids+=($!)
done
status=0
for pid in "${pids[@]}"; do wait "$pid" || status=1; done
exit $status
