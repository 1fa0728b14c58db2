"""The MPI peer of a run (``--mpi``): the same points through Open MPI, next to commux and
gloo:

* ``mpi4py-torch`` / ``mpi4py-numpy``: mpi4py on torch tensors and on numpy arrays, the
  torch-facing peer (what a torch program calling MPI gets). Their blocks run inside the
  torch ranks, interleaved with ucx and gloo (mpi_ops.py): the torch world starts under
  ``mpirun`` (mpirun_command), so every column of a point is taken side by side.
* ``mpi-c``: Open MPI's C API (mpi_bench.c, compiled here with mpicc into the output
  folder), the number HPC users compare with. It is its own program, so it runs as a
  separate world after the torch world of the same size, with the same timing rules; its
  ratios to commux are as good as the machine's stability over the minutes between them.

Open MPI runs as it does for its users: mpirun's defaults (vader shared memory, tuned
collectives, its default binding), with --oversubscribe so that more ranks than cores
are allowed (Open MPI then yields while it waits).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess

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


def mpirun_command(ranks: int, pinning: str = "default") -> list[str]:
    """mpirun for ``ranks`` ranks on this host, up to the program. ``pinning``: "default"
    (Open MPI's own: each rank bound to a core up to 2 ranks, unbound above), "pinned" (each
    rank bound to one core, cores shared when ranks outnumber them) or "unpinned" (no
    binding, as torchrun starts ranks)."""
    cmd = ["mpirun", "-n", str(ranks), "--oversubscribe"]
    if pinning == "pinned":
        # overload-allowed: more ranks than cores share them (mpirun refuses plain "core"
        # there, and os.cpu_count() would not say where that starts: hyperthreads, cpusets).
        cmd += ["--bind-to", "core:overload-allowed"]
    elif pinning == "unpinned":
        cmd += ["--bind-to", "none"]
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
          timeout: float, pinning: str = "default") -> tuple[list[dict], str | None]:
    args = [f"{op}:{sizes.element_count(op, n, ranks)}" for op, n in plan]
    try:
        r = subprocess.run(mpirun_command(ranks, pinning) + [exe, str(rounds), str(block_seconds), str(max_iters)] + args,
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
