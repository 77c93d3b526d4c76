#pragma once
// `stratos bench runtime`: the runtime's acceptance benchmark (DESIGN.md §9).
//
// 1. Prediction accuracy: runs the zoo's runtime model (gpt-tiny, tinyshakespeare) under several
//    uniform plans PPxDPxTP that fit in at most 4 local worker processes (1x1x1, 2x1x1, 1x2x1,
//    1x1x2, 2x2x1, 1x2x2, 4x1x1, 2x1x2, 1x4x1), each launched exactly as `stratos run` launches
//    it (RunRun), and
//    reads the measured iteration time (mean step seconds of the slowest rank, the first step
//    skipped as warm-up; measurement.json) and the cost model's predicted iteration time of the
//    same plan on this machine's cluster description (predicted_vs_measured.json). Prints a
//    table plan / measured s / predicted s / error % and the mean absolute percentage error
//    (MAPE) over the plans that ran, and the ranking a planner needs: Spearman's rho of the
//    predicted against the measured times (target >= 0.8) and the measured time of the plan
//    predicted fastest against the fastest measured (target within 10%), on the assumed and on
//    the calibrated description.
// 2. Runtime overhead: trains the same model (the runtime's GptStage holding all layers, built
//    with a self communicator, so no process group, plan, schedule, gradient buckets or sharded
//    optimizer) in this process with a straightforward LibTorch loop: the same batches
//    (CharDataset::TrainBatch), the same microbatch split and gradient accumulation, one intra-op
//    thread like a worker, and torch::optim::Adam with the runtime's hyper-parameters. Its
//    iteration time is measured the same way (first step skipped) and the overhead is
//    runtime 1x1x1 iteration / plain iteration - 1, against a target of at most 10%.
//
// Must run inside the `stratos` executable: RunRun re-launches /proc/self/exe as
// `stratos worker --config ...`.
#include <string>

namespace stratos {

struct BenchRuntimeArgs {
  std::string output_dir = "out/bench-runtime";
  int steps = 20;               // optimizer steps per run (the first is skipped as warm-up); >= 2
  int global_batch_size = 8;    // sequences per step, every plan; a multiple of 4 x micro-batch
  int micro_batch_size = 1;     // samples per DP replica per microbatch, every plan
  double deadline_seconds = 120;  // per plan: workers still running then are killed
};

// Writes DIR/runtime_bench.csv (one row per plan plus a "plain" row: plan, pp, dp, tp, devices,
// status, measured_s, predicted_s, error_percent) and DIR/runtime_bench.json
// ("schema": "stratos.runtime_bench/1": the rows, mape_percent, plain_iteration_seconds,
// runtime_iteration_seconds, overhead_percent, overhead_target_percent, the loss agreement of the
// plain loop with the runtime's 1x1x1 run), and each plan's run outputs in DIR/plans/<plan>/
// (measurement.json, predicted_vs_measured.json, trace.json, logs/, stdout.txt). Times are wall
// seconds per optimizer step; errors are percentages, (measured - predicted) / measured * 100.
// Returns 0 if every plan ran, 1 otherwise (the table marks the failed plans). Throws InputError
// for bad arguments.
int RunBenchRuntime(const BenchRuntimeArgs& args);

}  // namespace stratos
