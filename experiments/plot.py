#!/usr/bin/env python3
"""Plots of stratos outputs (matplotlib, Debian python3-matplotlib).

  experiments/plot.py anytime out/compare/anytime.csv -o anytime.png
      best predicted iteration time against search wall time, one line per searcher
  experiments/plot.py ladder out/bench/ladder.csv -o ladder.png
      search wall time and relax's gap to the DP optimum over the GPT ladder
"""
import argparse
import csv
import math
import sys

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402


def read_rows(path):
    with open(path, newline="") as f:
        return list(csv.DictReader(f))


def plot_anytime(path, output):
    rows = read_rows(path)
    fig, ax = plt.subplots(figsize=(7, 4.5))
    for algorithm in sorted({r["algorithm"] for r in rows}):
        points = [(float(r["wall_seconds"]), float(r["best_predicted_iteration_seconds"]))
                  for r in rows if r["algorithm"] == algorithm]
        points.sort()
        ax.step([p[0] for p in points], [p[1] for p in points], where="post", label=algorithm,
                marker=".")
    ax.set_xscale("symlog", linthresh=0.01)
    ax.set_xlabel("search wall time (s)")
    ax.set_ylabel("best predicted iteration time (s)")
    ax.set_title("anytime quality of each searcher")
    ax.legend()
    ax.grid(alpha=0.3)
    fig.tight_layout()
    fig.savefig(output, dpi=120)


def plot_ladder(path, output):
    rows = read_rows(path)
    rungs = []
    for r in rows:
        label = f'{r["layers"]}L x {r["gpus"]}'
        if label not in rungs:
            rungs.append(label)
    fig, (wall, gap) = plt.subplots(1, 2, figsize=(11, 4.5))
    for algorithm in sorted({r["algorithm"] for r in rows}):
        values = {f'{r["layers"]}L x {r["gpus"]}': r for r in rows if r["algorithm"] == algorithm}
        xs = [i for i, rung in enumerate(rungs) if rung in values]
        wall.plot(xs, [float(values[rungs[i]]["wall_seconds"]) for i in xs], marker="o",
                  label=algorithm)
        gaps = [(i, values[rungs[i]].get("gap_to_dp", "")) for i in xs]
        gaps = [(i, float(g)) for i, g in gaps if g not in ("", "nan") and not math.isnan(float(g))]
        if algorithm != "dp" and gaps:
            gap.plot([g[0] for g in gaps], [100 * g[1] for g in gaps], marker="o", label=algorithm)
    for ax in (wall, gap):
        ax.set_xticks(range(len(rungs)))
        ax.set_xticklabels(rungs, rotation=30)
        ax.grid(alpha=0.3)
        ax.legend()
    wall.set_yscale("log")
    wall.set_ylabel("search wall time (s)")
    gap.set_ylabel("gap to the DP optimum (%)")
    gap.axhline(2.0, color="gray", linestyle="--", linewidth=1)
    fig.tight_layout()
    fig.savefig(output, dpi=120)


def main(argv):
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("kind", choices=["anytime", "ladder"])
    parser.add_argument("csv")
    parser.add_argument("-o", "--output", required=True, help="image file to write (.png, .svg)")
    args = parser.parse_args(argv)
    {"anytime": plot_anytime, "ladder": plot_ladder}[args.kind](args.csv, args.output)
    print(f"wrote {args.output}")


if __name__ == "__main__":
    main(sys.argv[1:])
