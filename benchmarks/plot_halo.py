"""Plots benchmarks/halo_all.sh's output: time per step against halo bytes per rank, one
panel per (ranks, dimensions, neighbours), a line per way (commux.halo, by hand on commux,
by hand on gloo, Open MPI's MPI_Neighbor_alltoallw and persistent Send_init/Recv_init).

    python3 benchmarks/plot_halo.py docs/perf/halo-2026-12-06-tables.txt docs/perf/halo-2026-12-06.png
"""

import re
import sys

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

WAYS = {"commux.halo us": "commux.halo", "by hand (commux) us": "by hand, commux",
        "by hand (gloo) us": "by hand, gloo", "MPI Neighbor_alltoallw us": "Open MPI Neighbor_alltoallw",
        "MPI Send_init/Recv_init us": "Open MPI persistent Send_init/Recv_init",
        "one copy us": "one copy of the halo (same faces, own memory)"}


def tables(text):
    """(title, header, rows) for each run in the file."""
    out, title, header, rows = [], None, None, []
    for line in text.splitlines():
        if line.startswith("== "):
            if header:
                out.append((title, header, rows))
            title, header, rows = line[3:], None, []
            m = re.search(r"-np (\d+)|nproc-per-node=(\d+)", line)
            ranks = m.group(1) or m.group(2)
            nd = re.search(r"--ndim (\d)", line).group(1)
            title = f"{ranks} ranks, {nd}-D" + (", diagonals" if "--diagonals" in line else "")
        elif line.startswith("| cells"):
            header = [c.strip() for c in line.strip("|").split("|")]
        elif line.startswith("| ") and header:
            rows.append([c.strip() for c in line.strip("|").split("|")])
    if header:
        out.append((title, header, rows))
    return out


def main():
    source, target = sys.argv[1], sys.argv[2]
    runs = tables(open(source).read())
    cols = 3
    fig, axes = plt.subplots((len(runs) + cols - 1) // cols, cols, figsize=(5 * cols, 3.6 * ((len(runs) + cols - 1) // cols)))
    for ax, (title, header, rows) in zip(axes.flat, runs):
        x = [int(r[1]) for r in rows]
        for name, label in WAYS.items():
            if name in header:
                i = header.index(name)
                # One colour per way in every panel, whichever ways a run has.
                ax.loglog(x, [float(r[i]) for r in rows], marker="o", label=label,
                          color=f"C{list(WAYS).index(name)}",
                          linestyle="--" if name == "one copy us" else "-")
        ax.set_title(title)
        ax.set_xlabel("halo bytes per rank")
        ax.set_ylabel("us per step (max over ranks)")
        ax.grid(True, which="both", alpha=0.3)
    for ax in list(axes.flat)[len(runs):]:
        ax.axis("off")
    axes.flat[0].legend(fontsize=8)
    fig.suptitle("Halo exchange per step, one 2-core host (float64, one ghost layer)")
    fig.tight_layout()
    fig.savefig(target, dpi=90)


if __name__ == "__main__":
    main()
