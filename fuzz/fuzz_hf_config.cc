// HuggingFace config.json reader, then Evaluate of a one-stage plan on what it accepts.
#include "costmodel/model_io.h"
#include "fuzz/fuzz_util.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace stratos;
  static const ClusterSpec cluster = fuzz::FixedCluster();
  try {
    Problem problem;
    problem.model = ParseHfConfigJson(fuzz::Text(data, size), "config.json");
    problem.cluster = cluster;
    fuzz::EvaluateOneStage(problem, 8);
  } catch (const InputError&) {
  }
  return 0;
}
