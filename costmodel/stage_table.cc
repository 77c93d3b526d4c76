#include "costmodel/stage_table.h"

#include <map>

#include "costmodel/error.h"

namespace stratos {

StageTable::StageTable(const CostModel& cost_model, const std::vector<StageConfig>& configs,
                       int num_microbatches, int previous_group, int next_group)
    : num_microbatches_(num_microbatches),
      num_layers_(cost_model.problem().NumLayers()),
      configs_(configs),
      valid_(configs.size(), 0) {
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
  }
}

StageTerms StageTable::Terms(int first_layer, int last_layer, int config_index) const {
  StageTerms terms = Overhead(config_index, first_layer == 0, last_layer == num_layers_);
  for (int l = first_layer; l < last_layer; ++l) terms += Layer(l, config_index);
  return terms;
}

}  // namespace stratos
