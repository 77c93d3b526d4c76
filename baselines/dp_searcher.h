#pragma once
// DpSearcher: Alpa's inter-operator dynamic program (Zheng et al. OSDI'22 §5.2, Eq. 4-5),
// exact for the closed-form pipeline objective of cost_model.h
//   T = sum_s t_s + (m - 1) * max_s t_s + sum_s e_s
// over SearchSpace::Build(problem, options.space): contiguous stages, one configuration of
// space.configs per stage, sum of stage meshes <= space.num_devices, stage count in
// [min_stages, max_stages], each microbatch count m of the space, every stage fitting in memory
// with the microbatches it holds in flight.
//
// For a bound t_max on the stage time, G(t_max) = min over plans with every t_s <= t_max of
// sum_s (t_s + e_s) is the DP
//   F[s][i][d] = min_{j > i, mesh n <= d} A*(i, j, n, s) + F[s-1][j][d-n],  F[0][L][d] = 0,
// with s the stages from layer i to the end (which fixes a 1F1B stage's in-flight count
// min(m, s)), d the devices still free, and A* the cheapest t + e of a configuration with mesh
// size n, t <= t_max, fitting in memory. Then T* = min_{t_max} (m - 1) t_max + G(t_max).
// Alpa enumerates t_max over the distinct stage times with an early stop; we prune the same
// candidates by intervals, still exactly: G is nonincreasing, so on candidates [t_lo, t_hi] the
// objective is >= (m - 1) t_lo + G(t_hi); intervals are explored best-first and bisected until
// their bound reaches the best plan's Evaluate()d objective. A G evaluation whose plan has
// max stage time t_act also settles every candidate in [t_act, t_max].
//
// SearchSummary: algorithm "dp"; evaluations = G evaluations; iterations = microbatch counts
// processed; termination kOptimal with lower_bound_seconds = best, kTimeLimit (best plan so far,
// lower bound when every microbatch count has one), kEvaluationLimit, or kInfeasible with the
// reason (e.g. the layer that does not fit in memory on any mesh, and by how much).
#include "search/searcher.h"

namespace stratos {

class DpSearcher : public Searcher {
 public:
  std::string Name() const override { return "dp"; }
  // Throws InputError for invalid options (SearchOptions::Validate, SearchSpace::Build).
  SearchResult Search(const Problem& problem, const SearchOptions& options) override;
};

}  // namespace stratos
