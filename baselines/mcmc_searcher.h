#pragma once
// McmcSearcher: FlexFlow's Metropolis-Hastings search over parallelization strategies (Jia et
// al., "Beyond Data and Model Parallelism for Deep Neural Networks", SysML'19 §5), on the
// shared SearchSpace::Build(problem, options.space) and the closed-form objective of
// cost_model.h (the same Evaluate() every searcher uses).
//
// The state is a plan. A proposal applies one random mutation:
//   - move one stage boundary by 1 .. max_boundary_shift layers;
//   - change one stage's mesh size (to the next smaller or larger mesh), its DP x TP split, its
//     ZeRO stage or its recompute mode (the closest configuration of the space that differs);
//   - change the microbatch count (a neighbour in the space; stages whose DP no longer divides
//     the microbatch move to the closest valid configuration of the same mesh);
//   - split a stage in two, or merge two adjacent stages;
//   - with SpaceOptions::virtual_stages offering counts above 1 (one proposal in ten), change the
//     number of model chunks per pipeline rank (the interleaved 1F1B schedule, plan.h
//     InterleavePlan; a state whose ranks lack a layer per chunk leaves the space), where a rank
//     of v chunks prices as its plain stage with v virtual stages (plan.h InterleavesExactly, one
//     node group); elsewhere the chain runs plain pipelines (and InterleavingSearcher offers its
//     plan interleaved).
// On a heterogeneous cluster a proposal may also move one stage to another node group (its
// closest configuration there), and states are priced by Evaluate() itself.
// A proposal that leaves the space (device budget, each node group's budget, groups in runs,
// stage-count bounds) is rejected without an evaluation. Plans over device memory are priced T * (1 + memory_penalty * (0.05 + overflow /
// capacity)) so the chain can cross them, and are never returned. A proposal of cost c' from a
// state of cost c is accepted with probability min(1, exp(-beta * (c' - c) / c)) (FlexFlow's
// rule on the relative cost change).
//
// The chain starts from the best uniform plan (equal stages, one shared configuration; every
// (m, stages, configuration), or a random sample of max_initial_evaluations of them). After
// restart_patience proposals without improving the chain's own best it restarts, alternately
// from the best plan so far and from a random uniform plan. Deterministic for SearchOptions::seed.
//
// SearchSummary: algorithm "mcmc"; evaluations = plans priced; iterations = proposals;
// termination kEvaluationLimit (SearchOptions::max_evaluations), kTimeLimit, kConverged (no
// improvement of the best in convergence_patience proposals), or kInfeasible when no plan seen
// fits in memory, with the least memory-hungry plan seen and its violation. No lower bound.
#include "search/searcher.h"

namespace stratos {

struct McmcOptions {
  // Inverse temperature on the relative cost change; > 0. beta = 30 accepts a 1 % worse plan
  // with probability 0.74 and a 10 % worse one with 0.05.
  double beta = 30.0;
  // Largest stage-boundary move, layers; 0: max(1, num_layers / 8).
  int max_boundary_shift = 0;
  // Restart after this many proposals without improving the chain's best; >= 1.
  long restart_patience = 2000;
  // Stop with kConverged after this many proposals without improving the best plan; 0: never.
  long convergence_patience = 50000;
  // Weight of the memory overflow penalty; >= 0.
  double memory_penalty = 2.0;
  // Most uniform plans priced to pick the first state; >= 1.
  long max_initial_evaluations = 2000;

  // Throws InputError naming the field, its value and the rule.
  void Validate() const;
};

class McmcSearcher : public Searcher {
 public:
  explicit McmcSearcher(McmcOptions mcmc_options = {}) : mcmc_options_(mcmc_options) {}

  std::string Name() const override { return "mcmc"; }
  // Throws InputError for invalid options (SearchOptions::Validate, McmcOptions::Validate,
  // SearchSpace::Build).
  SearchResult Search(const Problem& problem, const SearchOptions& options) override;

  const McmcOptions& mcmc_options() const { return mcmc_options_; }

 private:
  McmcOptions mcmc_options_;
};

}  // namespace stratos
