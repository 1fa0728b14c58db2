"""The MPI peer of a run (``--mpi``): the same points through Open MPI, next to commux and
gloo. Two programs per world size, each under ``mpirun`` with a hard timeout:

* ``mpi-c``: Open MPI's C API (mpi_bench.c, compiled here with mpicc into the output
  folder), the number HPC users compare with;
* ``mpi4py-torch`` / ``mpi4py-numpy``: mpi4py on torch tensors and on numpy arrays
  (_mpi_worker.py), the torch-facing peer: what a torch program calling MPI gets.

They run after the torch worlds of the same size, in the same run, with the same timing
rules; they are other processes, so their ratios to commux are as good as the machine's
stability over the minutes between them (the table says so). Open MPI runs as it does for
its users: mpirun's defaults (vader shared memory, tuned collectives), with
--oversubscribe when there are more ranks than cores (Open MPI then yields while it
waits).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys

from . import sizes

SOURCE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "mpi_bench.c")


def missing() -> str | None:
    """Why the MPI peer cannot run here, or None."""
    if not shutil.which("mpirun"):
        return "mpirun not found (Debian: apt-get install openmpi-bin libopenmpi-dev)"
    try:
        import mpi4py  # noqa: F401
    except ImportError:
        return "mpi4py not installed (pip install mpi4py; scripts/install.sh --mpi does both)"
    return None


def _mpirun(ranks: int) -> list[str]:
    cmd = ["mpirun", "-n", str(ranks), "--oversubscribe"]
    if os.geteuid() == 0:
        cmd.append("--allow-run-as-root")
    return cmd


def compile_c(out: str) -> tuple[str | None, str]:
    """(path of the compiled mpi_bench, "") or (None, why not)."""
    if not shutil.which("mpicc"):
        return None, "mpicc not found (Debian: libopenmpi-dev)"
    exe = os.path.join(out, "mpi_bench")
    r = subprocess.run(["mpicc", "-O2", "-o", exe, SOURCE], capture_output=True, text=True)
    if r.returncode != 0:
        return None, f"mpicc failed: {r.stderr.strip()[-500:]}"
    return exe, ""


def run_c(exe: str, ranks: int, plan: list, rounds: int, block_seconds: float, max_iters: int,
          timeout: float) -> tuple[list[dict], str | None]:
    args = [f"{op}:{sizes.element_count(op, n, ranks)}" for op, n in plan]
    try:
        r = subprocess.run(_mpirun(ranks) + [exe, str(rounds), str(block_seconds), str(max_iters)] + args,
                           capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        return [], f"mpi-c world of {ranks} ranks timed out after {timeout:.0f} s"
    points = []
    for line in r.stdout.splitlines():
        if not line.startswith("{"):
            continue
        d = json.loads(line)
        nbytes = d["elements"] * sizes.ELEMENT_BYTES
        scale = 0.5 if d["op"] == "p2p" else 1.0
        points.append({"op": d["op"], "ranks": ranks, "bytes": nbytes, "requested_bytes": nbytes,
                       "backend": "mpi-c", "median_us": d["median_s"] * scale * 1e6,
                       "min_us": d["min_s"] * scale * 1e6, "iterations": d["iterations"],
                       "warmup": d["warmup"], "blocks": d["blocks"]})
    error = None if r.returncode == 0 else f"mpi-c exited with {r.returncode}: {r.stderr.strip()[-800:]}"
    return points, error


def run_mpi4py(ranks: int, spec: dict, workdir: str, timeout: float) -> tuple[list[dict], str | None]:
    os.makedirs(workdir, exist_ok=True)
    spec = dict(spec, workdir=workdir)
    spec_path = os.path.join(workdir, "mpi_spec.json")
    with open(spec_path, "w") as f:
        json.dump(spec, f)
    result_path = os.path.join(workdir, "mpi_result.json")
    if os.path.exists(result_path):
        os.unlink(result_path)
    env = dict(os.environ, OMP_NUM_THREADS="1", PYTHONUNBUFFERED="1")
    error = None
    try:
        passed = [a for v in ("OMP_NUM_THREADS", "PYTHONPATH", "LD_LIBRARY_PATH") if v in env
                  for a in ("-x", v)]
        r = subprocess.run(_mpirun(ranks) + passed + [sys.executable, "-m", "commux.bench._mpi_worker",
                                                      spec_path],
                           env=env, stdout=None, stderr=subprocess.PIPE, text=True, timeout=timeout)
        if r.returncode != 0:
            error = f"mpi4py world of {ranks} ranks exited with {r.returncode}: {r.stderr.strip()[-800:]}"
    except subprocess.TimeoutExpired:
        error = f"mpi4py world of {ranks} ranks timed out after {timeout:.0f} s"
    try:
        with open(result_path) as f:
            return json.load(f).get("points", []), error
    except (OSError, ValueError):
        return [], error or "mpi4py wrote no result"


def commux_cpp_p2p(repeats: int = 3) -> tuple[dict | None, str | None]:
    """commux_bench --blocking (commux's C++ API, sendBlocking/recvBlocking, two forked
    ranks) at 8 B: median over ``repeats`` runs of its mean and median one-way latency, or
    (None, why not)."""
    exe = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "bin", "commux_bench")
    if not os.path.exists(exe):
        return None, f"{exe} not found (built with COMMUX_BUILD_BENCH)"
    means, medians = [], []
    for _ in range(repeats):
        try:
            r = subprocess.run([exe, "--sizes", "8", "--blocking"], capture_output=True, text=True, timeout=120)
        except subprocess.TimeoutExpired:
            return None, "commux_bench timed out"
        fields = dict(kv.split("=", 1) for line in r.stdout.splitlines() if line.startswith("size=")
                      for kv in line.split())
        if r.returncode != 0 or "lat_us" not in fields:
            return None, f"commux_bench failed ({r.returncode}): {r.stderr.strip()[-300:]}"
        means.append(float(fields["lat_us"]))
        medians.append(float(fields["lat_median_us"]))
    means.sort()
    medians.sort()
    return {"lat_us": means[len(means) // 2], "lat_median_us": medians[len(medians) // 2]}, None
