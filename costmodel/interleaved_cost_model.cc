#include "costmodel/interleaved_cost_model.h"

namespace stratos {

InterleavedCostModel::InterleavedCostModel(const Problem& problem, int virtual_stages)
    : problem_(std::make_unique<Problem>(problem)) {
  problem_->training.virtual_pipeline_stages = virtual_stages;
  ValidateTrainingSpec(problem_->training, "InterleavedCostModel");
  cost_model_ = std::make_unique<CostModel>(*problem_);
}

}  // namespace stratos
