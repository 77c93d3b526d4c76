#pragma once
// ExhaustiveSearcher: ground truth for tiny problems. Enumerates every microbatch count m, every
// stage count in [min_stages, max_stages], every set of contiguous cuts and every per-stage
// configuration of the shared SearchSpace (skipping only configurations CostModel::CheckConfig
// rejects for m and tuples over the device budget), prices each complete plan with Evaluate()
// and keeps the best that fits in memory. Nothing clever, so it checks DP, ILP and relax. On a
// heterogeneous cluster the configurations carry their node group: the stages of a group stay
// within its device budget and visit the groups in runs (SearchSpace::group_devices). With
// space.virtual_stages offering v > 1, every plan is priced in each interleaved form too
// (InterleavePlan), so the optimum is over plain and interleaved pipelines.
//
// Declines, before any work, problems with more plans than options.max_evaluations (5e6 when
// 0): TerminationType::kDeclined with "problem too large for exhaustive search: N plans ...".
// SearchSummary: algorithm "exhaustive"; evaluations = plans Evaluate()d; iterations = (m,
// stage count) pairs; termination kOptimal (lower_bound_seconds = best), kTimeLimit, or
// kInfeasible with the memory violation of the least memory-hungry plan.
#include "search/searcher.h"

namespace stratos {

class ExhaustiveSearcher : public Searcher {
 public:
  // Default cap on the number of plans when SearchOptions::max_evaluations is 0.
  static constexpr long kDefaultMaxPlans = 5000000;

  std::string Name() const override { return "exhaustive"; }
  // Throws InputError for invalid options (SearchOptions::Validate, SearchSpace::Build).
  SearchResult Search(const Problem& problem, const SearchOptions& options) override;

  // Number of plans Search() would Evaluate() (a double: it may be astronomically large). On a
  // heterogeneous cluster an upper bound: tuples are counted against the total device budget,
  // neither per group nor in runs.
  static double CountPlans(const Problem& problem, const SearchSpace& space);
};

}  // namespace stratos
