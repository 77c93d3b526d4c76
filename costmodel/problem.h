#pragma once
// Problem = model + cluster + training options: everything a searcher needs.
#include <string>

#include "costmodel/cluster.h"
#include "costmodel/model.h"

namespace stratos {

enum class Schedule { kGpipe, kOneFOneB };
enum class Recompute { kNone, kSelective, kFull };

const char* ScheduleName(Schedule schedule);        // "gpipe" | "1f1b"
const char* RecomputeName(Recompute recompute);     // "none" | "selective" | "full"
// Throw InputError naming `where` and the allowed values for anything else.
Schedule ParseSchedule(const std::string& text, const std::string& where);
Recompute ParseRecompute(const std::string& text, const std::string& where);

struct TrainingSpec {
  int global_batch_size = 512;        // samples (sequences) per optimizer step
  Schedule schedule = Schedule::kOneFOneB;
  double activation_dtype_bytes = 2;  // bf16
  double param_dtype_bytes = 2;       // bf16 weights
  double grad_dtype_bytes = 2;        // bf16 gradients (reduced in bf16)
  // fp32 master weights + Adam m and v: K = 12 bytes/param (ZeRO, Rajbhandari et al. SC'20 §3).
  double optimizer_state_bytes_per_param = 12;
  // Bytes the optimizer step reads and writes per parameter it updates (Adam: read fp32 p, m, v
  // and the grad, write fp32 p, m, v and the bf16 copy).
  double optimizer_step_bytes_per_param = 32;
  // Share of the DP gradient synchronization hidden behind the backward pass, in [0, 1].
  double dp_overlap_fraction = 0.0;
  // Tensor parallelism uses Megatron sequence parallelism (activations split by TP everywhere).
  bool sequence_parallel = true;
};

struct Problem {
  ModelSpec model;
  ClusterSpec cluster;
  TrainingSpec training;

  int NumDevices() const { return cluster.NumDevices(); }
  int NumLayers() const { return model.NumLayers(); }
};

}  // namespace stratos
