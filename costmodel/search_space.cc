#include "costmodel/search_space.h"

#include <algorithm>

#include "costmodel/error.h"

namespace stratos {

void SpaceOptions::Validate() const {
  // Named as in specs and --option (experiments/searchers.h).
  const auto fail = [](const char* field, const auto& value, const std::string& rule) {
    ThrowOptionError(std::string("space.") + field, value, rule);
  };
  if (min_stages < 1) fail("min_stages", min_stages, "must be >= 1");
  if (max_stages < 0) fail("max_stages", max_stages, "must be >= 0 (0 = auto)");
  if (max_stages > 0 && min_stages > max_stages)
    fail("min_stages", min_stages, fmt::format("must be <= space.max_stages = {}", max_stages));
  if (max_tensor_parallel < 0)
    fail("max_tensor_parallel", max_tensor_parallel, "must be >= 0 (0 = auto)");
  if (max_data_parallel < 0)
    fail("max_data_parallel", max_data_parallel, "must be >= 0 (0 = auto)");
  if (recompute.empty()) fail("recompute", "[]", "must list at least one mode");
  for (int m : num_microbatches)
    if (m < 1) fail("num_microbatches", m, "every entry must be >= 1");
  if (virtual_stages.empty()) fail("virtual_stages", "[]", "must list at least one count (1: none)");
  for (int v : virtual_stages)
    if (v < 1) fail("virtual_stages", v, "every entry must be >= 1");
  bool has_none = false;
  for (const CompressionSpec& spec : grad_compressions) {
    const std::string rule = CheckCompressionSpec(spec);
    if (!rule.empty()) fail("grad_compressions", spec.Label(), rule);
    has_none = has_none || spec.kind == GradCompression::kNone;
  }
  if (!has_none)
    fail("grad_compressions", grad_compressions.size(),
         "must include none (stages without data parallelism have nothing to compress)");
}

bool SpaceOptions::OffersInterleaving() const {
  return std::any_of(virtual_stages.begin(), virtual_stages.end(), [](int v) { return v > 1; });
}

std::vector<std::vector<int>> SearchSpace::GroupOrders() const {
  std::vector<std::vector<int>> orders;
  if (!Heterogeneous()) return orders;
  const int groups = static_cast<int>(group_devices.size());
  int usable = 0;  // the groups the space lets stages use (SpaceOptions::node_groups)
  for (int g = 0; g < groups; ++g)
    if (group_devices[g] > 0) usable |= 1 << g;
  for (int mask = 1; mask < (1 << groups); ++mask) {
    if ((mask & usable) != mask) continue;
    std::vector<int> order;
    for (int g = 0; g < groups; ++g)
      if (mask & (1 << g)) order.push_back(g);
    do orders.push_back(order);
    while (std::next_permutation(order.begin(), order.end()));
  }
  return orders;
}

bool SearchSpace::GroupsInRuns(const std::vector<int>& stage_groups) {
  for (size_t s = 1; s < stage_groups.size(); ++s) {
    if (stage_groups[s] == stage_groups[s - 1]) continue;
    for (size_t t = 0; t + 1 < s; ++t)
      if (stage_groups[t] == stage_groups[s]) return false;  // a second run of that group
  }
  return true;
}

SearchSpace SearchSpace::Build(const Problem& problem, const SpaceOptions& options) {
  options.Validate();
  const ClusterSpec& cluster = problem.cluster;
  const int batch = problem.training.global_batch_size;
  const CostModel cost_model(problem);
  SearchSpace space;
  // The node groups the stages may use.
  std::vector<char> allowed(cluster.NumGroups(), options.node_groups.empty() ? 1 : 0);
  for (const std::string& name : options.node_groups) {
    const int group = cluster.GroupIndex(name);
    if (group < 0)
      ThrowOptionError("space.node_groups", name,
                       fmt::format("names no node group of cluster {} (groups: {})", cluster.name,
                                   cluster.GroupNames()));
    allowed[group] = 1;
  }
  space.num_devices = 0;
  for (int group = 0; group < cluster.NumGroups(); ++group)
    if (allowed[group]) space.num_devices += cluster.GroupDevices(group);
  space.min_stages = options.min_stages;
  space.max_stages = options.max_stages > 0
                         ? options.max_stages
                         : std::min({problem.NumLayers(), space.num_devices, 16});
  space.max_stages = std::min(space.max_stages, problem.NumLayers());
  if (space.min_stages > space.max_stages)
    ThrowOptionError("space.min_stages", space.min_stages,
                     fmt::format("exceeds the {} stages this problem allows", space.max_stages));

  // Meshes (Alpa's submesh shapes restricted to powers of two), in each node group.
  for (int group = 0; group < cluster.NumGroups(); ++group) {
    const int gpus_per_node = cluster.Group(group).gpus_per_node;
    const int num_nodes = cluster.Group(group).count;
    space.group_devices.push_back(allowed[group] ? cluster.GroupDevices(group) : 0);
    if (!allowed[group]) continue;
    std::vector<std::pair<int, int>> meshes;
    for (int g = 1; g < gpus_per_node; g *= 2)
      if (gpus_per_node % g == 0) meshes.push_back({1, g});
    for (int n = 1; n <= num_nodes; n *= 2) meshes.push_back({n, gpus_per_node});
    // TP inside a node by default; a larger max_tensor_parallel adds TP groups of whole nodes
    // on the multi-node meshes (TensorParallelLayout). CheckStructure drops the TP degrees that
    // neither divide a node nor take whole nodes.
    const int max_tp =
        options.max_tensor_parallel > 0 ? options.max_tensor_parallel : gpus_per_node;
    for (auto [nodes, gpn] : meshes) {
      space.mesh_sizes.push_back(nodes * gpn);
      for (int tp = 1; tp <= std::min(max_tp, nodes * gpn); tp *= 2) {
        const int dp = nodes * gpn / tp;
        if (options.max_data_parallel > 0 && dp > options.max_data_parallel) continue;
        for (int zero = 0; zero <= ((dp > 1 && options.allow_zero) ? 3 : 0); ++zero) {
          for (Recompute recompute : options.recompute)
            for (const CompressionSpec& compression : options.grad_compressions) {
              if (compression.kind != GradCompression::kNone && dp == 1) continue;
              StageConfig config{nodes, gpn, dp, tp, zero, recompute, compression, group};
              if (!cost_model.CheckStructure(config).empty()) continue;
              space.configs.push_back(config);
            }
        }
      }
    }
  }
  std::sort(space.mesh_sizes.begin(), space.mesh_sizes.end());
  space.mesh_sizes.erase(std::unique(space.mesh_sizes.begin(), space.mesh_sizes.end()),
                         space.mesh_sizes.end());

  const int max_m = options.max_num_microbatches > 0 ? options.max_num_microbatches : batch;
  if (!options.num_microbatches.empty()) {
    space.num_microbatches = options.num_microbatches;
  } else {
    // Every divisor of the batch up to max_m, in pairs (d, batch / d) with d <= sqrt(batch):
    // O(sqrt(batch)) steps, and no counter that could pass INT_MAX.
    for (long long d = 1; d * d <= batch; ++d) {
      if (batch % d != 0) continue;
      if (d <= max_m) space.num_microbatches.push_back(static_cast<int>(d));
      if (batch / d != d && batch / d <= max_m)
        space.num_microbatches.push_back(static_cast<int>(batch / d));
    }
  }
  std::sort(space.num_microbatches.begin(), space.num_microbatches.end());
  for (int m : space.num_microbatches)
    if (batch % m != 0)
      ThrowOptionError("space.num_microbatches", m,
                       fmt::format("must divide the global batch {}", batch));
  if (space.configs.empty())
    throw InputError(fmt::format("{}: no stage configuration is valid on cluster {} (check "
                                 "max_tensor_parallel and the model's attention heads)",
                                 problem.model.source, cluster.name));
  return space;
}

}  // namespace stratos
