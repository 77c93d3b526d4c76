#include "runtime/schedule.h"

#include <fmt/format.h>

#include <algorithm>

#include "costmodel/error.h"

namespace stratos {

std::vector<PipelineOp> StageSchedule(Schedule schedule, int num_stages, int stage,
                                      int num_microbatches) {
  if (num_stages < 1) ThrowInputError("schedule", "num_stages", num_stages, "must be >= 1");
  if (stage < 0 || stage >= num_stages)
    ThrowInputError("schedule", "stage", stage, fmt::format("must be in [0, {})", num_stages));
  if (num_microbatches < 1)
    ThrowInputError("schedule", "num_microbatches", num_microbatches, "must be >= 1");
  const int m = num_microbatches;
  std::vector<PipelineOp> ops;
  if (schedule == Schedule::kGpipe) {
    for (int i = 0; i < m; ++i) ops.push_back({PipelineOp::kForward, i});
    for (int i = 0; i < m; ++i) ops.push_back({PipelineOp::kBackward, i});
    return ops;
  }
  const int warmup = std::min(num_stages - stage - 1, m);
  int next_forward = 0, next_backward = 0;
  for (; next_forward < warmup; ++next_forward) ops.push_back({PipelineOp::kForward, next_forward});
  while (next_forward < m) {
    ops.push_back({PipelineOp::kForward, next_forward++});
    ops.push_back({PipelineOp::kBackward, next_backward++});
  }
  while (next_backward < m) ops.push_back({PipelineOp::kBackward, next_backward++});
  return ops;
}

std::string ScheduleString(const std::vector<PipelineOp>& ops) {
  std::string text;
  for (const PipelineOp& op : ops)
    text += fmt::format("{}{}{}", text.empty() ? "" : " ",
                        op.kind == PipelineOp::kForward ? 'F' : 'B', op.microbatch);
  return text;
}

}  // namespace stratos
