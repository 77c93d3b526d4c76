#!/usr/bin/env bash
# The GPU checks (README "The GPU path"), as one script for a machine with an NVIDIA GPU, CUDA and
# the Python torch package but no Debian packages. Before copying the tree there, run
# `make carry-headers` on a machine with the packages (header-only dependencies and the training
# text into third_party/). This script then
#   1. builds stratos and runtime_test against that torch's CUDA LibTorch (no CBC: no ILP),
#   2. runs the gpu test suite and the device tests,
#   3. trains the tiny GPT for 20 steps in fp32 on the CPU and on the GPU (loss parity),
#   4. trains a GPT-3 1.3B-shaped model (24 blocks, hidden 2048, sequence 2048) in bf16 and
#      reports MFU against the GPU's dense bf16 peak,
#   5. profiles GEMMs and transformer blocks in bf16 and calibrates the GPU's description (its
#      GEMM curve and its block curve),
#   6. runs single-GPU plans (microbatch, recomputation, sequence length) whose measured
#      iteration times are compared with the calibrated description's predictions,
#   7. (PARTS=memory, not in the default set) measures device memory: what a PyTorch process
#      holds outside its tensors (experiments/gpu/framework_memory.py), and the peak memory of
#      GPT-3 plans (experiments/gpu/memory_plans.txt, or the file MEMORY_PLANS names) against
#      the cost model's predicted peak.
# Usage: [PARTS=tests,interop,parity,mfu,profile,plans,memory] bash experiments/gpu/gpu_checks.sh RESULTS_DIR
#        [BUDGET_SECONDS]
# Leaves RESULTS_DIR/gpu_checks.tgz (every output, refreshed after each part) and
# RESULTS_DIR/summary.txt; stops starting new parts once BUDGET_SECONDS (default 480) have passed.
# PARTS (default: all) picks the parts after the build.
set -u
RESULTS=${1:?usage: gpu_checks.sh RESULTS_DIR [BUDGET_SECONDS]}
BUDGET=${2:-480}
mkdir -p "$RESULTS"
RESULTS=$(cd "$RESULTS" && pwd)
WORK=$(mktemp -d)
trap 'rm -rf "$WORK"' EXIT
BUILD=${BUILD:-build-gpu}
B=$BUILD/stratos
SUMMARY=$RESULTS/summary.txt
: > "$SUMMARY"
say() { echo "== $(date +%T) [${SECONDS}s] $*" | tee -a "$SUMMARY"; }
pack() { tar czf "$RESULTS/gpu_checks.tgz" -C "$WORK" . 2>/dev/null; }
left() { [ "$SECONDS" -lt "$BUDGET" ]; }
PARTS=${PARTS:-tests,interop,parity,mfu,profile,plans}  # memory: on request
part() { [[ ",$PARTS," == *",$1,"* ]]; }

nvidia-smi > "$WORK/nvidia-smi.txt" 2>&1
GPU=$(nvidia-smi --query-gpu=name --format=csv,noheader 2>/dev/null | head -1)
case "$GPU" in
  *H200*) CLUSTER=h200-node ;;
  *H100*) CLUSTER=dgx-h100 ;;
  *) CLUSTER=dgx-a100-80gb ;;
esac
# The zoo's file of this GPU (calibrated) and its datasheet base, which calibrate refits.
BASE_CLUSTER=$CLUSTER
[ -f "data/clusters/$CLUSTER-datasheet.toml" ] && BASE_CLUSTER=$CLUSTER-datasheet
say "GPU: $GPU; cluster description: $CLUSTER (calibration base: $BASE_CLUSTER)"
python3 -c 'import torch; print("torch", torch.__version__, "CUDA", torch.version.cuda)' | tee -a "$SUMMARY"

# 1. Build.
[ -d third_party/include ] || { say "no third_party/include: run make carry-headers first"; exit 1; }
mkdir -p shared/data && cp third_party/tinyshakespeare.txt shared/data/  # SharedDataPath
TORCH_PREFIX=$(python3 -c 'import torch; print(torch.utils.cmake_prefix_path)')
GENERATOR=$(command -v ninja >/dev/null && echo Ninja || echo "Unix Makefiles")
build() {
  cmake -S . -B "$BUILD" -G "$GENERATOR" -DCMAKE_BUILD_TYPE=Release \
    -DCMAKE_PREFIX_PATH="$TORCH_PREFIX" "$@" >> "$WORK/configure.log" 2>&1 || return 1
  cmake --build "$BUILD" -j "$(nproc)" --target stratos runtime_test -- \
    $([ "$GENERATOR" = Ninja ] && echo -k 0) >> "$WORK/build.log" 2>&1
}
say "configure and build"
if ! build; then
  grep -E "error|Error" "$WORK/configure.log" "$WORK/build.log" | head -30 | tee -a "$SUMMARY"
  say "build failed; again without the device memory statistics"
  if ! build -DCMAKE_CXX_FLAGS=-DSTRATOS_NO_DEVICE_MEMORY_STATS; then
    grep -E "error" "$WORK/build.log" | tail -20 | tee -a "$SUMMARY"
    say "build failed; again without Kineto, the fused Adam kernel and the memory statistics"
    NO="-DSTRATOS_NO_FUSED_ADAM -DSTRATOS_NO_DEVICE_MEMORY_STATS"
    if ! build -DSTRATOS_KINETO=OFF "-DCMAKE_CXX_FLAGS=$NO"; then
      grep -E "error" "$WORK/build.log" | tail -20 | tee -a "$SUMMARY"
      say "build failed; again without NCCL too"
      build -DSTRATOS_NCCL=OFF -DSTRATOS_KINETO=OFF "-DCMAKE_CXX_FLAGS=$NO" ||
        grep -E "error" "$WORK/build.log" | tail -30 | tee -a "$SUMMARY"
    fi
  fi
  [ -x "$B" ] || { say "no stratos binary"; pack; exit 1; }
fi
grep "runtime backends" "$WORK/configure.log" | tail -1 | tee -a "$SUMMARY"
"$B" version | tee -a "$SUMMARY"
pack

# 2. Tests.
if part tests; then
say "gpu test suite"
"$BUILD/tests/runtime_test" -ts=gpu -s > "$WORK/test_gpu.log" 2>&1
echo "gpu suite exit $?" | tee -a "$SUMMARY"
grep -E "MESSAGE|relative|TFLOP|bf16 loss|test cases|ERROR|FAILED" "$WORK/test_gpu.log" | head -40 | tee -a "$SUMMARY"
# A crash outside the test cases: where (tests/test_main.cc prints the stack).
grep -A40 -E "^\*\*\* signal" "$WORK/test_gpu.log" | head -60 | tee -a "$SUMMARY"
"$BUILD/tests/runtime_test" -sf='*test_device.cc' > "$WORK/test_device.log" 2>&1
echo "device tests exit $?; $(grep 'test cases' "$WORK/test_device.log")" | tee -a "$SUMMARY"
pack
fi

# 2b. The torch.distributed.pipelining exports read by the machine's torch (issue 14).
if part interop; then
  say "torch reads the exported pipeline schedules"
  python3 experiments/gpu/check_torch_schedule.py \
    tests/interop/golden/*/torch-pipelining/pipeline_schedule.csv 2>&1 | tee -a "$SUMMARY"
fi

# 3. Loss parity, tiny GPT in fp32: CPU vs GPU.
if part parity; then
say "loss parity (gpt-tiny, fp32, 20 steps)"
for device in cpu cuda; do
  "$B" run --model gpt-tiny --steps 20 --device $device --output-dir "$WORK/parity_$device" \
    > "$WORK/parity_$device.log" 2>&1 || tail -5 "$WORK/parity_$device.log" | tee -a "$SUMMARY"
done
python3 - "$WORK" <<'PY' | tee -a "$SUMMARY"
import json, sys
w = sys.argv[1]
try:
    a = json.load(open(f"{w}/parity_cpu/measurement.json"))["losses"]
    b = json.load(open(f"{w}/parity_cuda/measurement.json"))["losses"]
    worst = max(abs(x - y) / x for x, y in zip(a, b))
    print(f"parity: {len(a)} steps, CPU {a[0]:.5f} -> {a[-1]:.5f}, CUDA {b[0]:.5f} -> {b[-1]:.5f}, "
          f"largest relative difference {worst:.2e}")
except Exception as e:
    print("parity: no result", e)
PY
pack
fi

# 4. MFU: GPT-3 1.3B-shaped, bf16, sequence 2048.
run_plan() {  # name micro_batch recompute seq global_batch cluster [steps [extra flags]]
  local name=$1 mb=$2 rc=$3 seq=$4 gb=$5 cluster=$6 steps=${7:-3} extra=${8:-}
  "$B" run --model "${MODEL:-gpt3-1.3b}" --device cuda --dtype "${DTYPE:-bf16}" --micro-batch "$mb" --recompute "$rc" \
    --seq-length "$seq" --global-batch "$gb" --steps "$steps" --threads 8 --cluster "$cluster" \
    --deadline 240 --output-dir "$WORK/$name" $extra > "$WORK/$name.log" 2>&1
  local rc_=$?
  echo "$name (mb $mb, recompute $rc, seq $seq, global batch $gb): exit $rc_; $(grep -E '^iteration|^MFU|peak memory' "$WORK/$name.log" | tr '\n' ' ')" | tee -a "$SUMMARY"
  grep -qi "out of memory" "$WORK/$name.log" && echo "$name: out of memory" | tee -a "$SUMMARY"
  [ $rc_ = 0 ] || tail -4 "$WORK/$name.log" | tee -a "$SUMMARY"
}
if part mfu; then
  say "MFU runs"
  run_plan mfu_mb8 8 none 2048 64 "$CLUSTER" 4
  pack
  # Microbatch 16 keeps ~85 GB of activations and states: only on a GPU with more than 100 GB.
  MEMORY_MB=$(nvidia-smi --query-gpu=memory.total --format=csv,noheader,nounits | head -1)
  if [ "${MEMORY_MB:-0}" -gt 100000 ]; then
    run_plan mfu_mb16 16 none 2048 64 "$CLUSTER" 4
    pack
    # The same with the residual stream in fp32 (the runtime before the bf16 stream), measured in
    # the same run for the ratio.
    run_plan mfu_mb16_fp32res 16 none 2048 64 "$CLUSTER" 4 --fp32-residual-connection
    pack
  fi
  # Where one step's time goes: Kineto's operators and kernels (GPU busy share, top kernels).
  if "$B" version | grep -q "Kineto: yes"; then
    say "Kineto trace of one step (mb 8, global batch 16)"
    "$B" run --model gpt3-1.3b --device cuda --dtype bf16 --micro-batch 8 --global-batch 16 \
      --steps 3 --kineto-step 2 --threads 8 --cluster "$CLUSTER" --output-dir "$WORK/kineto_mb8" \
      > "$WORK/kineto_mb8.log" 2>&1 || tail -4 "$WORK/kineto_mb8.log" | tee -a "$SUMMARY"
    python3 - "$WORK/kineto_mb8/kineto/rank_0.json" <<'PY' | tee -a "$SUMMARY"
import collections, json, sys
try:
    events = [e for e in json.load(open(sys.argv[1]))["traceEvents"] if e.get("ph") == "X"]
except Exception as e:
    sys.exit(f"kineto: no trace ({e})")
kernels = [e for e in events if e.get("cat") == "kernel"]
ops = [e for e in events if e.get("cat") == "cpu_op"]
start = min(e["ts"] for e in kernels)
span = max(e["ts"] + e["dur"] for e in kernels) - start
busy = sum(e["dur"] for e in kernels)
print(f"kineto: {len(kernels)} kernels, {len(ops)} CPU operators; GPU busy {busy / 1e3:.1f} ms "
      f"of the kernels' {span / 1e3:.1f} ms span ({100 * busy / span:.1f}%)")
by_name = collections.Counter()
for e in kernels:
    by_name[e["name"][:70]] += e["dur"]
for name, d in by_name.most_common(12):
    print(f"  {d / 1e3:8.2f} ms {100 * d / busy:5.1f}%  {name}")
# Kernel classes: what the cost model prices as GEMMs, as attention, and the rest (elementwise,
# norms, the loss, the optimizer).
classes = collections.Counter()
for e in kernels:
    n = e["name"].lower()
    if any(k in n for k in ("flash", "fmha", "attention", "sdpa")):
        classes["attention"] += e["dur"]
    elif any(k in n for k in ("gemm", "cutlass", "xmma", "nvjet", "cublas")):
        classes["GEMM"] += e["dur"]
    elif "adam" in n:
        classes["optimizer"] += e["dur"]
    else:
        classes["other"] += e["dur"]
print("kernel classes: " + ", ".join(f"{k} {v / 1e3:.1f} ms ({100 * v / busy:.1f}%)"
                                      for k, v in classes.most_common()))
PY
    python3 experiments/gpu/head_kernels.py "$WORK/kineto_mb8/kineto/rank_0.json" \
      > "$WORK/head_kernels.txt" 2>&1 && head -12 "$WORK/head_kernels.txt" | tee -a "$SUMMARY"
    pack
  fi
fi

# 5. Profile and calibration.
if part profile && left; then
  say "profile (GEMMs, blocks; bf16)"
  "$B" profile --device cuda --dtype bf16 --parts matmul,layer --repeats 5 --threads 8 \
    --output-dir "$WORK/profile" > "$WORK/profile.log" 2>&1
  echo "profile exit $?" | tee -a "$SUMMARY"
  "$B" calibrate --profile "$WORK/profile" --cluster "$BASE_CLUSTER" --matmul-dtype bf16 \
    --name "$CLUSTER" --output "$WORK/calibrated.toml" > "$WORK/calibrate.log" 2>&1
  echo "calibrate exit $?" | tee -a "$SUMMARY"
  tail -15 "$WORK/calibrate.log" | tee -a "$SUMMARY"
  pack
fi
PREDICT_ON=$CLUSTER
[ -f "$WORK/calibrated.toml" ] && PREDICT_ON=$WORK/calibrated.toml

# 7. Device memory: outside the tensors, and plans' peaks against the predicted peak.
if part memory && left; then
  say "memory a PyTorch process holds outside its tensors"
  python3 experiments/gpu/framework_memory.py "$WORK/framework_memory.json" 2>&1 | tee -a "$SUMMARY"
  pack
  say "memory of plans (2 steps of 2 microbatches each), predicted on $CLUSTER"
  while read -r line; do
    read -r model name mb rc dtype _ <<<"${line%%#*}"
    [ -z "$model" ] && continue
    left || { say "budget spent: $name and later memory plans not run"; break; }
    MODEL=$model DTYPE=${dtype:-bf16} run_plan "$name" "$mb" "$rc" 2048 $((2 * mb)) \
      "$CLUSTER" 2
    pack
  done < "${MEMORY_PLANS:-experiments/gpu/memory_plans.txt}"
  python3 - "$WORK" <<'PY' | tee -a "$SUMMARY"
import glob, json, os, sys
GiB = 1024.0 ** 3
print(f"{'run':18s} {'predicted':>9s} {'allocated':>9s} {'reserved':>9s} {'outside':>8s} "
      f"{'alloc/pred':>10s} {'resv/alloc':>10s}  (GiB)")
for path in sorted(glob.glob(f"{sys.argv[1]}/*/measurement.json")):
    for row in json.load(open(path))["predicted_vs_measured"]["stages"]:
        if "measured_peak_allocated_bytes" not in row:
            continue
        p, a = row["predicted_peak_memory_bytes"], row["measured_peak_allocated_bytes"]
        r, o = row["measured_peak_reserved_bytes"], row["measured_outside_allocator_bytes"]
        print(f"{os.path.basename(os.path.dirname(path)):18s} {p / GiB:9.2f} {a / GiB:9.2f} "
              f"{r / GiB:9.2f} {o / GiB:8.2f} {a / p:10.3f} {r / a:10.3f}")
PY
  pack
fi

# 6. Single-GPU plans: predicted (calibrated description) vs measured.
part plans || { say "done"; exit 0; }
say "plans, predicted on $PREDICT_ON"
while read -r name mb rc seq gb; do
  left || { say "budget spent: $name and later plans not run"; break; }
  run_plan "$name" "$mb" "$rc" "$seq" "$gb" "$PREDICT_ON"
  pack
done <<'PLANS'
p_mb1_none_s2048 1 none 2048 8
p_mb2_none_s2048 2 none 2048 8
p_mb4_full_s2048 4 full 2048 16
p_mb4_sel_s2048 4 selective 2048 16
p_mb8_none_s1024 8 none 1024 16
p_mb2_full_s1024 2 full 1024 8
PLANS
python3 - "$WORK" <<'PY' | tee -a "$SUMMARY"
import json, sys, glob, os
errors = []
for path in sorted(glob.glob(f"{sys.argv[1]}/p_*/measurement.json")):
    m = json.load(open(path))
    c = m["predicted_vs_measured"]
    e = c["predicted_iteration_seconds"] / c["measured_iteration_seconds"] - 1
    errors.append(abs(e))
    print(f"{os.path.basename(os.path.dirname(path)):20s} measured {c['measured_iteration_seconds']:.4f} s "
          f"predicted {c['predicted_iteration_seconds']:.4f} s ({100 * e:+.1f}%)  MFU {100 * m['mfu']:.1f}%")
if errors:
    print(f"MAPE over {len(errors)} plans: {100 * sum(errors) / len(errors):.1f}%")
PY
pack
say "done"
