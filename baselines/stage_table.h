#pragma once
// Memoized per-stage cost terms for one microbatch count, for searchers that price many stages.
//
// Layers of equal cost_class have identical LayerTerms (model.h), so the table keeps one
// StageTerms per (cost class, configuration) and one overhead per (configuration, first stage,
// last stage). Terms(first, last, c) sums them in exactly the order Evaluate() does (overhead,
// then the layers in order), so a stage priced here is bit-identical to the same stage priced by
// Evaluate(): memory feasibility decided here agrees with Estimate::Fits().
#include <cstddef>
#include <cstdint>
#include <vector>

#include "costmodel/cost_model.h"
#include "costmodel/search_space.h"
#include "search/searcher.h"

namespace stratos {

class StageTable {
 public:
  // Prices every configuration of `configs` that CostModel::CheckConfig accepts with
  // `num_microbatches`; the others are listed as invalid (Valid(c) == false). The overheads
  // send to `next_group` and receive from `previous_group` (CostModel::StageOverhead; -1: the
  // stage's own group).
  StageTable(const CostModel& cost_model, const std::vector<StageConfig>& configs,
             int num_microbatches, int previous_group = -1, int next_group = -1);

  int num_microbatches() const { return num_microbatches_; }
  int NumConfigs() const { return static_cast<int>(configs_.size()); }
  int NumLayers() const { return num_layers_; }
  bool Valid(int config_index) const { return valid_[config_index] != 0; }
  // Indices of the valid configurations, ascending.
  const std::vector<int>& ValidConfigs() const { return valid_configs_; }
  const StageConfig& Config(int config_index) const { return configs_[config_index]; }

  // LayerTerms(layer, Config(c), m). Requires Valid(c).
  const StageTerms& Layer(int layer, int config_index) const {
    return layer_terms_[static_cast<size_t>(layer_class_[layer]) * configs_.size() + config_index];
  }
  // StageOverhead(Config(c), m, first_stage, last_stage, previous_group, next_group). Requires
  // Valid(c).
  const StageTerms& Overhead(int config_index, bool first_stage, bool last_stage) const {
    return overhead_[static_cast<size_t>(config_index) * 4 + (first_stage ? 2 : 0) +
                     (last_stage ? 1 : 0)];
  }
  // Terms of the stage holding layers [first_layer, last_layer) with configuration c, summed as
  // Evaluate() sums them. O(last_layer - first_layer).
  StageTerms Terms(int first_layer, int last_layer, int config_index) const;

 private:
  int num_microbatches_ = 1;
  int num_layers_ = 0;
  std::vector<StageConfig> configs_;
  std::vector<char> valid_;
  std::vector<int> valid_configs_;
  std::vector<int> layer_class_;         // (num_layers) dense index of each layer's cost class
  std::vector<StageTerms> layer_terms_;  // (num_classes, num_configs)
  std::vector<StageTerms> overhead_;     // (num_configs, 4): [first][last]
};

// The stage options of one microbatch count m in the form Alpa's inter-operator DP consumes
// (dp_searcher.h): for every layer range [i, j) and mesh size n, the Pareto frontier of the
// configurations of that mesh size, each with its microbatch time t_s, the DP's additive part
// t_s + c_s, its exposed tail e_s and the in-flight microbatch counts with which it fits in memory
// (decided exactly as Evaluate() does). A configuration is dropped when another one of the same
// cell is no slower (t), no costlier (t + c), has no longer a tail (e) and fits at least as many
// microbatches in flight.
//
// One Pareto-optimal configuration of a (layer range, mesh size) cell:
struct FrontierEntry {
  double t;    // microbatch seconds t_s
  double a;    // t_s + c_s (summed over stages by the objective)
  double e;    // exposed tail e_s (maximized over stages by the objective)
  int level;   // fits in memory with the first `level` in-flight counts of StageFrontier::inflight
  int config;  // index into SearchSpace::configs
};

struct StageFrontier {
  int m = 0;
  int num_layers = 0;
  int num_meshes = 0;
  // Distinct in-flight counts a stage may need, ascending; level_of_stages[s] (1-based) is the
  // level a stage with s stages from it to the end needs (1F1B: min(m, s); GPipe: m).
  std::vector<int> inflight;
  std::vector<int> level_of_stages;
  // Cell (i, j, n) = layers [i, j) on a mesh of size mesh_sizes[n]. Cells priced identically
  // (ranges of the same cost classes, neither first nor last, e.g. any k transformer layers in
  // the middle of a GPT) share one group: cell_group[cell]. The Pareto frontier of group g
  // (entries t ascending, none dominated in (t, a, e, level)) is entries[group_offsets[g] ..
  // group_offsets[g + 1]); group 0 is empty (cells with j <= i, or where nothing fits).
  std::vector<std::uint32_t> cell_group;
  std::vector<std::uint32_t> group_offsets;
  std::vector<FrontierEntry> entries;
  std::vector<double> t_candidates;  // distinct t of all entries, ascending
  std::vector<double> e_candidates;  // distinct e of all entries, ascending
  // Lower bounds on max_s t_s and on max_s e_s of any plan (volume and single-layer bounds).
  double t_lower_bound = 0;
  double e_lower_bound = 0;

  size_t Cell(int i, int j, int n) const {
    return (static_cast<size_t>(i) * (num_layers + 1) + j) * num_meshes + n;
  }
  double Bytes() const {
    return sizeof(FrontierEntry) * static_cast<double>(entries.capacity()) +
           sizeof(std::uint32_t) *
               static_cast<double>(cell_group.capacity() + group_offsets.capacity()) +
           sizeof(double) * static_cast<double>(t_candidates.capacity() +
                                                e_candidates.capacity());
  }
  int NumGroups() const { return static_cast<int>(group_offsets.size()) - 1; }
  size_t NumCells() const {
    return static_cast<size_t>(num_layers + 1) * (num_layers + 1) * num_meshes;
  }
};

// Builds the frontier of microbatch count `num_microbatches` for plans of up to `max_stages`
// stages. O(L^2 * configs) time (stage terms; shared groups' frontiers are built once); memory
// O(L^2 * mesh sizes) plus the groups' frontiers (FrontierCellBytes). With a deadline, checks it
// once per first layer (Deadline::Expired propagates). Each configuration's memory is checked
// against its node group's devices; the stages send to `next_group` and receive from
// `previous_group` (StageTable), which on a heterogeneous cluster makes one frontier per stage
// position in a run of a node group.
StageFrontier BuildStageFrontier(const CostModel& cost_model, const SearchSpace& space,
                                 int max_stages, int num_microbatches,
                                 const Deadline* deadline = nullptr, int previous_group = -1,
                                 int next_group = -1);

// Bytes of a frontier's cell index for `num_layers` layers and `num_meshes` mesh sizes: what
// BuildStageFrontier allocates whatever the model (the groups' frontiers come on top).
inline double FrontierCellBytes(int num_layers, int num_meshes) {
  return sizeof(std::uint32_t) * (num_layers + 1.0) * (num_layers + 1.0) * num_meshes;
}

}  // namespace stratos
