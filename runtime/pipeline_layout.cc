#include "runtime/pipeline_layout.h"

#include <fmt/format.h>

#include <algorithm>

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

std::vector<Piece> ReshardPieces(const PipelineLayout& layout, int other, int samples,
                                 bool receive) {
  const int64_t mine = samples / layout.dp, theirs = samples / layout.dps[other];
  const int64_t lo = layout.dp_rank * mine, hi = lo + mine;
  std::vector<Piece> pieces;
  for (int d = 0; d < layout.dps[other]; ++d) {
    const int64_t from = std::max(lo, d * theirs), to = std::min(hi, (d + 1) * theirs);
    if (from >= to) continue;
    if (receive) {
      pieces.push_back({layout.RankOf(other, d, layout.tp_rank % layout.tps[other]), from - lo,
                        to - from});
    } else {
      for (int u = 0; u < layout.tps[other]; ++u)
        if (u % layout.tp == layout.tp_rank)
          pieces.push_back({layout.RankOf(other, d, u), from - lo, to - from});
    }
  }
  return pieces;
}

}  // namespace stratos
