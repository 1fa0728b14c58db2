"""A/B of two commux installs in one run: `python3 -m commux.bench` alternately with the
installed commux (B; or another `--new` folder) and another one (A, a `pip install
--target` folder put first on PYTHONPATH), so both see the same machine state; prints B/A per point (median of the runs'
medians). Example (the version before a change against the installed one):

    git worktree add /tmp/old <commit> && (cd /tmp/old && python3 -m pip install \\
        --no-build-isolation --no-deps --target /tmp/oldsite .)
    python3 benchmarks/ab_installs.py --old /tmp/oldsite --runs 4 -- --ops p2p,allreduce \\
        --ranks 2 --backends ucx --max-bytes 4K --step 8 --rounds 3
"""

import argparse
import csv
import os
import statistics
import subprocess
import sys
import tempfile


def run(pythonpath, bench_args, out):
    env = dict(os.environ)
    if pythonpath:
        env["PYTHONPATH"] = pythonpath + os.pathsep + env.get("PYTHONPATH", "")
    subprocess.run([sys.executable, "-m", "commux.bench", "--no-raw-ucx", "--no-plot", "--quiet",
                    "--out", out, *bench_args], env=env, check=True, stdout=subprocess.DEVNULL)
    with open(os.path.join(out, "results.csv")) as f:
        return {(r["op"], int(r["ranks"]), int(r["bytes"])): float(r["median_us"])
                for r in csv.DictReader(f) if r["backend"] == "ucx"}


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--old", required=True, help="folder holding the A install (pip --target)")
    ap.add_argument("--new", default=None,
                    help="folder holding the B install (pip --target); default: the installed one")
    ap.add_argument("--runs", type=int, default=4)
    ap.add_argument("bench", nargs=argparse.REMAINDER, help="-- then commux.bench arguments")
    args = ap.parse_args()
    bench = [a for a in args.bench if a != "--"]
    a_runs, b_runs = [], []
    with tempfile.TemporaryDirectory() as tmp:
        for i in range(args.runs):
            for label, path, runs in (("A", args.old, a_runs), ("B", args.new, b_runs)):
                runs.append(run(path, bench, os.path.join(tmp, f"{label}{i}")))
    print(f"{'op':<12}{'ranks':>6}{'bytes':>10}{'A us':>10}{'B us':>10}{'B/A':>8}")
    for key in sorted(a_runs[0]):
        a = statistics.median(r[key] for r in a_runs)
        b = statistics.median(r[key] for r in b_runs)
        print(f"{key[0]:<12}{key[1]:>6}{key[2]:>10}{a:>10.2f}{b:>10.2f}{b / a:>8.3f}")


if __name__ == "__main__":
    main()
