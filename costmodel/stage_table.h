#pragma once
// Memoized per-stage cost terms for one microbatch count: the one table of stage terms that the
// searchers price stages from (the DP's frontiers, the ILP's columns, MCMC's states, the
// relaxation's tables).
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

namespace stratos {

class StageTable {
 public:
  // Prices every configuration of `configs` that CostModel::CheckConfig accepts with
  // `num_microbatches`; the others are listed as invalid (Valid(c) == false). The overheads
  // send to `next_group` and receive from `previous_group` (CostModel::StageOverhead; -1: the
  // stage's own group). With `every_neighbour_group` on a cluster of several node groups, the
  // overheads towards every pair of neighbour groups are priced too (OverheadBetween).
  StageTable(const CostModel& cost_model, const std::vector<StageConfig>& configs,
             int num_microbatches, int previous_group = -1, int next_group = -1,
             bool every_neighbour_group = false);

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
  // StageOverhead(Config(c), m, first_stage, last_stage, previous_group, next_group) for any
  // neighbour groups (-1 or the stage's own group: its own). Requires Valid(c) and a table built
  // with every_neighbour_group, unless both neighbours are the table's own (then: Overhead).
  const StageTerms& OverheadBetween(int config_index, bool first_stage, bool last_stage,
                                    int previous_group, int next_group) const;
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
  // With every_neighbour_group on G > 1 groups: (num_configs, 4, G + 1, G + 1), neighbour index
  // 0 = the stage's own group, g + 1 = group g; empty otherwise.
  int previous_group_ = -1, next_group_ = -1;  // the neighbours of Overhead()
  int neighbour_slots_ = 0;                     // G + 1, or 0
  std::vector<StageTerms> neighbour_overhead_;
};

}  // namespace stratos
