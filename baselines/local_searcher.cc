#include "baselines/local_searcher.h"

#include <fmt/format.h>

#include <algorithm>
#include <cstdio>
#include <random>

#include "costmodel/error.h"
#include "costmodel/evaluate.h"
#include "relax/polish.h"
#include "relax/tables.h"

namespace stratos {

void LocalOptions::Validate() const {
  // Named as in specs and --option (experiments/searchers.h).
  if (starts < 0)
    ThrowOptionError("local.starts", starts, "must be >= 0 (0 = until the time limit)");
  if (kicks < 0) ThrowOptionError("local.kicks", kicks, "must be >= 0");
}

namespace {

// Uniform integer in [lo, hi] from 64 random bits (the same on every standard library, unlike
// std::uniform_int_distribution).
int UniformInt(std::mt19937_64& rng, int lo, int hi) {
  const std::uint64_t span = static_cast<std::uint64_t>(hi - lo) + 1;
  return lo + static_cast<int>(rng() % span);
}

DiscretePlan RandomPlan(const RelaxTables& tables, std::mt19937_64& rng) {
  const int L = tables.num_layers;
  const int max_stages = std::max(tables.min_stages, std::min(tables.max_stages, L));
  const int stages = UniformInt(rng, tables.min_stages, max_stages);
  // Distinct cuts: a partial Fisher-Yates shuffle of the L - 1 boundaries.
  std::vector<int> cuts(std::max(0, L - 1));
  for (int i = 0; i < L - 1; ++i) cuts[i] = i + 1;
  const int num_cuts = std::min(stages - 1, L - 1);
  for (int i = 0; i < num_cuts; ++i) std::swap(cuts[i], cuts[UniformInt(rng, i, L - 2)]);
  cuts.resize(num_cuts);
  std::sort(cuts.begin(), cuts.end());
  DiscretePlan plan;
  plan.boundaries.push_back(0);
  plan.boundaries.insert(plan.boundaries.end(), cuts.begin(), cuts.end());
  plan.boundaries.push_back(L);
  std::vector<int> fitting;
  for (int k = 0; k < tables.num_configs; ++k)
    if (tables.configs[k].NumDevices() * (num_cuts + 1) <= tables.num_devices) fitting.push_back(k);
  for (int s = 0; s <= num_cuts; ++s)
    plan.configs.push_back(fitting.empty() ? UniformInt(rng, 0, tables.num_configs - 1)
                                           : fitting[UniformInt(rng, 0, fitting.size() - 1)]);
  plan.microbatch_option = UniformInt(rng, 0, tables.num_microbatch_options - 1);
  return plan;
}

// On a heterogeneous cluster: RandomPlan's stages and cuts, the groups of a random order
// (SearchSpace::GroupOrders) given to consecutive runs of at least one stage each, each stage a
// config of its group that fits the group's budget shared by its run.
DiscretePlan RandomHeterogeneousPlan(const RelaxTables& tables,
                                     const std::vector<std::vector<int>>& orders,
                                     std::mt19937_64& rng) {
  DiscretePlan plan = RandomPlan(tables, rng);
  const int S = plan.NumStages();
  std::vector<int> order = orders[UniformInt(rng, 0, static_cast<int>(orders.size()) - 1)];
  if (static_cast<int>(order.size()) > S) order.resize(S);
  // Run lengths: one stage each, the rest of the stages to random runs.
  std::vector<int> length(order.size(), 1);
  for (int s = static_cast<int>(order.size()); s < S; ++s)
    ++length[UniformInt(rng, 0, static_cast<int>(order.size()) - 1)];
  int s = 0;
  for (size_t run = 0; run < order.size(); ++run) {
    const int g = order[run];
    std::vector<int> fitting;
    for (int k = 0; k < tables.num_configs; ++k)
      if (tables.configs[k].node_group == g &&
          tables.configs[k].NumDevices() * length[run] <= tables.group_devices[g])
        fitting.push_back(k);
    for (int i = 0; i < length[run]; ++i, ++s)
      if (!fitting.empty()) plan.configs[s] = fitting[UniformInt(rng, 0, fitting.size() - 1)];
  }
  return plan;
}

}  // namespace

SearchResult LocalSearcher::Search(const Problem& problem, const SearchOptions& options) {
  options.Validate();
  local_options_.Validate();
  SearchRun run(Name(), options);
  const SearchSpace space = SearchSpace::Build(problem, options.space);
  const std::vector<std::vector<int>> orders = space.GroupOrders();  // empty: homogeneous
  const CostModel cost_model(problem);
  const RelaxTables tables =
      BuildRelaxTables(cost_model, space, options.space.virtual_stages);
  PlanPolisher polisher(tables);

  SearchResult& result = run.Result();
  SearchSummary& summary = run.Summary();
  PolishLimits limits;
  limits.deadline = run.End();
  limits.max_evaluations = options.max_evaluations;
  limits.kicks = local_options_.kicks;

  auto note = [&](double seconds) { run.NoteImprovement(seconds); };

  std::mt19937_64 rng(static_cast<std::uint64_t>(options.seed) * 0x9E3779B97F4A7C15ULL + 7);
  DiscretePlan best_plan;
  DiscreteCost best_cost;
  int repaired = 0;
  bool cut_short = false;
  SearchClock::time_point last_progress = run.Start();
  for (int i = 0; local_options_.starts == 0 || i < local_options_.starts; ++i) {
    if (polisher.OutOfBudget(limits)) {
      cut_short = true;
      break;
    }
    DiscretePlan plan =
        orders.empty() ? RandomPlan(tables, rng) : RandomHeterogeneousPlan(tables, orders, rng);
    ++summary.iterations;
    if (!polisher.Repair(&plan)) continue;
    ++repaired;
    limits.seed = static_cast<std::uint64_t>(options.seed) * 1000003ULL + i;
    const DiscreteCost cost = polisher.Polish(&plan, limits, note);
    if (cost.BetterThan(best_cost)) {
      best_cost = cost;
      best_plan = plan;
    }
    if (options.progress && SecondsSince(last_progress) >= 2.0) {
      last_progress = SearchClock::now();
      std::fprintf(stderr, "[local %8.2fs] %ld starts, best %.6g s\n", run.Elapsed(),
                   summary.iterations,
                   summary.anytime.empty() ? SearchSummary::kNoPlanSeconds
                                           : summary.anytime.back().best_iteration_seconds);
    }
  }
  if (polisher.OutOfBudget(limits) && local_options_.starts > 0) cut_short = true;

  summary.evaluations = polisher.evaluations();
  std::string why_not;
  if (best_cost.valid) {
    const Plan plan = polisher.ToPlan(best_plan);
    ValidatePlan(problem, plan, "local plan");
    const Estimate estimate = Evaluate(cost_model, plan);
    ++summary.evaluations;
    if (estimate.Fits()) {
      result.plan = plan;
      summary.best_iteration_seconds = estimate.iteration_seconds;
      if (!std::isfinite(summary.initial_iteration_seconds))
        summary.initial_iteration_seconds = estimate.iteration_seconds;
    } else {
      why_not = estimate.MemoryViolation() + " (" + plan.Summary() + ")";
    }
  }
  const bool time_limited = run.OutOfTime();
  if (!result.plan) {
    summary.termination = TerminationType::kInfeasible;
    summary.message =
        repaired == 0 ? fmt::format("none of {} random starts could be repaired to a valid plan "
                                    "(device budget, stage counts or microbatch divisibility)",
                                    summary.iterations)
                      : "no plan found fits in memory; closest: " + why_not;
    if (cut_short && time_limited) summary.message += " (time limit reached)";
  } else if (cut_short) {
    summary.termination =
        time_limited ? TerminationType::kTimeLimit : TerminationType::kEvaluationLimit;
    summary.message = fmt::format("{} after {} starts; best plan so far: {}",
                                  time_limited ? "time limit reached" : "evaluation budget reached",
                                  summary.iterations, result.plan->Summary());
  } else {
    summary.termination = TerminationType::kConverged;
    summary.message = fmt::format("best of {} random starts polished ({} kicks each): {}",
                                  summary.iterations, local_options_.kicks, result.plan->Summary());
  }
  SearchResult finished = run.Finish();
  if (options.progress) std::fprintf(stderr, "[local] %s\n", summary.BriefReport().c_str());
  return finished;
}

}  // namespace stratos
