#include "baselines/explain.h"

#include <fmt/format.h>

#include <cmath>
#include <limits>

#include "baselines/stage_frontier.h"
#include "costmodel/evaluate.h"

namespace stratos {

namespace {

constexpr double kInf = std::numeric_limits<double>::infinity();

// "12.34 GiB", "512 B": memory sizes in messages, readable at every scale.
std::string FormatBytes(double bytes) {
  const char* units[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  int u = 0;
  while (std::abs(bytes) >= 1024.0 && u < 4) {
    bytes /= 1024.0;
    ++u;
  }
  return u == 0 ? fmt::format("{:.4g} B", bytes) : fmt::format("{:.2f} {}", bytes, units[u]);
}

}  // namespace

std::string ExplainNoFeasiblePlan(const CostModel& cost_model, const SearchSpace& space,
                                  int max_stages) {
  const Problem& problem = cost_model.problem();
  const double capacity = cost_model.DeviceMemoryCapacityBytes();
  const int L = problem.NumLayers();
  int min_mesh = space.mesh_sizes.empty() ? 1 : space.mesh_sizes.front();
  if (space.min_stages * min_mesh > space.num_devices)
    return fmt::format(
        "no feasible plan: min_stages = {} stages of at least {} device(s) need "
        "more than the {} devices of the cluster",
        space.min_stages, min_mesh, space.num_devices);
  if (space.min_stages > max_stages)
    return fmt::format(
        "no feasible plan: min_stages = {} exceeds the {} stages this problem "
        "allows",
        space.min_stages, max_stages);
  // Which configurations are valid at all, for some microbatch count?
  bool any_valid = false;
  std::string example_rule;
  for (int m : space.num_microbatches)
    for (const StageConfig& c : space.configs) {
      std::string rule = cost_model.CheckConfig(c, m);
      if (rule.empty())
        any_valid = true;
      else if (example_rule.empty())
        example_rule = fmt::format("{} with m={}: {}", c.Label(), m, rule);
    }
  if (!any_valid)
    return fmt::format(
        "no feasible plan: no stage configuration is valid for any microbatch "
        "count (e.g. {})",
        example_rule);
  // Memory. A layer that does not fit alone on any mesh (its state, one microbatch of its
  // activations (the fewest any stage holds) and its working set) is a definitive reason.
  const Schedule schedule = problem.training.schedule;
  int worst_layer = -1;
  double worst_need = 0;
  std::string worst_config;
  std::vector<StageTable> tables;
  for (int m : space.num_microbatches) tables.emplace_back(cost_model, space.configs, m);
  for (int l = 0; l < L; ++l) {
    double need = kInf;
    std::string best_config;
    for (const StageTable& table : tables) {
      const int m = table.num_microbatches();
      const int inflight = MicrobatchesInFlight(schedule, 1, 0, m);
      for (int c : table.ValidConfigs()) {
        if (space.configs[c].NumDevices() > space.num_devices) continue;
        const double bytes = table.Layer(l, c).PeakMemoryBytes(inflight);
        if (bytes < need) {
          need = bytes;
          best_config = fmt::format("{}, m={}", space.configs[c].Label(), m);
        }
      }
    }
    if (need > capacity && need > worst_need) {
      worst_need = need;
      worst_layer = l;
      worst_config = best_config;
    }
  }
  if (worst_layer >= 0)
    return fmt::format(
        "no feasible plan fits in device memory: layer {} ({}) alone needs at least {} per "
        "device even in its least memory-hungry configuration ({}), {} over the {} capacity",
        worst_layer, problem.model.layers[worst_layer].name, FormatBytes(worst_need), worst_config,
        FormatBytes(worst_need - capacity), FormatBytes(capacity));
  // Otherwise: the tightest single-stage plan, with the largest mesh, shows the gap.
  double best_peak = kInf;
  Plan best_plan;
  Estimate best_estimate;
  for (const StageTable& table : tables) {
    for (int c : table.ValidConfigs()) {
      Plan plan;
      plan.global_batch_size = problem.training.global_batch_size;
      plan.num_microbatches = table.num_microbatches();
      plan.schedule = schedule;
      plan.stages.push_back({0, L, space.configs[c]});
      if (plan.NumDevices() > space.num_devices) continue;
      Estimate estimate = Evaluate(cost_model, plan);
      if (estimate.stages[0].peak_memory_bytes < best_peak) {
        best_peak = estimate.stages[0].peak_memory_bytes;
        best_plan = plan;
        best_estimate = estimate;
      }
    }
  }
  std::string tightest =
      best_peak < kInf
          ? fmt::format("; the least memory-hungry single-stage plan ({}) {}", best_plan.Summary(),
                        best_estimate.Fits() ? std::string("fits but breaks the stage-count "
                                                           "bounds")
                                             : best_estimate.MemoryViolation())
          : std::string();
  return fmt::format(
      "no feasible plan fits in device memory ({} per device) with {} to {} "
      "stages on {} devices{}",
      FormatBytes(capacity), space.min_stages, max_stages, space.num_devices, tightest);
}

}  // namespace stratos
