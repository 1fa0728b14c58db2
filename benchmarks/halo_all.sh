#!/bin/bash
# Every point of docs/performance.md's halo table: benchmarks/halo.py under mpirun (beside Open MPI's
# MPI_Neighbor_alltoallw) at 2, 4 and 8 ranks in 2-D and 3-D, and with diagonals under torchrun.
#   benchmarks/halo_all.sh > halo.txt && python3 benchmarks/plot_halo.py halo.txt halo.png
cd "$(dirname "$0")/.."
port=${HALO_PORT:-29600}
for np in 2 4 8; do
  for nd in 2 3; do
    if [ $nd = 2 ]; then sizes=16,64,256,1024; else sizes=8,16,32,64; fi
    port=$((port+1))
    echo "== mpirun -np $np benchmarks/halo.py --mpi --ndim $nd --sizes $sizes --blocks 3"
    timeout 900 mpirun --allow-run-as-root --oversubscribe -np $np -x MASTER_ADDR=127.0.0.1 -x MASTER_PORT=$port python3 benchmarks/halo.py --mpi --ndim $nd --sizes $sizes --blocks 3 2>&1 | grep -v Warn | grep "^|\|^grid"
  done
done
for np in 2 4; do
  port=$((port+1))
  echo "== torchrun --nproc-per-node=$np benchmarks/halo.py --ndim 3 --diagonals --sizes 8,16,32,64 --blocks 3"
  timeout 900 torchrun --standalone --nproc-per-node=$np --master-port=$port benchmarks/halo.py --ndim 3 --diagonals --sizes 8,16,32,64 --blocks 3 2>&1 | grep "^|\|^grid"
done
echo done
