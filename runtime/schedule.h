#pragma once
// Pipeline schedules as per-stage lists of operations (Huang et al. NeurIPS'19 GPipe;
// Narayanan et al. SC'21 §2.2 1F1B / PipeDream-Flush). Pure functions, no LibTorch.
#include <string>
#include <vector>

#include "costmodel/problem.h"

namespace stratos {

struct PipelineOp {
  enum Kind { kForward, kBackward };
  Kind kind;
  int microbatch;
  bool operator==(const PipelineOp& o) const { return kind == o.kind && microbatch == o.microbatch; }
};

// The order in which stage `stage` (0-based, of num_stages) runs the forward and backward passes
// of num_microbatches microbatches.
// GPipe: F0 .. F(m-1), then B0 .. B(m-1).
// 1F1B: min(p - s - 1, m) warm-up forwards, then alternating F, B, then the remaining backwards.
// Both run backwards in microbatch order, so gradients accumulate in the same order and the two
// schedules give bitwise-equal gradients.
// Throws InputError if num_stages < 1, stage not in [0, num_stages) or num_microbatches < 1.
std::vector<PipelineOp> StageSchedule(Schedule schedule, int num_stages, int stage,
                                      int num_microbatches);

// "F0 F1 B0 F2 B1 B2"
std::string ScheduleString(const std::vector<PipelineOp>& ops);

}  // namespace stratos
