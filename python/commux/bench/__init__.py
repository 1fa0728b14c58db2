"""``python3 -m commux.bench``: commux's benchmark against gloo, raw UCX and this
machine's floors.

Every world size runs in fresh rank processes on localhost, with the default group on
ucx and a gloo group over the same ranks; both are timed in interleaved blocks, so
their ratio survives the shared machine's noise. Modules, one idea each:

* cli: options, plan, order of a run;            * runner: rank processes, hard timeouts;
* _worker: one rank (groups, floors, points);    * measure: the timed, interleaved blocks;
* floor: fake-backend call costs, memcpy rate;    * raw_ucx: ucx_perftest tag_lat / tag_bw;
* floor_model: the table's floor per point;      * targets: PASS/MISS goals;
* sizes: byte sizes and what "bytes" means per op;
* report: table, results.csv, raw_ucx.csv, summary.json, results.png and <op>.png.

Only _worker, measure and floor import torch; the parent process stays light.
"""
