#pragma once
// LocalSearcher: random-restart iterated local search on the exact plan cost, name "local".
// It is what RelaxSearcher does without its gradient phase: the same discrete polish
// (relax/polish.h: PlanPolisher::Repair, then best-improvement descent over the same moves, then
// iterated-local-search kicks) started from random plans instead of the relaxation's argmax
// plans. An ablation baseline beside MCMC: when relax does not beat it at equal wall time, the
// gradient is not doing the work.
//
// A random start draws, with SearchOptions::seed: a stage count uniformly in
// [min_stages, min(max_stages, layers)], distinct cut positions uniformly, per stage a config
// uniformly among those whose mesh fits an even share of the devices (any config if none does),
// and a microbatch count uniformly among the space's options. On a heterogeneous cluster the
// start also draws an order of node groups (SearchSpace::GroupOrders), gives each group of it a
// run of at least one stage (the other stages to runs drawn uniformly) and each stage a config
// of its group whose mesh fits the group's budget shared by its run. PlanPolisher::Repair makes it
// valid (device budget, divisibility, memory where a config change can), then Polish() descends
// with `kicks` kicks. Descents are memoized across starts, as in relax. Starts are plain
// pipelines; the polish moves them to the space's virtual stage counts where the tables offer
// them (relax/tables.h RelaxTables::virtual_stages).
//
// SearchSummary: algorithm "local"; iterations = starts polished; evaluations = plans priced
// (exact table cost, = Evaluate() by additivity); termination kConverged (every start done),
// kTimeLimit or kEvaluationLimit (best plan so far), or kInfeasible when no start could be
// repaired into a plan that fits (with the closest plan's memory violation). No lower bound.
// Deterministic for a given seed unless the time limit cuts it short.
#include "search/searcher.h"

namespace stratos {

struct LocalOptions {
  // Random starts, each repaired and polished; >= 0. 0: keep starting until the time limit or
  // the evaluation budget (an anytime search). The default matches relax's polish starts.
  int starts = 6;
  // Iterated-local-search kicks per start (as RelaxOptions::polish_kicks); >= 0.
  int kicks = 4;

  // Throws InputError naming the field, its value and the rule.
  void Validate() const;
};

class LocalSearcher : public Searcher {
 public:
  explicit LocalSearcher(LocalOptions local_options = {}) : local_options_(local_options) {}
  std::string Name() const override { return "local"; }
  const LocalOptions& local_options() const { return local_options_; }
  // Throws InputError for invalid options (SearchOptions::Validate, LocalOptions::Validate,
  // SearchSpace::Build).
  SearchResult Search(const Problem& problem, const SearchOptions& options) override;

 private:
  LocalOptions local_options_;
};

}  // namespace stratos
