"""The halo exchange beside the same exchange by hand (commux, gloo) and Open MPI:
``python3 -m commux.bench.halo`` (python/commux/bench/halo.py has the method). This file lets
a launcher run it as a script:

    torchrun --standalone --nproc-per-node=4 benchmarks/halo.py --ndim 2 --sizes 64,256,1024
    mpirun --allow-run-as-root --oversubscribe -np 4 -x MASTER_ADDR=127.0.0.1 \\
        -x MASTER_PORT=29561 python3 benchmarks/halo.py --mpi --ndim 2
"""

import sys

from commux.bench.halo import main

if __name__ == "__main__":
    sys.exit(main())
