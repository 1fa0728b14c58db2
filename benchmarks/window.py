"""One-sided windows beside tagged send/recv and MPI RMA: ``python3 -m commux.bench.window``
(python/commux/bench/window.py has the method). This file lets the multi-host harness run it
as a torchrun job:

    scripts/multihost_check.sh --hosts 2 --nproc 1 --job benchmarks/window.py
"""

from commux.bench.window import main

if __name__ == "__main__":
    main()
