#!/usr/bin/env python3
"""The LM head's kernels in a Kineto trace of `stratos run --kineto-step` (a GPT run on CUDA).

For each cross entropy of the step (a softmax forward kernel), prints the kernels just before and
after it with their durations: the logits GEMM before it, and, around the softmax backward, the
two backward GEMMs after it. This is where the vocabulary's GEMM shape shows (e.g. GPT-2's odd
50,257 rows falling back to a slow kernel).

Usage: python3 experiments/gpu/head_kernels.py KINETO_TRACE.json [...]
"""
import json
import sys


def main(paths):
    for path in paths:
        with open(path) as f:
            events = json.load(f)["traceEvents"]
        kernels = sorted((e for e in events if e.get("ph") == "X" and e.get("cat") == "kernel"),
                         key=lambda e: e["ts"])
        if not kernels:
            sys.exit(f"{path}: no GPU kernels in the trace")
        start = kernels[0]["ts"]
        print(f"# {path}: {len(kernels)} kernels")
        for i, e in enumerate(kernels):
            name = e["name"]
            if "SoftMaxForward" in name or "SoftMaxBackward" in name:
                before, after = (3, 1) if "Forward" in name else (1, 4)
                print(f"## {'forward' if 'Forward' in name else 'backward'} cross entropy")
                for k in kernels[max(0, i - before):i + after + 1]:
                    print(f"  {(k['ts'] - start) / 1e3:9.2f} ms  {k['dur'] / 1e3:8.3f} ms  "
                          f"{k['name'][:90]}")


if __name__ == "__main__":
    if len(sys.argv) < 2:
        sys.exit(__doc__)
    main(sys.argv[1:])
