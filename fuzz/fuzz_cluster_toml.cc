// Cluster TOML reader, then Evaluate of a fixed GPT on what it accepts (one stage on one
// device, on a node, on every device).
#include "costmodel/cluster_io.h"
#include "fuzz/fuzz_util.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace stratos;
  static const ModelSpec model = fuzz::FixedModel();
  try {
    Problem problem;
    problem.model = model;
    problem.cluster = ParseClusterToml(fuzz::Text(data, size), "fuzz.toml");
    fuzz::EvaluateOneStage(problem, 1);
    fuzz::EvaluateOneStage(problem, problem.cluster.GpusPerNode());
    fuzz::EvaluateOneStage(problem, problem.NumDevices());
  } catch (const InputError&) {
  }
  return 0;
}
