#pragma once
// DpSearcher: Alpa's inter-operator dynamic program (Zheng et al. OSDI'22 §5.2, Eq. 4-5),
// extended to stay exact for the closed-form pipeline objective of cost_model.h
//   T = sum_s t_s + (m - 1) * max_s t_s + max_s e_s + sum_s c_s
// over SearchSpace::Build(problem, options.space): contiguous stages, one configuration of
// space.configs per stage, sum of stage meshes <= space.num_devices, stage count in
// [min_stages, max_stages], each microbatch count m of the space, every stage fitting in memory
// with the microbatches it holds in flight.
//
// Two terms are maxima over stages, so the DP fixes both. For bounds t_max on the stage time and
// e_max on the exposed tail, G(t_max, e_max) = min over plans with every t_s <= t_max and every
// e_s <= e_max of sum_s (t_s + c_s) is the DP
//   F[s][i][d] = min_{j > i, mesh n <= d} A*(i, j, n, s) + F[s-1][j][d-n],  F[0][L][d] = 0,
// with s the stages from layer i to the end (which fixes a 1F1B stage's in-flight count
// min(m, s)), d the devices still free, and A* the cheapest t + c of a configuration with mesh
// size n, t <= t_max, e <= e_max, fitting in memory. Then
//   T* = min_{t_max, e_max} (m - 1) t_max + e_max + G(t_max, e_max),
// both maxima ranging over the distinct stage times and tails of the candidate configurations
// (StageFrontier). Alpa enumerates t_max with an early stop; we prune the candidate pairs by
// rectangles, still exactly: G is nonincreasing in both arguments, so on [t_lo, t_hi] x
// [e_lo, e_hi] the objective is >= (m - 1) t_lo + e_lo + G(t_hi, e_hi). Rectangles are explored
// best-first by that bound until it reaches the best plan's Evaluate()d objective; each is first
// clipped to the pairs whose own bound is below the best, then G is evaluated at its upper
// corner (which bounds G on all of it) or, where the corner evaluation before it brought G no
// higher, at the midpoint of the dimension whose span weighs more in T. A G evaluation at
// (t_max, e_max) whose plan has maxima (t_act, e_act) settles every pair in [t_act, t_max] x
// [e_act, e_max], and bounds G by its value on the rest of the pairs below (t_max, e_max); the
// rest of the rectangle is split off as (at most four) rectangles.
//
// Heterogeneous clusters (several node groups; the stages of a group run consecutively and each
// group has at most one run, SearchSpace::group_devices): an outer enumeration of the orders of
// every nonempty subset of the groups, as Metis and AMP enumerate device-group orders, and for
// each order the DP above with the position in the order in its state and each group's free
// devices for d (HeteroOracle in the .cc): G(t_max, e_max) is exact per order, and the same
// rectangle search runs over the units (microbatch count, order).
//
// Interleaved 1F1B (options.space.virtual_stages offers v > 1): on a homogeneous cluster and a
// model InterleavesExactly prices, a rank of v chunks costs its plain stage's terms with v
// virtual stages, so each (m, v, p) -- exactly p ranks, 2 <= p <= max_stages, p v <= L -- is a
// unit of its own: the frontier's additive part is t / v + c (every stage of at least v layers),
// the memory levels are the ranks' ChunkForwardsInFlight for p, and the objective weighs the
// slowest stage by m - 1/v; its plans are InterleavePlan'd, and the optimum is over plain and
// interleaved pipelines. Elsewhere the DP runs plain and offers its plan interleaved
// (InterleavingSearcher), claiming no optimum.
//
// SearchSummary: algorithm "dp"; evaluations = G evaluations; iterations = microbatch counts
// (and orders) processed; termination kOptimal with lower_bound_seconds = best, kTimeLimit (best plan so far,
// lower bound when every microbatch count has one), kEvaluationLimit, or kInfeasible with the
// reason (e.g. the layer that does not fit in memory on any mesh, and by how much).
#include "search/searcher.h"

namespace stratos {

class DpSearcher : public Searcher {
 public:
  // plain_only: plain pipelines whatever options.space.virtual_stages offers (the form the
  // interleaving wrapper runs).
  explicit DpSearcher(bool plain_only = false) : plain_only_(plain_only) {}
  std::string Name() const override { return "dp"; }
  // Throws InputError for invalid options (SearchOptions::Validate, SearchSpace::Build).
  SearchResult Search(const Problem& problem, const SearchOptions& options) override;

 private:
  bool plain_only_;
};

}  // namespace stratos
