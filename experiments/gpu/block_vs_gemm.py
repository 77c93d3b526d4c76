#!/usr/bin/env python3
"""Where the GEMM-only calibration misses on the GPU (README "The GPU path").

Prints, for each block row of a profile, the measured forward and backward time over what the
calibrated GEMM curve predicts for the block's FLOPs (forward = (3 + s / 2h) times the block's
MLP up-projection GEMM, as costmodel/matmul_efficiency.h prices it; backward twice the forward),
then, for each run's measurement, the time per transformer block in training (the stage's
forward and backward per microbatch over its layers).

Usage: python3 experiments/gpu/block_vs_gemm.py PROFILE_DIR CLUSTER_TOML RUN.json...
"""
import csv
import json
import sys
import tomllib

profile_dir, cluster_file, *runs = sys.argv[1:]
with open(cluster_file, "rb") as handle:
    device = tomllib.load(handle)["device"][0]
peak = device["peak_TFLOPS"] * 1e12
curve = device["matmul_curve"]

def gemm_seconds(m, n, k):
    flops = 2.0 * m * n * k
    return (flops / (peak * curve["max_efficiency"]) * (1 + curve["half_efficiency_dim"] / min(m, n, k))
            + curve["overhead_us"] * 1e-6)

print("hidden seq  mb tp   forward ms (x GEMM)   backward ms (x GEMM)")
for row in csv.DictReader(open(f"{profile_dir}/layer.csv")):
    h, s, b, tp = (int(row[key]) for key in ("hidden", "seq_len", "micro_batch", "tensor_parallel"))
    m, n, k = b * s, 4 * h / tp, h
    forward = float(row["forward_flops"]) / (2.0 * m * n * k) * gemm_seconds(m, n, k)
    measured_f, measured_b = float(row["forward_seconds"]), float(row["backward_seconds"])
    print(f"{h:6d} {s:4d} {b:3d} {tp:2d}   {measured_f * 1e3:7.2f} ({measured_f / forward:4.2f})"
          f"        {measured_b * 1e3:7.2f} ({measured_b / (2 * forward):4.2f})")

for path in runs:
    m = json.load(open(path))
    plan = m["predicted_vs_measured"]
    stage = plan["stages"][0]
    layers = m["stages"][0]["layers"]
    blocks = layers[1] - layers[0] - 2  # the embedding and the head are the other two layers
    f = stage["measured_forward_seconds_per_microbatch"] / blocks
    b = stage["measured_backward_seconds_per_microbatch"] / blocks
    print(f"{path}: {m['stages'][0]['config']}: per block in training forward {f * 1e3:.2f} ms, "
          f"backward {b * 1e3:.2f} ms, together {(f + b) * 1e3:.2f} ms")
