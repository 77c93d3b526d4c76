#include "search/interleaving_searcher.h"

#include <fmt/format.h>

#include "costmodel/error.h"

namespace stratos {

std::pair<Plan, Estimate> FastestInterleaving(const CostModel& cost_model, const Plan& plan,
                                              const Estimate& estimate,
                                              const std::vector<int>& virtual_stages,
                                              long* evaluations) {
  std::pair<Plan, Estimate> best{plan, estimate};
  if (cost_model.problem().training.virtual_pipeline_stages != 1) return best;
  for (int v : virtual_stages) {
    const std::optional<Plan> interleaved = InterleavePlan(plan, v);
    if (!interleaved) continue;
    Estimate priced;
    try {
      priced = Evaluate(cost_model, *interleaved);
    } catch (const InputError&) {
      continue;  // a structure this problem does not take
    }
    if (evaluations != nullptr) ++*evaluations;
    if (priced.Fits() && (!best.second.Fits() ||
                          priced.iteration_seconds < best.second.iteration_seconds))
      best = {*interleaved, priced};
  }
  return best;
}

SearchResult InterleavingSearcher::Search(const Problem& problem, const SearchOptions& options) {
  const auto start = SearchClock::now();
  SearchResult result = inner_->Search(problem, options);
  if (!options.space.OffersInterleaving() || problem.training.virtual_pipeline_stages != 1)
    return result;
  // An interleaved plan: the inner searcher searched the virtual stages itself (relax's polish,
  // local, MCMC, or the DP and the ILP with their proofs over them), nothing to add.
  if (result.plan && result.plan->virtual_stages > 1) return result;
  SearchSummary& summary = result.summary;
  if (summary.termination == TerminationType::kOptimal) {
    summary.termination = TerminationType::kConverged;
    summary.message += "; optimal over plain pipelines only";
  }
  summary.lower_bound_seconds.reset();
  if (!result.plan) return result;
  const CostModel cost_model(problem);
  const Estimate plain = Evaluate(cost_model, *result.plan);
  auto [plan, estimate] = FastestInterleaving(cost_model, *result.plan, plain,
                                              options.space.virtual_stages, &summary.evaluations);
  if (plan.virtual_stages > 1) {
    summary.message += fmt::format("; interleaved ({} virtual stages per rank): {:.6g} s from "
                                   "{:.6g} s",
                                   plan.virtual_stages, estimate.iteration_seconds,
                                   plain.iteration_seconds);
    summary.best_iteration_seconds = estimate.iteration_seconds;
    result.plan = plan;
    summary.anytime.push_back({SecondsSince(start), estimate.iteration_seconds});
    if (options.on_improvement)
      options.on_improvement(summary.anytime.back().wall_seconds, estimate.iteration_seconds);
  }
  summary.wall_seconds = SecondsSince(start);
  return result;
}

}  // namespace stratos
