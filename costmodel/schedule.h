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

// One pass of one virtual stage (model chunk) on a pipeline rank.
struct StageAction {
  int stage;  // virtual stage index in model order: chunk c of rank r is stage c * p + r
  PipelineOp op;
  bool operator==(const StageAction& o) const { return stage == o.stage && op == o.op; }
};

// The order in which pipeline rank `rank` (of num_ranks) runs its passes when each rank holds
// virtual_stages model chunks (virtual stage i on rank i % num_ranks).
// virtual_stages = 1: StageSchedule(schedule, num_ranks, rank, m) on stage `rank`.
// virtual_stages = v > 1: interleaved 1F1B in depth-first order (Narayanan et al. SC'21
// §2.2.2): forwards go through the rank's chunks p microbatches at a time, chunk 0 first;
// (v - 1) p + 2 (p - 1 - rank) warm-up forwards, then one forward and one backward per step,
// backwards through the chunks in reverse; the order Megatron-LM and
// torch.distributed.pipelining's ScheduleInterleaved1F1B run when m is a multiple of p.
// Throws InputError if num_ranks < 1, rank outside [0, num_ranks), virtual_stages < 1,
// num_microbatches < 1, or, for virtual_stages > 1, a schedule other than 1F1B or
// num_microbatches not a multiple of num_ranks.
std::vector<StageAction> RankSchedule(Schedule schedule, int num_ranks, int virtual_stages,
                                      int rank, int num_microbatches);

}  // namespace stratos
