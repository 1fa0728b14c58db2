"""``python3 -m commux.bench``: the benchmark tool runs end to end (--quick), writes every
op for both backends, parses its floors, and never hangs (a world past its hard timeout
is killed and named).

The tool is run as a subprocess of the installed package, exactly as a user runs it.
"""

import csv
import json
import os
import subprocess
import sys

import pytest

from commux.bench import cli, floor_model, raw_ucx, report, sizes

OPS = ("p2p", "allreduce", "allgather", "reduce_scatter", "broadcast", "alltoall")
QUICK_HARD_TIMEOUT_S = 300


def _bench(args, timeout):
    return subprocess.run(
        [sys.executable, "-m", "commux.bench", *args],
        capture_output=True, text=True, timeout=timeout, stdin=subprocess.DEVNULL,
    )


def test_sizes():
    assert sizes.parse_size("8") == 8
    assert sizes.parse_size("64K") == 64 << 10
    assert sizes.parse_size("16MiB") == 16 << 20
    assert sizes.parse_size("256M") == 256 << 20
    with pytest.raises(ValueError):
        sizes.parse_size("12X")
    assert sizes.format_size(65536) == "64 KiB"
    # x4 steps are counted down from the top, so 64 KiB, 16 MiB, 64 MiB stay in; 8 B too.
    ladder = sizes.size_list(8, 256 << 20, 4)
    assert ladder[0] == 8 and ladder[-1] == 256 << 20
    assert {64 << 10, 16 << 20, 64 << 20} <= set(ladder)
    assert sizes.size_list(8, 64, 2) == [8, 16, 32, 64]
    # Sub-element sizes round up to one float32; split ops to a multiple of the world size.
    assert sizes.input_bytes("allreduce", 1, 2) == 4
    assert sizes.input_bytes("reduce_scatter", 8, 4) == 16
    assert sizes.input_bytes("alltoall", 8, 8) == 32
    assert sizes.input_bytes("allgather", 8, 8) == 8


def test_plan_measures_each_size_once_and_skips_what_does_not_fit():
    plan, skipped = cli.plan_world(["reduce_scatter", "allreduce"], [8, 16, 64], 4, memory=None)
    assert plan == [["reduce_scatter", 8], ["reduce_scatter", 64],
                    ["allreduce", 8], ["allreduce", 16], ["allreduce", 64]]
    assert skipped == []
    # allgather of 256 MiB at 8 ranks holds 2.25 GiB per rank: not with 4 GiB free.
    plan, skipped = cli.plan_world(["allgather"], [8, 256 << 20], 8, memory=4 << 30)
    assert plan == [["allgather", 8]]
    assert [(s["op"], s["bytes"]) for s in skipped] == [("allgather", 256 << 20)]


def test_pinning_is_told_from_each_ranks_cpus():
    assert report.pinning_kind([[0], [1]]) == "pinned"
    assert report.pinning_kind([[0], [1], [0], [1]]) == "pinned"  # cores shared, still bound
    assert report.pinning_kind([[0, 1], [0, 1]]) == "unpinned"
    assert report.pinning_kind([[0, 1], [1]]) == "mixed"
    assert report.pinning_kind([[0, 2], [1, 3]]) == "pinned"  # a core's two hyperthreads each
    assert report.describe_pinning([[0, 1, 2, 3, 6], [0, 1, 2, 3, 6]]) == \
        "unpinned: every rank may run on CPUs 0-3,6"
    assert report.describe_pinning([[0], [1]]) == "pinned: rank 0 on CPU 0, rank 1 on CPU 1"
    points = [dict(op="p2p", ranks=2, bytes=8, backend=b, median_us=us, launch=mode)
              for b, mode, us in [("ucx", "pinned", 4.0), ("ucx", "unpinned", 5.0),
                                  ("mpi4py-torch", "pinned", 5.0), ("mpi4py-torch", "unpinned", 4.0)]]
    table = report.format_launch_comparison(points, ["pinned", "unpinned"])
    row = [line for line in table.splitlines() if line.startswith("p2p")][0].split()
    # ucx pinned, unpinned, their ratio; the same for mpi4py; ucx over mpi4py in each mode.
    assert row[4:7] == ["4.0", "5.0", "1.25x"] and row[7:10] == ["5.0", "4.0", "0.80x"], row
    assert row[10:] == ["0.80x", "1.25x"], row


@pytest.mark.ucx_only
@pytest.mark.timeout(150)
def test_both_launch_modes_in_one_run(tmp_path):
    """--pinning both: each world pinned (one CPU a rank, as the kernel reports it), then
    unpinned; the CSV says which, the summary has what each rank had, and the side-by-side
    table is printed."""
    r = _bench(["--pinning", "both", "--ops", "allreduce", "--ranks", "2", "--min-bytes", "8",
                "--max-bytes", "8", "--backends", "ucx", "--rounds", "1", "--block-seconds", "0.02",
                "--no-raw-ucx", "--no-plot", "--out", str(tmp_path)], 120)
    assert r.returncode == 0, f"exit {r.returncode}\n{r.stdout[-3000:]}\n{r.stderr[-3000:]}"
    with open(tmp_path / "results.csv") as f:
        rows = list(csv.DictReader(f))
    assert {(row["backend"], row["launch"]) for row in rows} >= {
        ("ucx", "pinned"), ("ucx", "unpinned")}, rows
    summary = json.load(open(tmp_path / "summary.json"))
    pinned, unpinned = summary["pinning"]["pinned"]["2"], summary["pinning"]["unpinned"]["2"]
    assert pinned["kind"] == "pinned" and all(len(c) == 1 for c in pinned["affinity"]), pinned
    cpus = sorted(os.sched_getaffinity(0))
    assert unpinned["affinity"] == [cpus, cpus], unpinned
    if len(cpus) > 1:  # on one CPU the two modes are the same
        assert unpinned["kind"] == "unpinned", unpinned
    assert "launch modes side by side: pinned vs unpinned" in r.stdout
    assert "ranks pinned: rank 0 on CPU" in r.stdout and "ranks unpinned" in r.stdout


def test_floor_model():
    floor = {"fake_send_us": 3.0, "fake_recv_us": 2.0, "fake_allreduce_us": 4.0,
             "fake_broadcast_us": 4.0, "memcpy_gbps_65536": 20.0, "memcpy_gbps_67108864": 10.0}
    # The memcpy rate is the one measured nearest below the size (else the smallest).
    assert floor_model.memcpy_rate(floor, 8) == 20.0
    assert floor_model.memcpy_rate(floor, 1 << 20) == 20.0
    assert floor_model.memcpy_rate(floor, 64 << 20) == 10.0
    assert floor_model.memcpy_rate({}, 8) is None
    # p2p one way: half of rank 0's send + recv, the tag latency, one copy.
    assert floor_model.floor_us("p2p", 20_000, 2, floor, cores=2, tag_lat_us=0.5) == \
        pytest.approx(2.5 + 0.5 + 1.0)
    # 2 ranks on 2 cores: the call plus 3(p-1)/p N at the rate; 4 ranks: twice the CPU.
    two = floor_model.floor_us("allreduce", 40_000, 2, floor, cores=2)
    assert two == pytest.approx(4.0 + 3 * 0.5 * 40_000 / 20e3)
    four = floor_model.floor_us("allreduce", 40_000, 4, floor, cores=2)
    assert four == pytest.approx(2 * (4.0 + 3 * 0.75 * 40_000 / 20e3))
    assert floor_model.floor_us("alltoall", 8, 2, floor, cores=2) is None  # not measured
    points = [{"op": "allreduce", "ranks": 2, "bytes": 8, "backend": b, "median_us": 9.0}
              for b in ("ucx", "gloo")]
    got = floor_model.floor_points(points, {2: floor}, cores=2)
    assert [(p["op"], p["backend"]) for p in got] == [("allreduce", "floor")]
    assert got[0]["median_us"] == pytest.approx(4.0 + 3 * 0.5 * 8 / 20e3)


def test_parse_perftest_final_line():
    out = (
        "|    Stage     | # iterations | 50.0%ile | average | overall |  average |  overall |  average  |  overall  |\n"
        "Final:                 20000      0.191     1.052     1.052        7.26       7.26      950998      950998\n"
    )
    row = raw_ucx.parse_final(out)
    assert row["iterations"] == 20000 and row["lat_avg_us"] == 1.052
    assert row["bw_avg_MiBps"] == 7.26 and row["msgrate_avg"] == 950998
    # The unit claim the conversion rests on: MB/s is MiB/s (8 B x msg/s / 2**20).
    assert abs(8 * row["msgrate_avg"] / 2**20 - row["bw_avg_MiBps"]) < 0.01
    with pytest.raises(RuntimeError):
        raw_ucx.parse_final("no final line")


@pytest.mark.ucx_only
@pytest.mark.timeout(QUICK_HARD_TIMEOUT_S + 30)
def test_quick_run(tmp_path):
    r = _bench(["--quick", "--out", str(tmp_path)], QUICK_HARD_TIMEOUT_S)
    assert r.returncode == 0, f"exit {r.returncode}\nstdout:\n{r.stdout[-4000:]}\nstderr:\n{r.stderr[-4000:]}"

    with open(tmp_path / "results.csv") as f:
        rows = list(csv.DictReader(f))
    seen = {(row["op"], row["backend"]) for row in rows if row["ranks"] == "2"}
    missing = {(op, b) for op in OPS for b in ("ucx", "gloo", "floor")} - seen
    assert not missing, f"results.csv lacks {sorted(missing)}"
    for row in rows:
        if row["backend"] == "floor":  # computed, not timed
            assert float(row["median_us"]) > 0, row
            continue
        assert float(row["median_us"]) > 0 and float(row["min_us"]) > 0, row
        assert float(row["min_us"]) <= float(row["median_us"]), row
        assert int(row["iterations"]) >= 1, row
        assert int(row["bytes"]) >= int(row["requested_bytes"]) > 0, row

    with open(tmp_path / "summary.json") as f:
        summary = json.load(f)
    floor = summary["floor"]["2"]
    assert floor["fake_send_us"] > 0 and floor["fake_recv_us"] > 0, floor
    assert floor[f"memcpy_gbps_{64 << 20}"] > 0, floor
    assert all(floor[f"fake_{op}_us"] > 0 for op in OPS if op != "p2p"), floor
    if raw_ucx.find_perftest() is not None:
        raw = summary["raw_ucx"]
        assert raw["error"] is None, raw
        assert raw["tag_lat_us"]["8"] > 0 and raw["tag_bw_gbps"][str(64 << 20)] > 0, raw
    statuses = {t["status"] for t in summary["targets"]}
    assert statuses <= {"PASS", "MISS", "N/A"}, statuses
    assert "targets" in r.stdout and "gloo/ucx" in r.stdout and "floor_us" in r.stdout


def _processes_mentioning(text):
    found = []
    for pid in os.listdir("/proc"):
        if not pid.isdigit():
            continue
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as f:
                if text.encode() in f.read():
                    found.append(int(pid))
        except OSError:
            pass
    return found


@pytest.mark.ucx_only
@pytest.mark.timeout(120)
@pytest.mark.parametrize("launch", ["own processes", "mpirun"])
def test_world_timeout_kills_every_rank(tmp_path, launch):
    """A world that outlives --timeout is killed, named, and the run exits 1, whether the
    ranks are the runner's own processes or mpirun's children (a --mpi run)."""
    from commux.bench import mpi_peer

    if launch == "mpirun" and (why := mpi_peer.missing()):
        pytest.skip(why)
    r = _bench(["--ops", "allreduce", "--ranks", "2", "--min-bytes", "8", "--max-bytes", "8",
                "--rounds", "1000", "--block-seconds", "0.05", "--timeout", "10",
                "--no-raw-ucx", "--no-plot", "--out", str(tmp_path)]
               + (["--mpi"] if launch == "mpirun" else []), 90)
    assert r.returncode == 1, f"exit {r.returncode}\n{r.stdout[-2000:]}\n{r.stderr[-2000:]}"
    assert "TIMED OUT after 10 s" in r.stderr, r.stderr[-3000:]
    assert "op=allreduce" in r.stderr, r.stderr[-3000:]
    assert not _processes_mentioning(str(tmp_path)), "rank processes survived the timeout"


@pytest.mark.ucx_only
@pytest.mark.timeout(240)
def test_mpi_peer_beside_commux(tmp_path):
    """--mpi: the same points through Open MPI's C API and mpi4py (torch tensors, numpy;
    interleaved with ucx and gloo in the same ranks), in the table, the CSV and the targets.
    scripts/test.sh installs Open MPI and mpi4py (scripts/install.sh --mpi); elsewhere the
    test says what is missing."""
    from commux.bench import mpi_peer

    if why := mpi_peer.missing():
        pytest.skip(why)
    r = _bench(["--mpi", "--ops", "p2p,allreduce,alltoall", "--ranks", "2", "--min-bytes", "8",
                "--max-bytes", "64K", "--step", "8192", "--rounds", "1", "--block-seconds", "0.02",
                "--no-raw-ucx", "--no-plot", "--out", str(tmp_path)], 200)
    assert r.returncode == 0, f"exit {r.returncode}\n{r.stdout[-3000:]}\n{r.stderr[-3000:]}"
    with open(tmp_path / "results.csv") as f:
        rows = list(csv.DictReader(f))
    got = {(row["op"], int(row["bytes"]), row["backend"]) for row in rows}
    for op in ("p2p", "allreduce", "alltoall"):
        for nbytes in (8, 64 << 10):
            for backend in ("ucx", "gloo", "mpi-c", "mpi4py-torch", "mpi4py-numpy"):
                assert (op, nbytes, backend) in got, (op, nbytes, backend, sorted(got))
    assert all(float(row["median_us"]) > 0 for row in rows)
    assert "mpiC_us" in r.stdout and "m4py-t_us" in r.stdout, r.stdout[-3000:]
    assert "ucx <= mpi4py on torch tensors" in r.stdout
    assert "commux_bench --blocking / Open MPI C" in r.stdout
    summary = json.load(open(tmp_path / "summary.json"))
    assert summary["commux_cpp_p2p"]["lat_us"] > 0


BOOTSTRAP = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "benchmarks",
                         "bootstrap.py")


@pytest.mark.ucx_only
@pytest.mark.timeout(60)
def test_bootstrap_benchmark_runs_at_two_ranks(tmp_path):
    """benchmarks/bootstrap.py: both backends at 2 ranks, timings and store-op counts in the
    CSV and the table (the store wrapper sees the backend's C++ calls)."""
    r = subprocess.run([sys.executable, BOOTSTRAP, "--ranks", "2", "--backends", "ucx,gloo",
                        "--timeout", "30", "--out", str(tmp_path)],
                       capture_output=True, text=True, timeout=50, stdin=subprocess.DEVNULL)
    assert r.returncode == 0, f"exit {r.returncode}\n{r.stdout[-3000:]}\n{r.stderr[-3000:]}"
    with open(tmp_path / "results.csv") as f:
        rows = {row["backend"]: row for row in csv.DictReader(f)}
    assert set(rows) == {"ucx", "gloo"}, rows
    for row in rows.values():
        assert row["error"] == "" and row["ranks"] == "2", row
        assert 0 < float(row["init_max_ms"]) <= float(row["total_max_ms"]), row
        assert float(row["allreduce_max_ms"]) > 0, row
        assert int(row["ops_max"]) >= int(row["ops_rank0"]) > 0, row
    # commux publishes its peer record (a set) and reads the other rank's (get/multi_get)
    # through the wrapper.
    kinds = rows["ucx"]["ops_by_kind_busiest"]
    assert "set=" in kinds and ("get=" in kinds or "multi_get=" in kinds), kinds
    assert int(rows["ucx"]["bytes_read_max"]) > 0
    assert "| ucx | 2 |" in (tmp_path / "results.md").read_text()
    with open(tmp_path / "ranks.csv") as f:
        assert len(list(csv.DictReader(f))) == 4


@pytest.mark.ucx_only
@pytest.mark.timeout(240)
def test_window_benchmark_with_mpi_beside_it(tmp_path):
    """``python3 -m commux.bench.window --mpi``: every measurement of the window benchmark
    (signal ping-pong, put+signal latency, put bandwidth) on a path, each with its send/recv
    and MPI RMA columns; --combine makes the same table from a torchrun log and MPI's lines."""
    from commux.bench import mpi_peer

    mpi = mpi_peer.missing() is None
    args = ["--paths", "mapped", "--sizes", "8,65536", "--blocks", "1", "--block-seconds", "0.01",
            "--out", str(tmp_path)] + (["--mpi"] if mpi else [])
    r = subprocess.run([sys.executable, "-m", "commux.bench.window", *args], capture_output=True,
                       text=True, timeout=220, stdin=subprocess.DEVNULL)
    assert r.returncode == 0, f"exit {r.returncode}\n{r.stdout[-3000:]}\n{r.stderr[-3000:]}"
    (run,) = json.load(open(tmp_path / "window.json"))
    assert run["path"] == "mapped"
    kinds = {(row["kind"], row["bytes"]) for row in run["rows"]}
    assert kinds == {("signal", 0), ("latency", 8), ("latency", 65536), ("bandwidth", 8),
                     ("bandwidth", 65536)}, kinds
    assert all(row["path"] == "mapped" for row in run["rows"])
    assert all(v > 0 for row in run["rows"] for v in row["columns"].values())
    assert "| mapped | put+signal latency | 64 KiB |" in r.stdout, r.stdout
    if mpi:
        assert {(m["kind"], m["bytes"]) for m in run["mpi"]} == kinds
        assert "put_signal / MPI" in r.stdout and "put / MPI" in r.stdout
    commux_log = tmp_path / "host0.log"
    commux_log.write_text("window rows " + json.dumps(run["rows"]) + "\n")
    mpi_log = tmp_path / "mpi.log"
    mpi_log.write_text("".join("mpi " + json.dumps(m) + "\n" for m in run["mpi"] or []))
    c = subprocess.run([sys.executable, "-m", "commux.bench.window", "--combine", str(commux_log),
                        str(mpi_log)], capture_output=True, text=True, timeout=60)
    assert c.returncode == 0 and "| mapped | signal ping-pong | 0 |" in c.stdout, c.stdout + c.stderr
