#include "costmodel/schedule.h"

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

std::vector<StageAction> RankSchedule(Schedule schedule, int num_ranks, int virtual_stages,
                                      int rank, int num_microbatches) {
  if (virtual_stages < 1)
    ThrowInputError("schedule", "virtual_stages", virtual_stages, "must be >= 1");
  std::vector<StageAction> actions;
  if (virtual_stages == 1) {
    for (const PipelineOp& op : StageSchedule(schedule, num_ranks, rank, num_microbatches))
      actions.push_back({rank, op});
    return actions;
  }
  if (num_ranks < 1) ThrowInputError("schedule", "num_ranks", num_ranks, "must be >= 1");
  if (rank < 0 || rank >= num_ranks)
    ThrowInputError("schedule", "rank", rank, fmt::format("must be in [0, {})", num_ranks));
  if (schedule != Schedule::kOneFOneB)
    ThrowInputError("schedule", "schedule", ScheduleName(schedule),
                    "virtual stages need the interleaved 1F1B schedule (1f1b)");
  if (num_microbatches < 1 || num_microbatches % num_ranks != 0)
    ThrowInputError("schedule", "num_microbatches", num_microbatches,
                    fmt::format("interleaved 1F1B needs a positive multiple of the {} pipeline "
                                "ranks",
                                num_ranks));
  const int p = num_ranks, v = virtual_stages, m = num_microbatches;
  const int total = m * v;  // forwards (and backwards) on this rank
  const int warmup = std::min((v - 1) * p + 2 * (p - 1 - rank), total);
  // The k-th forward of the rank goes to chunk (k / p) % v; the k-th backward to chunk
  // v - 1 - (k / p) % v. Microbatches advance per chunk.
  std::vector<int> next_forward(v, 0), next_backward(v, 0);
  auto forward = [&](int k) {
    const int chunk = (k / p) % v;
    actions.push_back({chunk * p + rank, {PipelineOp::kForward, next_forward[chunk]++}});
  };
  auto backward = [&](int k) {
    const int chunk = v - 1 - (k / p) % v;
    actions.push_back({chunk * p + rank, {PipelineOp::kBackward, next_backward[chunk]++}});
  };
  int forwards = 0, backwards = 0;
  for (; forwards < warmup; ++forwards) forward(forwards);
  while (forwards < total) {
    forward(forwards++);
    backward(backwards++);
  }
  while (backwards < total) backward(backwards++);
  return actions;
}

}  // namespace stratos
