#pragma once
// The discrete search space shared by every searcher (relax, DP, grid, exhaustive, ...):
// contiguous layer-to-stage cuts, per-stage config (mesh size, DP x TP, ZeRO, recompute) and the
// global microbatch count. Same space for everyone, so comparisons are fair.
#include <string>
#include <vector>

#include "costmodel/cost_model.h"

namespace stratos {

struct SpaceOptions {
  int min_stages = 1;
  int max_stages = 0;            // 0: min(layers, devices, 16)
  int max_tensor_parallel = 0;   // 0: gpus per node; above it, TP groups of whole nodes too
  int max_data_parallel = 0;     // 0: unbounded
  bool allow_zero = true;        // ZeRO 1-3 as options (ZeRO 0 always)
  std::vector<Recompute> recompute = {Recompute::kNone, Recompute::kSelective, Recompute::kFull};
  // Gradient compression options of stages with DP > 1 and ZeRO 0-1 (costmodel/compression.h).
  // Only none by default: compression changes the math of training, so a throughput-only search
  // should not pick it unasked (the co-search weighs it against the loss).
  std::vector<CompressionSpec> grad_compressions = std::vector<CompressionSpec>(1);
  int max_num_microbatches = 0;  // 0: global batch size
  // Empty: every divisor of the global batch up to max_num_microbatches.
  std::vector<int> num_microbatches;
  // Model chunks per pipeline rank the plans may use (the interleaved 1F1B schedule; plan.h
  // InterleavePlan), ascending; {1}: plain pipelines only. The grid searcher enumerates them for
  // every uniform plan, the exhaustive search for every plan; the DP, relax's polish, local and
  // MCMC search them where a rank of v chunks prices as its plain stage (plan.h
  // InterleavesExactly, one node group); the ILP, and the others elsewhere, offer their best
  // plan in each (InterleavingSearcher).
  std::vector<int> virtual_stages = {1};
  // Whether virtual_stages offers any count above 1.
  bool OffersInterleaving() const;
  // Names of the node groups the stages may use (e.g. only the fastest GPUs of a heterogeneous
  // cluster); empty: every group.
  std::vector<std::string> node_groups;

  // Throws InputError naming the field and value if inconsistent (e.g. min_stages > max_stages).
  void Validate() const;
};

struct SearchSpace {
  std::vector<StageConfig> configs;       // per-stage options
  std::vector<int> num_microbatches;      // global options, ascending
  int min_stages = 1;
  int max_stages = 1;
  int num_devices = 0;                    // device budget: sum of stage meshes <= num_devices
  std::vector<int> mesh_sizes;            // distinct NumDevices() of configs, ascending
  // Device budget of each node group (ClusterSpec::GroupDevices; 0 for a group that
  // SpaceOptions::node_groups leaves out): the meshes of the stages in group g sum to at most
  // group_devices[g]. One entry (= num_devices) on a homogeneous cluster.
  // On a heterogeneous one, a plan's stages visit the groups in runs: the stages of one group
  // are consecutive, and each group has at most one run (the order of the runs is free).
  std::vector<int> group_devices;

  bool Heterogeneous() const { return group_devices.size() > 1; }
  // Whether the stage groups of a plan, in pipeline order, respect the runs rule above.
  static bool GroupsInRuns(const std::vector<int>& stage_groups);
  // The orders in which a plan's runs can visit the groups: every order of every nonempty
  // subset of the groups with a device budget, subsets by ascending bit mask (group g = bit g),
  // each subset's orders lexicographically. sum_k C(G, k) k! orders for G usable groups (4 for
  // 2, 15 for 3, 64 for 4); empty on a homogeneous cluster.
  std::vector<std::vector<int>> GroupOrders() const;

  // Mesh sizes: 1, 2, 4, ... up to gpus_per_node, then k * gpus_per_node for k = 1, 2, 4, ...
  // up to the node count (powers of two, as Megatron-LM and most published plans use), in each
  // node group, with the configurations of group g carrying node_group = g.
  // For each mesh: every DP x TP with TP <= max_tensor_parallel dividing the node and the heads
  // (and, with max_tensor_parallel above the GPUs per node, TP of 2, 4, ... whole nodes on the
  // multi-node meshes: TensorParallelLayout),
  // ZeRO 0 (and 1-3 when DP > 1 and allowed), every allowed recompute mode, and every allowed
  // gradient compression where CheckStructure accepts it (DP > 1, ZeRO 0-1). Throws InputError
  // naming space.node_groups for a name the cluster does not have.
  static SearchSpace Build(const Problem& problem, const SpaceOptions& options = {});
};

}  // namespace stratos
