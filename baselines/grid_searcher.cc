#include "baselines/grid_searcher.h"

#include <fmt/format.h>

#include <chrono>
#include <cmath>
#include <algorithm>
#include <cstdio>
#include <limits>

#include "costmodel/error.h"
#include "costmodel/evaluate.h"

namespace stratos {
std::vector<int> UniformStageBoundaries(int num_layers, int num_stages, bool larger_last) {
  STRATOS_CHECK(num_stages >= 1 && num_stages <= num_layers, "{} stages for {} layers", num_stages,
                num_layers);
  const int base = num_layers / num_stages, extra = num_layers % num_stages;
  std::vector<int> bounds = {0};
  for (int s = 0; s < num_stages; ++s) {
    const bool larger = larger_last ? s >= num_stages - extra : s < extra;
    bounds.push_back(bounds.back() + base + (larger ? 1 : 0));
  }
  return bounds;
}

SearchResult GridSearcher::Search(const Problem& problem, const SearchOptions& options) {
  options.Validate();
  SearchRun run(Name(), options);
  const SearchSpace space = SearchSpace::Build(problem, options.space);
  const CostModel cost_model(problem);
  const int L = problem.NumLayers();
  const int max_stages = std::min(space.max_stages, L);
  // Model chunks per rank beyond 1 (interleaved 1F1B), unless the problem sets its own.
  std::vector<int> space_virtual_stages;
  if (problem.training.virtual_pipeline_stages == 1)
    for (int v : options.space.virtual_stages)
      if (v > 1) space_virtual_stages.push_back(v);

  const SearchResult& result = run.Result();
  SearchSummary& summary = run.Summary();
  bool stopped = false;
  SearchClock::time_point last_progress = run.Start();

  // Orders of all the node groups, for the plans that treat every group alike (heterogeneous
  // clusters only): the stages fill the groups in the order, as many as each group's devices
  // hold.
  std::vector<std::vector<int>> orders;
  if (space.Heterogeneous()) {
    std::vector<int> order(space.group_devices.size());
    for (size_t g = 0; g < order.size(); ++g) order[g] = static_cast<int>(g);
    do orders.push_back(order);
    while (std::next_permutation(order.begin(), order.end()));
  }
  // The node group of each of pp stages of `config`'s shape filling the groups of `order`, or
  // empty when they do not fit or stay in one group (a plan of one group is tried as such).
  auto fill = [&](const StageConfig& config, int pp, const std::vector<int>& order) {
    std::vector<int> groups;
    size_t j = 0;
    int free = space.group_devices[order[0]];
    while (static_cast<int>(groups.size()) < pp && j < order.size()) {
      StageConfig placed = config;
      placed.node_group = order[j];
      if (free >= config.NumDevices() && cost_model.CheckStructure(placed).empty()) {
        groups.push_back(order[j]);
        free -= config.NumDevices();
      } else if (++j < order.size()) {
        free = space.group_devices[order[j]];
      }
    }
    if (static_cast<int>(groups.size()) < pp || groups.front() == groups.back()) groups.clear();
    return groups;
  };

  // Whether each configuration is the first of its shape (its fields but the node group).
  std::vector<char> first_of_shape(space.configs.size(), 1);
  for (size_t c = 0; c < space.configs.size(); ++c)
    for (size_t d = 0; d < c && first_of_shape[c]; ++d) {
      StageConfig shape = space.configs[d];
      shape.node_group = space.configs[c].node_group;
      if (shape == space.configs[c]) first_of_shape[c] = 0;
    }

  for (int pp = space.min_stages; pp <= max_stages && !stopped; ++pp) {
    std::vector<std::vector<int>> splits = {UniformStageBoundaries(L, pp, false)};
    if (L % pp != 0) splits.push_back(UniformStageBoundaries(L, pp, true));
    for (size_t c = 0; c < space.configs.size() && !stopped; ++c) {
      const StageConfig& config = space.configs[c];
      // Placements of pp stages of this configuration: all in its own group, and, once per
      // shape, across the groups in each order.
      std::vector<std::vector<int>> placements;
      if (pp * config.NumDevices() <= space.group_devices[config.node_group])
        placements.push_back(std::vector<int>(pp, config.node_group));
      if (first_of_shape[c])
        for (const std::vector<int>& order : orders) {
          std::vector<int> groups = fill(config, pp, order);
          if (!groups.empty()) placements.push_back(std::move(groups));
        }
      if (placements.empty()) continue;
      for (int m : space.num_microbatches) {
        if (!cost_model.CheckConfig(config, m).empty()) continue;
        if (const auto spent = run.BudgetSpent()) {
          summary.termination = *spent;
          stopped = true;
          break;
        }
        ++summary.iterations;
        for (const std::vector<int>& groups : placements)
          for (const std::vector<int>& bounds : splits) {
            Plan plan;
            plan.global_batch_size = problem.training.global_batch_size;
            plan.num_microbatches = m;
            plan.schedule = problem.training.schedule;
            for (int s = 0; s < pp; ++s) {
              StageConfig placed = config;
              placed.node_group = groups[s];
              plan.stages.push_back({bounds[s], bounds[s + 1], placed});
            }
            ++summary.evaluations;
            run.Offer(plan, Evaluate(cost_model, plan));
            // The same plan in the interleaved schedule, each rank's layers in v chunks.
            for (int v : space_virtual_stages) {
              const std::optional<Plan> interleaved = InterleavePlan(plan, v);
              if (!interleaved) continue;
              ++summary.evaluations;
              run.Offer(*interleaved, Evaluate(cost_model, *interleaved));
            }
          }
      }
      if (options.progress && SecondsSince(last_progress) >= 2.0) {
        last_progress = SearchClock::now();
        std::fprintf(stderr, "[grid %8.2fs] PP=%d: %ld plans, best %.6g s\n", run.Elapsed(),
                     pp, summary.evaluations, summary.best_iteration_seconds);
      }
    }
  }

  if (stopped) {
    summary.message = fmt::format(
        "stopped by the {} after {} plans; best plan so far: {}",
        summary.termination == TerminationType::kTimeLimit ? "time limit" : "evaluation limit",
        summary.evaluations, result.plan ? result.plan->Summary() : std::string("none"));
  } else if (result.plan) {
    summary.termination = TerminationType::kConverged;
    summary.message =
        fmt::format("best of {} uniform plans: {}", summary.evaluations, result.plan->Summary());
  } else {
    summary.termination = TerminationType::kInfeasible;
    summary.message =
        summary.evaluations == 0
            ? fmt::format(
                  "no uniform plan: no configuration fits {} to {} stages on {} devices "
                  "with any microbatch count",
                  space.min_stages, max_stages, space.num_devices)
            : fmt::format(
                  "no uniform plan fits in device memory ({} plans); the least "
                  "memory-hungry one, {}",
                  summary.evaluations, run.LeastOverflowText());
  }
  SearchResult finished = run.Finish();
  if (options.progress) std::fprintf(stderr, "[grid] %s\n", summary.BriefReport().c_str());
  return finished;
}

}  // namespace stratos
