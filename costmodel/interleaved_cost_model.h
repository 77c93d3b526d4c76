#pragma once
// The cost model of a problem whose pipeline ranks each hold v model chunks (the interleaved 1F1B
// schedule, Narayanan et al. SC'21 §2.2.2): the problem with training.virtual_pipeline_stages = v,
// so that its stage overheads send v times (CostModel::StageOverhead). Where a rank of v chunks
// prices as its plain stage (plan.h InterleavesExactly) the searchers price their ranks with it.
#include <memory>

#include "costmodel/cost_model.h"

namespace stratos {

class InterleavedCostModel {
 public:
  // Copies `problem` with `virtual_stages` chunks per rank. Throws InputError if
  // virtual_stages < 1 (ValidateTrainingSpec's rule).
  InterleavedCostModel(const Problem& problem, int virtual_stages);
  const CostModel& cost_model() const { return *cost_model_; }
  const Problem& problem() const { return *problem_; }

 private:
  std::unique_ptr<Problem> problem_;  // on the heap: the CostModel refers to its address
  std::unique_ptr<CostModel> cost_model_;
};

}  // namespace stratos
