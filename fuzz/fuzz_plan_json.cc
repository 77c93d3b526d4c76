// Plan JSON reader, then ValidatePlan and Evaluate on a fixed problem (4-block GPT, 2 x 8 GPUs
// and a second node group of 8 slower ones).
#include <nlohmann/json.hpp>

#include "fuzz/fuzz_util.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace stratos;
  static const Problem base = [] {
    Problem problem;
    problem.model = fuzz::FixedModel();
    problem.cluster = fuzz::FixedMixedCluster();
    return problem;
  }();
  nlohmann::json json;
  try {
    json = nlohmann::json::parse(fuzz::Text(data, size));
  } catch (const nlohmann::json::exception&) {
    return 0;  // ReadJsonInputFile turns this into an InputError naming the file
  }
  try {
    const Plan plan = PlanFromJson(json, "plan.json");
    Problem problem = base;
    problem.training.global_batch_size = plan.global_batch_size;
    (void)Evaluate(problem, plan);
  } catch (const InputError&) {
  }
  return 0;
}
