#!/usr/bin/env bash
# Runs an MPI job of one rank (RANKS_PER_HOST) on each of two namespace "hosts" (what
# benchmarks/window_mpi_hosts.sh and benchmarks/halo_hosts.sh measure across hosts):
#
#   benchmarks/mpi_hosts.sh [mpirun arguments --] PROGRAM ARGS...
#
# Two network namespaces joined through a bridge as the harness's are (10.214.0.10 and .11,
# veths created inside their namespaces; nothing in the root namespace is touched), each
# with its own host name. mpirun runs in host 0 and starts host 1's daemon through
# benchmarks/netns_rsh.sh (its ssh), so MPI's traffic between the ranks crosses the veths over
# TCP (btl tcp), as between two hosts on this network. The hosts share two cores, and each
# daemon would bind its one rank to core 0: --bind-to none (commux's ranks are not bound
# either). MPI's RMA there is osc ucx, what Open MPI 4.1 picks between hosts without RDMA
# (osc pt2pt refuses mpi4py's MPI_THREAD_MULTIPLE, osc rdma needs an RDMA network), told to
# use TCP only (UCX_TLS=tcp,self): the two "hosts" share a kernel and /dev/shm, and UCX
# would otherwise take shared memory between them. MPI_ARGS: more mpirun arguments.
# RANKS_PER_HOST (default 1): ranks on each host; the ranks of one host then also talk over
# TCP (loopback), commux and Open MPI alike. Needs root, mpirun and mpi4py.
set -euo pipefail
cd "$(dirname "$0")/.."
extra=()
if [[ " $* " == *" -- "* ]]; then
    while [[ $1 != -- ]]; do extra+=("$1"); shift; done
    shift
fi
PREFIX=cmxwm
per_host=${RANKS_PER_HOST:-1}

remove() {
    local ns
    for ns in $(ip netns list 2>/dev/null | awk -v p="^$PREFIX-" '$1 ~ p {print $1}'); do
        ip netns del "$ns" 2>/dev/null || true
    done
}
trap remove EXIT
remove
ip netns add $PREFIX-br
ip -n $PREFIX-br link add br0 type bridge
ip -n $PREFIX-br link set br0 up
for i in 0 1; do
    ip netns add $PREFIX-h$i
    ip -n $PREFIX-h$i link set lo up
    ip link add eth0 netns $PREFIX-h$i type veth peer name h$i netns $PREFIX-br
    ip -n $PREFIX-br link set h$i master br0 up
    ip -n $PREFIX-h$i addr add 10.214.0.$((10 + i))/24 dev eth0
    ip -n $PREFIX-h$i link set eth0 up
done
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
pass_env=(-x COMMUX_NETNS_PREFIX=$PREFIX)
[[ -n ${PYTHONPATH:-} ]] && pass_env+=(-x PYTHONPATH)
timeout 1800 ip netns exec $PREFIX-h0 unshare --uts sh -c 'hostname '$PREFIX'-h0; exec "$@"' sh \
    mpirun -n $((2 * per_host)) --host 10.214.0.10:$per_host,10.214.0.11:$per_host --bind-to none \
    --mca plm_rsh_agent "$PWD/benchmarks/netns_rsh.sh" --mca plm_rsh_no_tree_spawn 1 \
    --mca oob_tcp_if_include 10.214.0.0/24 --mca btl tcp,self \
    --mca btl_tcp_if_include 10.214.0.0/24 -x UCX_TLS=tcp,self \
    -x UCX_NET_DEVICES=eth0 "${pass_env[@]}" "${extra[@]}" ${MPI_ARGS:-} "$@"
