#include "runtime/pipeline_layout.h"

#include <fmt/format.h>

#include <algorithm>
#include <utility>

namespace stratos {

PipelineLayout::PipelineLayout(const Plan& plan, int rank)
    : pp(std::max(1, plan.NumPipelineRanks())) {
  if (plan.stages.empty()) {
    dps = tps = {1};
    bases = {0};
    return;
  }
  int base = 0;
  for (int s = 0; s < pp; ++s) {
    const StageConfig& c = plan.stages[s].config;
    dps.push_back(c.data_parallel);
    tps.push_back(c.tensor_parallel);
    bases.push_back(base);
    if (base <= rank && rank < base + c.data_parallel * c.tensor_parallel) stage = s;
    base += c.data_parallel * c.tensor_parallel;
  }
  dp = dps[stage];
  tp = tps[stage];
  dp_rank = std::max(0, rank - bases[stage]) / tp;
  tp_rank = std::max(0, rank - bases[stage]) % tp;
}

std::string PipelineLayout::Describe(int rank) const {
  return fmt::format("rank {} (stage {}, dp {}, tp {})", rank, stage, dp_rank, tp_rank);
}

std::vector<int64_t> ScatterGatherCounts(int tp, int64_t elements) {
  std::vector<int64_t> counts;
  for (int u = 0; u < tp; ++u) counts.push_back(elements * (u + 1) / tp - elements * u / tp);
  return counts;
}

std::vector<Piece> ReshardPieces(const PipelineLayout& layout, int other, int samples,
                                 int64_t sample_elements) {
  // Part t of replica d of a pipeline rank, in elements of the flattened microbatch.
  const auto part = [&](int s, int d, int t) {
    const int64_t n = samples / layout.dps[s] * sample_elements;
    return std::pair<int64_t, int64_t>{d * n + n * t / layout.tps[s],
                                       d * n + n * (t + 1) / layout.tps[s]};
  };
  const auto [lo, hi] = part(layout.stage, layout.dp_rank, layout.tp_rank);
  const int64_t base = part(layout.stage, layout.dp_rank, 0).first;
  std::vector<Piece> pieces;
  for (int d = 0; d < layout.dps[other]; ++d)
    for (int t = 0; t < layout.tps[other]; ++t) {
      const auto [their_lo, their_hi] = part(other, d, t);
      const int64_t from = std::max(lo, their_lo), to = std::min(hi, their_hi);
      if (from < to) pieces.push_back({layout.RankOf(other, d, t), from - base, to - from});
    }
  return pieces;
}

}  // namespace stratos
