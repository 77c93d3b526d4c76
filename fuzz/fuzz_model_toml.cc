// Model TOML reader, then Evaluate of a one-stage plan on what it accepts.
#include "costmodel/model_io.h"
#include "fuzz/fuzz_util.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace stratos;
  static const ClusterSpec cluster = fuzz::FixedCluster();
  try {
    Problem problem;
    problem.model = ParseModelToml(fuzz::Text(data, size), "fuzz.toml");
    problem.cluster = cluster;
    fuzz::EvaluateOneStage(problem, 1);
    fuzz::EvaluateOneStage(problem, 16);
  } catch (const InputError&) {
  }
  return 0;
}
