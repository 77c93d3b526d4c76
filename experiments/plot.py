#!/usr/bin/env python3
"""Plots of stratos outputs (matplotlib, Debian python3-matplotlib).

  experiments/plot.py anytime out/compare/anytime.csv -o anytime.png
      best predicted iteration time against search wall time, one line per searcher
  experiments/plot.py ladder out/bench/ladder.csv -o ladder.png
      search wall time and relax's gap to the DP optimum over the GPT ladder
  experiments/plot.py experiment out/experiments/ablation-relax
      the plots of `stratos experiment report` (written into that directory): gap_vs_size.png,
      wall_vs_size.png, ablation.png, anytime.png
  experiments/plot.py cosearch out/cosearch/curves.csv --target 3.2 -o loss.png
      `stratos cosearch`: validation loss against simulated time, one line per compared plan
  experiments/plot.py init-search out/init-search/curves.csv --target 1.9 -o loss.png
      `stratos init-search`: the first seed's candidates against their steps (halving), and
      validation loss against compute (steps over all runs), search against the default
      initialization, every seed
"""
import argparse
import csv
import json
import math
import os
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


def plot_experiment(directory, _output):
    rows = read_rows(os.path.join(directory, "rows.csv"))
    searchers = []
    for r in rows:
        if r["searcher"] not in searchers:
            searchers.append(r["searcher"])
    families = sorted({r["family"] for r in rows})
    markers = "osD^v<>pP*"
    colors = plt.rcParams["axes.prop_cycle"].by_key()["color"]

    def scatter(column, filename, ylabel, logy):
        fig, ax = plt.subplots(figsize=(8, 5))
        for i, searcher in enumerate(searchers):
            for j, family in enumerate(families):
                pts = [(int(r["devices"]) * (1 + 0.04 * (i - len(searchers) / 2)),
                        float(r[column]) * (100 if column.startswith("gap") else 1))
                       for r in rows if r["searcher"] == searcher and r["family"] == family
                       and r["status"] != "declined" and r[column] not in ("", "nan")]
                if pts:
                    ax.scatter([p[0] for p in pts], [p[1] for p in pts], s=14, alpha=0.7,
                               color=colors[i % len(colors)], marker=markers[j % len(markers)],
                               label=f"{searcher} ({family})")
        ax.set_xscale("log", base=2)
        if logy:
            ax.set_yscale("log")
        else:
            ax.set_yscale("symlog", linthresh=0.1)
        ax.set_xlabel("devices")
        ax.set_ylabel(ylabel)
        ax.grid(alpha=0.3)
        ax.legend(fontsize=7, ncol=2)
        fig.tight_layout()
        fig.savefig(os.path.join(directory, filename), dpi=110)
        plt.close(fig)

    scatter("gap_to_best", "gap_vs_size.png", "gap to the best known plan (%)", False)
    scatter("wall_seconds", "wall_vs_size.png", "search wall time (s)", True)

    with open(os.path.join(directory, "report.json")) as f:
        summary = [s for s in json.load(f)["summary"] if s["family"] != "all"]
    fig, ax = plt.subplots(figsize=(max(6, 1.6 * len(families) * max(1, len(searchers)) / 3), 4.5))
    width = 0.8 / max(1, len(searchers))
    for i, searcher in enumerate(searchers):
        xs, med, worst = [], [], []
        for j, family in enumerate(families):
            for s in summary:
                if s["family"] == family and s["variant"] == searcher:
                    xs.append(j + (i - (len(searchers) - 1) / 2) * width)
                    med.append(100 * (s["median_gap_to_best"] if s["median_gap_to_best"] is not None else float("nan")))
                    worst.append(100 * (s["worst_gap_to_best"] if s["worst_gap_to_best"] is not None else float("nan")))
        ax.bar(xs, med, width, color=colors[i % len(colors)], label=searcher)
        ax.scatter(xs, worst, color="black", marker="_", s=60, zorder=3)
    ax.set_xticks(range(len(families)))
    ax.set_xticklabels(families)
    ax.set_yscale("symlog", linthresh=0.1)
    ax.set_ylabel("gap to the best known plan (%): bar median, dash worst")
    ax.grid(alpha=0.3, axis="y")
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(os.path.join(directory, "ablation.png"), dpi=110)
    plt.close(fig)

    trace = read_rows(os.path.join(directory, "anytime.csv"))
    fig, ax = plt.subplots(figsize=(8, 5))
    seen = set()
    for r_key in sorted({(t["family"], t["instance"], t["searcher"], t["seed"]) for t in trace}):
        pts = sorted((float(t["wall_seconds"]), 100 * float(t["gap_to_best"])) for t in trace
                     if (t["family"], t["instance"], t["searcher"], t["seed"]) == r_key)
        searcher = r_key[2]
        i = searchers.index(searcher) if searcher in searchers else 0
        ax.step([p[0] for p in pts], [p[1] for p in pts], where="post", alpha=0.35,
                color=colors[i % len(colors)], label=None if searcher in seen else searcher)
        seen.add(searcher)
    ax.set_xscale("log")
    ax.set_yscale("symlog", linthresh=0.1)
    ax.set_xlabel("search wall time (s)")
    ax.set_ylabel("gap to the best known plan (%)")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(os.path.join(directory, "anytime.png"), dpi=110)
    plt.close(fig)
    print(f"wrote the plots into {directory}")


def plot_cosearch(path, output, target=None):
    rows = read_rows(path)
    fig, ax = plt.subplots(figsize=(7, 4.5))
    for plan in dict.fromkeys(r["plan"] for r in rows):
        points = [r for r in rows if r["plan"] == plan]
        ax.plot([float(r["simulated_seconds"]) for r in points],
                [float(r["validation_loss"]) for r in points], marker=".",
                linewidth=2.2 if plan == "cosearch" else 1.0, label=plan)
    if target:
        ax.axhline(target, color="gray", linestyle="--", linewidth=0.8, label="target")
    ax.set_xlabel("simulated time on the target cluster (s)")
    ax.set_ylabel("validation loss (real)")
    ax.legend()
    fig.tight_layout()
    fig.savefig(output, dpi=120)
    plt.close(fig)


def plot_init_search(path, output, target=None):
    rows = read_rows(path)
    seeds = sorted({int(r["outer_seed"]) for r in rows})
    fig, (left, right) = plt.subplots(1, 2, figsize=(12, 4.5))
    first = [r for r in rows if int(r["outer_seed"]) == seeds[0]]
    for run in sorted({int(r["run"]) for r in first if r["arm"] == "search"}):
        points = [r for r in first if r["arm"] == "search" and int(r["run"]) == run]
        survivor = points[0]["survivor"] == "1"
        left.plot([float(r["step"]) for r in points],
                  [float(r["validation_loss"]) for r in points],
                  linewidth=2.2 if survivor else 1.0,
                  label=f"{points[0]['scheme']}/{points[0]['init_seed']}"
                  + (" (survivor)" if survivor else ""))
    left.set_xlabel("steps of the run")
    left.set_ylabel("validation loss")
    left.set_title(f"seed {seeds[0]}: candidates, stopped by successive halving")
    left.legend(fontsize=7)
    for seed in seeds:
        for arm, color in (("search", "tab:blue"), ("default", "tab:orange")):
            points = [r for r in rows if int(r["outer_seed"]) == seed and r["arm"] == arm
                      and r["survivor"] == "1"]
            right.plot([float(r["compute_steps"]) for r in points],
                       [float(r["validation_loss"]) for r in points], color=color,
                       linewidth=1.0, alpha=0.8,
                       label=("init-search survivor" if arm == "search"
                              else "default initialization") if seed == seeds[0] else None)
    if target:
        right.axhline(target, color="gray", linestyle="--", linewidth=0.8, label="target")
    right.set_xlabel("compute (training steps over all runs)")
    right.set_ylabel("validation loss")
    right.set_title(f"equal compute, {len(seeds)} seeds")
    right.legend()
    for ax in (left, right):
        losses = [float(r["validation_loss"]) for r in rows]
        low = min(losses)
        ax.set_ylim(low - 0.05, low + 1.2)
    fig.tight_layout()
    fig.savefig(output, dpi=120)
    plt.close(fig)


def main(argv):
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("kind", choices=["anytime", "ladder", "experiment", "cosearch",
                                         "init-search"])
    parser.add_argument("csv", help="CSV file (anytime, ladder) or experiment directory")
    parser.add_argument("-o", "--output", help="image file to write (.png, .svg); not for "
                        "experiment, which writes into its directory")
    parser.add_argument("--target", type=float,
                        help="cosearch, init-search: the target validation loss")
    args = parser.parse_args(argv)
    if args.kind != "experiment" and not args.output:
        parser.error("-o/--output is required for " + args.kind)
    if args.kind in ("cosearch", "init-search"):
        {"cosearch": plot_cosearch, "init-search": plot_init_search}[args.kind](
            args.csv, args.output, args.target)
    else:
        {"anytime": plot_anytime, "ladder": plot_ladder,
         "experiment": plot_experiment}[args.kind](args.csv, args.output)
    if args.output:
        print(f"wrote {args.output}")


if __name__ == "__main__":
    main(sys.argv[1:])
