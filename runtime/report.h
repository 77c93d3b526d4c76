#pragma once
// Measurements of a runtime run and the reports written from them: measurement.json, a Chrome
// trace of the real execution (trace.json; on CUDA the GPU's timeline from CUDA events) and
// predicted_vs_measured.json, which sets the cost model's prediction for the same plan on the
// run's cluster description (options "cluster"; else this machine's workers, LocalCpuCluster)
// beside what was measured, for calibration (DESIGN.md §5).
#include <nlohmann/json.hpp>

#include <string>
#include <vector>

#include "costmodel/model.h"

namespace stratos {

struct RunRecord {
  nlohmann::json options;         // TrainOptionsToJson
  ModelSpec model;
  int first_step = 0;
  std::vector<double> losses;     // steps first_step ..
  double flops_per_worker = 0;    // measured fp32 matmul FLOP/s of one worker thread
  bool flash_attention = false;   // attention stored no scores (RuntimeFlashAttention)
  // Per rank: {"rank", "stage", "dp_rank", "tp_rank", "steps": [{"step_seconds",
  // "forward_seconds", "backward_seconds", "p2p_wait_seconds", "dp_sync_seconds",
  // "optimizer_seconds", "tp_comm_seconds"}], "events": [[name, category, start_s, duration_s]],
  // "dp_sync": {"collectives_per_step", "gradient_bytes_after_backward",
  // "gradient_buffer_bytes"} (the last step's),
  // "memory": {...} on CUDA}
  std::vector<nlohmann::json> ranks;
};

// Summarizes the record (steps after the first are averaged when there are several: the first
// pays for allocation and connection set-up) and, if output_dir is not empty, writes
// output_dir/measurement.json, trace.json and predicted_vs_measured.json. Returns the
// measurement JSON ("schema": "stratos.measurement/1"):
//   iteration_seconds, tokens_per_second, losses, model_flops_per_iteration, mfu (model FLOPs
//   per second and device over the cluster device's peak_flops: mfu_peak_flops, mfu_peak_source),
//   and per stage forward / backward /
//   communication / idle seconds per iteration (communication = TP collectives + exposed DP
//   sync + waits for sends; idle = waits for the neighbour stages' activations and gradients,
//   i.e. pipeline bubbles).
// Throws std::runtime_error if a file cannot be written.
nlohmann::json WriteRunReports(const RunRecord& record, const std::string& output_dir);

}  // namespace stratos
