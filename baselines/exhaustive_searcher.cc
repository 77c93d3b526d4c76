#include "baselines/exhaustive_searcher.h"

#include <fmt/format.h>

#include <chrono>
#include <cmath>
#include <cstdio>
#include <functional>
#include <limits>

#include "costmodel/error.h"
#include "costmodel/evaluate.h"

namespace stratos {
namespace {

// Binomial coefficient C(n, k) as a double.
double Choose(int n, int k) {
  if (k < 0 || k > n) return 0.0;
  double value = 1.0;
  for (int i = 1; i <= k; ++i) value = value * (n - k + i) / i;
  return std::round(value);
}

}  // namespace

double ExhaustiveSearcher::CountPlans(const Problem& problem, const SearchSpace& space) {
  const CostModel cost_model(problem);
  const int L = problem.NumLayers();
  const int D = space.num_devices;
  const int max_stages = std::min(space.max_stages, L);
  double total = 0.0;
  for (int m : space.num_microbatches) {
    std::vector<int> valid_devices;
    for (const StageConfig& c : space.configs)
      if (cost_model.CheckConfig(c, m).empty() && c.NumDevices() <= D)
        valid_devices.push_back(c.NumDevices());
    // ways[d] = configuration tuples of the current length using exactly d devices.
    std::vector<double> ways(D + 1, 0.0);
    ways[0] = 1.0;
    for (int s = 1; s <= max_stages; ++s) {
      std::vector<double> next(D + 1, 0.0);
      for (int d = 0; d <= D; ++d)
        if (ways[d] > 0)
          for (int n : valid_devices)
            if (d + n <= D) next[d + n] += ways[d];
      ways.swap(next);
      if (s < space.min_stages) continue;
      double tuples = 0.0;
      for (double w : ways) tuples += w;
      total += Choose(L - 1, s - 1) * tuples;
    }
  }
  return total;
}

SearchResult ExhaustiveSearcher::Search(const Problem& problem, const SearchOptions& options) {
  options.Validate();
  SearchRun run(Name(), options);
  const SearchSpace space = SearchSpace::Build(problem, options.space);
  const CostModel cost_model(problem);
  const int L = problem.NumLayers();
  const int D = space.num_devices;
  const int max_stages = std::min(space.max_stages, L);

  const SearchResult& result = run.Result();
  SearchSummary& summary = run.Summary();

  // The virtual stages v > 1 offered: every plain plan is priced in each interleaved form too.
  std::vector<int> interleave;
  for (int v : options.space.virtual_stages)
    if (v > 1 && problem.training.virtual_pipeline_stages == 1) interleave.push_back(v);
  const double num_plans = CountPlans(problem, space) * (1.0 + interleave.size());
  const double cap = options.max_evaluations > 0 ? static_cast<double>(options.max_evaluations)
                                                 : static_cast<double>(kDefaultMaxPlans);
  if (num_plans > cap) {
    return run.Finish(TerminationType::kDeclined,
                      fmt::format("problem too large for exhaustive search: {:.0f} plans (limit "
                                  "{:.0f}; raise search.max_evaluations or shrink the space)",
                                  num_plans, cap));
  }

  bool stopped = false;
  // Devices taken in each node group, and the groups whose run of stages has ended.
  std::vector<int> used(space.group_devices.size(), 0);
  std::vector<char> closed(space.group_devices.size(), 0);

  Plan plan;
  plan.global_batch_size = problem.training.global_batch_size;
  plan.schedule = problem.training.schedule;
  std::vector<const StageConfig*> valid;

  // Assigns stage `s` of `num_stages` starting at layer `first` with `total` devices taken.
  std::function<void(int, int, int, int)> assign = [&](int s, int num_stages, int first,
                                                       int total) {
    if (stopped) return;
    if (s == num_stages) {
      if ((summary.evaluations & 1023) == 0 && run.OutOfTime()) {
        summary.termination = TerminationType::kTimeLimit;
        stopped = true;
        return;
      }
      ++summary.evaluations;
      run.Offer(plan, Evaluate(cost_model, plan));
      // ... and its interleaved forms (InterleavePlan: none where a stage has fewer than v
      // layers, the schedule is GPipe or the training interleaves already).
      for (int v : interleave)
        if (const std::optional<Plan> interleaved = InterleavePlan(plan, v)) {
          ++summary.evaluations;
          run.Offer(*interleaved, Evaluate(cost_model, *interleaved));
        }
      return;
    }
    const int remaining = num_stages - s - 1;
    const int last_end = s == num_stages - 1 ? L : L - remaining;
    const int first_end = s == num_stages - 1 ? L : first + 1;
    const int previous = s > 0 ? plan.stages[s - 1].config.node_group : -1;
    for (int end = first_end; end <= last_end; ++end) {
      for (const StageConfig* config : valid) {
        const int g = config->node_group;
        const int n = config->NumDevices();
        if (total + n > D || used[g] + n > space.group_devices[g] || closed[g]) continue;
        plan.stages[s] = {first, end, *config};
        // Leaving the previous group's run closes it.
        const bool leaves = previous >= 0 && previous != g;
        if (leaves) closed[previous] = 1;
        used[g] += n;
        assign(s + 1, num_stages, end, total + n);
        used[g] -= n;
        if (leaves) closed[previous] = 0;
        if (stopped) return;
      }
    }
  };

  for (int m : space.num_microbatches) {
    if (stopped) break;
    plan.num_microbatches = m;
    valid.clear();
    for (const StageConfig& c : space.configs)
      if (cost_model.CheckConfig(c, m).empty()) valid.push_back(&c);
    for (int num_stages = space.min_stages; num_stages <= max_stages && !stopped; ++num_stages) {
      ++summary.iterations;
      plan.stages.assign(num_stages, StagePlan{});
      assign(0, num_stages, 0, 0);
      if (options.progress)
        std::fprintf(stderr, "[exhaustive %8.2fs] m=%d, %d stages: %ld plans, best %.6g s\n",
                     run.Elapsed(), m, num_stages, summary.evaluations,
                     summary.best_iteration_seconds);
    }
  }

  if (stopped) {
    summary.message = fmt::format("stopped by the time limit after {} of {:.0f} plans; best: {}",
                                  summary.evaluations, num_plans,
                                  result.plan ? result.plan->Summary() : std::string("none"));
  } else if (result.plan) {
    summary.termination = TerminationType::kOptimal;
    summary.lower_bound_seconds = summary.best_iteration_seconds;
    summary.message =
        fmt::format("optimal over all {} plans: {}", summary.evaluations, result.plan->Summary());
  } else {
    summary.termination = TerminationType::kInfeasible;
    summary.message =
        summary.evaluations == 0
            ? fmt::format(
                  "no plan: no configuration fits {} to {} stages on {} devices with any "
                  "microbatch count",
                  space.min_stages, max_stages, D)
            : fmt::format(
                  "no plan fits in device memory ({} plans); the least memory-hungry "
                  "one, {}",
                  summary.evaluations, run.LeastOverflowText());
  }
  return run.Finish();
}

}  // namespace stratos
