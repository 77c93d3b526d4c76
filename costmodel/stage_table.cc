#include "costmodel/stage_table.h"

#include <map>

#include "costmodel/error.h"

namespace stratos {

StageTable::StageTable(const CostModel& cost_model, const std::vector<StageConfig>& configs,
                       int num_microbatches, int previous_group, int next_group,
                       bool every_neighbour_group)
    : num_microbatches_(num_microbatches),
      num_layers_(cost_model.problem().NumLayers()),
      configs_(configs),
      valid_(configs.size(), 0),
      previous_group_(previous_group),
      next_group_(next_group) {
  const ModelSpec& model = cost_model.problem().model;
  // Dense class ids, and the first layer of each class as its representative.
  std::map<int, int> class_index;
  std::vector<int> representative;
  layer_class_.resize(num_layers_);
  for (int l = 0; l < num_layers_; ++l) {
    auto [it, inserted] =
        class_index.emplace(model.layers[l].cost_class, static_cast<int>(representative.size()));
    if (inserted) representative.push_back(l);
    layer_class_[l] = it->second;
  }
  const size_t num_configs = configs_.size();
  layer_terms_.assign(representative.size() * num_configs, StageTerms{});
  overhead_.assign(num_configs * 4, StageTerms{});
  const int groups = static_cast<int>(cost_model.problem().cluster.node_groups.size());
  if (every_neighbour_group && groups > 1) {
    neighbour_slots_ = groups + 1;
    neighbour_overhead_.assign(num_configs * 4 * neighbour_slots_ * neighbour_slots_,
                               StageTerms{});
  }
  for (size_t c = 0; c < num_configs; ++c) {
    if (!cost_model.CheckConfig(configs_[c], num_microbatches).empty()) continue;
    valid_[c] = 1;
    valid_configs_.push_back(static_cast<int>(c));
    for (size_t k = 0; k < representative.size(); ++k)
      layer_terms_[k * num_configs + c] =
          cost_model.LayerTerms(representative[k], configs_[c], num_microbatches);
    for (int first = 0; first < 2; ++first)
      for (int last = 0; last < 2; ++last)
        overhead_[c * 4 + first * 2 + last] =
            cost_model.StageOverhead(configs_[c], num_microbatches, first != 0, last != 0,
                                     previous_group, next_group);
    const int own = configs_[c].node_group + 1;
    for (int first = 0; first < 2 && neighbour_slots_ > 0; ++first)
      for (int last = 0; last < 2; ++last)
        for (int p = 0; p < neighbour_slots_; ++p)
          for (int n = 0; n < neighbour_slots_; ++n)
            if (p != own && n != own)
              neighbour_overhead_[((c * 4 + first * 2 + last) * neighbour_slots_ + p) *
                                      neighbour_slots_ +
                                  n] =
                  cost_model.StageOverhead(configs_[c], num_microbatches, first != 0, last != 0,
                                           p - 1, n - 1);
  }
}

const StageTerms& StageTable::OverheadBetween(int c, bool first_stage, bool last_stage,
                                              int previous_group, int next_group) const {
  const int own = configs_[c].node_group;
  const int p = previous_group < 0 || previous_group == own ? 0 : previous_group + 1;
  const int n = next_group < 0 || next_group == own ? 0 : next_group + 1;
  if (neighbour_slots_ == 0) {
    const bool own_neighbours = (previous_group_ < 0 || previous_group_ == own) &&
                                (next_group_ < 0 || next_group_ == own);
    STRATOS_CHECK(p == 0 && n == 0 && own_neighbours,
                  "overhead towards groups {} / {}: the table was built for its own group only",
                  previous_group, next_group);
    return Overhead(c, first_stage, last_stage);
  }
  STRATOS_CHECK(p < neighbour_slots_ && n < neighbour_slots_, "neighbour groups {} / {}",
                previous_group, next_group);
  return neighbour_overhead_[((static_cast<size_t>(c) * 4 + (first_stage ? 2 : 0) +
                               (last_stage ? 1 : 0)) *
                                  neighbour_slots_ +
                              p) *
                                 neighbour_slots_ +
                             n];
}

StageTerms StageTable::Terms(int first_layer, int last_layer, int config_index) const {
  StageTerms terms = Overhead(config_index, first_layer == 0, last_layer == num_layers_);
  for (int l = first_layer; l < last_layer; ++l) terms += Layer(l, config_index);
  return terms;
}

}  // namespace stratos
