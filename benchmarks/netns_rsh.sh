#!/bin/sh
# mpirun's remote shell for namespace "hosts" (benchmarks/window_mpi_hosts.sh):
# "netns_rsh.sh 10.214.0.1I COMMAND..." runs COMMAND in host I's network namespace, in a UTS
# namespace named after it, as ssh would run it on host I.
host=$1
shift
ns=${COMMUX_NETNS_PREFIX:-cmxwm}-h$((${host##*.} - 10))
exec ip netns exec "$ns" unshare --uts sh -c "hostname $ns; $*"
