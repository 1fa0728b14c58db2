#!/bin/bash
# Every point of docs/performance.md's halo table: python3 -m commux.bench.halo under mpirun
# (beside Open MPI's MPI_Neighbor_alltoallw and persistent Send_init/Recv_init) at 2, 4 and 8
# ranks in 2-D and 3-D, and with diagonals under torchrun (no MPI Cartesian equivalent).
#   benchmarks/halo_all.sh > halo.txt && python3 benchmarks/plot_halo.py halo.txt halo.png
cd "$(dirname "$0")/.."
ranks=${HALO_RANKS:-2,4,8}
python3 -m commux.bench.halo --ranks "$ranks" --mpi --switches --ndim 2 --sizes 16,64,256,1024 --blocks 3
python3 -m commux.bench.halo --ranks "$ranks" --mpi --switches --ndim 3 --sizes 8,16,32,64 --blocks 3
python3 -m commux.bench.halo --ranks 2,4 --ndim 3 --diagonals --sizes 8,16,32,64 --blocks 3
echo done
