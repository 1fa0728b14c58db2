"""Raw UCX on this machine: ``ucx_perftest`` from the PyPI UCX wheel (libucx), server and
client on localhost, the numbers commux's p2p is held against.

Units, checked against the tool's own columns rather than assumed: ucx_perftest's
"bandwidth (MB/s)" is MiB/s (2**20 B/s; e.g. 8 B at 950998 msg/s is printed as 7.26),
and for tag_lat its latency is one way (half a round trip: msg/s = 10**6 / latency
us). Bandwidth is reported in decimal GB/s (10**9 B/s) like every other GB/s figure of the
benchmark: MiB/s x 2**20 / 10**9; raw_ucx.csv keeps the MiB/s column and, as a check,
bytes / average latency (equal to it for tag_bw, whose "latency" is time per message).
"""

from __future__ import annotations

import importlib.util
import os
import socket
import statistics
import subprocess
import tempfile
import time

# (test, message bytes, iterations, warm-up iterations); repeated, median of the averages.
FULL_TESTS = [
    ("tag_lat", 8, 20000, 2000),
    ("tag_bw", 1 << 20, 1000, 20),
    ("tag_bw", 64 << 20, 50, 5),
]
QUICK_TESTS = [
    ("tag_lat", 8, 20000, 2000),
    ("tag_bw", 64 << 20, 20, 3),
]
SERVER_START_TIMEOUT_S = 10.0
RUN_TIMEOUT_S = 60.0

COLUMNS = ["iterations", "lat_p50_us", "lat_avg_us", "lat_overall_us",
           "bw_avg_MiBps", "bw_overall_MiBps", "msgrate_avg", "msgrate_overall"]


def find_perftest() -> tuple[str, str] | None:
    """(ucx_perftest path, its lib dir) from the libucx wheel, without importing it."""
    spec = importlib.util.find_spec("libucx")
    if spec is None or not spec.submodule_search_locations:
        return None
    root = list(spec.submodule_search_locations)[0]
    exe = os.path.join(root, "bin", "ucx_perftest")
    return (exe, os.path.join(root, "lib")) if os.access(exe, os.X_OK) else None


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("0.0.0.0", 0))
        return s.getsockname()[1]


def _listening(port: int) -> bool:
    """Whether something listens on TCP ``port`` (Linux /proc). The server's own
    "Waiting for connection" line cannot be watched: its stdout is block-buffered into
    a file, and probing the port with a connection would be taken for a client."""
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        try:
            with open(table) as f:
                next(f)
                for line in f:
                    fields = line.split()
                    if fields[3] == "0A" and int(fields[1].rsplit(":", 1)[1], 16) == port:
                        return True
        except OSError:
            continue
    return False


def parse_final(text: str) -> dict:
    """The "Final:" line: iterations, latency p50/avg/overall (us), bandwidth avg/overall
    (MiB/s), message rate avg/overall (msg/s)."""
    for line in text.splitlines():
        if line.strip().startswith("Final:"):
            values = line.split()[1:]
            if len(values) < len(COLUMNS):
                break
            return dict(zip(COLUMNS, (float(v) for v in values[: len(COLUMNS)])))
    raise RuntimeError(f"no 'Final:' line in ucx_perftest output:\n{text[-2000:]}")


def run_one(exe: str, libdir: str, test: str, size: int, iters: int, warmup: int) -> dict:
    """One server/client pair on a fresh port; both are killed whatever happens."""
    env = dict(os.environ)
    env["LD_LIBRARY_PATH"] = libdir + (":" + env["LD_LIBRARY_PATH"] if env.get("LD_LIBRARY_PATH") else "")
    port = str(_free_port())
    with tempfile.TemporaryFile("w+") as server_log:
        server = subprocess.Popen([exe, "-p", port], env=env, stdout=server_log,
                                  stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                  start_new_session=True)
        try:
            deadline = time.monotonic() + SERVER_START_TIMEOUT_S
            while True:
                if _listening(int(port)):
                    break
                if server.poll() is not None or time.monotonic() > deadline:
                    server_log.seek(0)
                    raise RuntimeError(f"ucx_perftest server did not start:\n{server_log.read()[-2000:]}")
                time.sleep(0.02)
            cmd = [exe, "127.0.0.1", "-p", port, "-t", test, "-s", str(size),
                   "-n", str(iters), "-w", str(warmup)]
            client = subprocess.run(cmd, env=env, capture_output=True, text=True,
                                    timeout=RUN_TIMEOUT_S, stdin=subprocess.DEVNULL)
            if client.returncode != 0:
                raise RuntimeError(f"{' '.join(cmd)} exited with {client.returncode}:\n"
                                   f"{(client.stdout + client.stderr)[-2000:]}")
            row = parse_final(client.stdout)
        finally:
            try:
                os.killpg(server.pid, 9)
            except ProcessLookupError:
                pass
            server.wait(timeout=10)
    # MiB/s -> GB/s. The msg/s column is rounded to an integer (59 at 64 MiB), so it is
    # not used; size / latency is kept alongside as the check of the MiB reading.
    row["gbps"] = row["bw_avg_MiBps"] * 2**20 / 1e9
    row["gbps_from_latency"] = size / row["lat_avg_us"] / 1e3 if row["lat_avg_us"] > 0 else 0.0
    return row


def measure(quick: bool, repeats: int = 3) -> dict:
    """{"rows": [...], "tag_lat_us": {bytes: us}, "tag_bw_gbps": {bytes: GB/s},
    "error": str|None}; a missing wheel or a failing run is reported, not raised."""
    out = {"rows": [], "tag_lat_us": {}, "tag_bw_gbps": {}, "error": None}
    found = find_perftest()
    if found is None:
        out["error"] = "ucx_perftest not found (the libucx wheel is not installed)"
        return out
    exe, libdir = found
    try:
        for test, size, iters, warmup in (QUICK_TESTS if quick else FULL_TESTS):
            rows = [run_one(exe, libdir, test, size, iters, warmup) for _ in range(repeats)]
            for i, row in enumerate(rows):
                out["rows"].append(dict(test=test, bytes=size, repeat=i, **row))
            if test == "tag_lat":
                out["tag_lat_us"][size] = statistics.median(r["lat_avg_us"] for r in rows)
            else:
                out["tag_bw_gbps"][size] = statistics.median(r["gbps"] for r in rows)
    except (RuntimeError, OSError, subprocess.TimeoutExpired) as error:
        out["error"] = f"ucx_perftest failed: {error}"
    return out
