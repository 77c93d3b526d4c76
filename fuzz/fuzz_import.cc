// The configuration importers (interop/interop.h): the first byte picks Megatron-LM arguments,
// a DeepSpeed engine JSON or a torchtitan TOML; what they accept becomes a plan on the fixed
// cluster (with the configuration's own model where it has one) and is evaluated.
#include "fuzz/fuzz_util.h"
#include "interop/interop.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace stratos;
  static const ClusterSpec cluster = fuzz::FixedCluster();
  if (size == 0) return 0;
  static const Target kTargets[] = {Target::kMegatron, Target::kDeepSpeed, Target::kTorchtitan};
  const Target target = kTargets[data[0] % 3];
  const std::string path = fuzz::ScratchDir() + "/config";
  fuzz::WriteFile(path, fuzz::Text(data + 1, size - 1));
  try {
    ImportedConfig imported = ImportConfig(target, path, cluster.NumDevices());
    Problem problem;
    problem.cluster = cluster;
    problem.model = imported.model.family.empty() ? fuzz::FixedModel() : imported.model;
    if (!imported.model.family.empty()) BuildTransformerLayers(problem.model);
    if (imported.layout.blocks.empty()) imported.layout.blocks = {problem.model.num_layers};
    problem.training.global_batch_size = imported.layout.global_batch_size;
    const Plan plan = PlanFromLayout(problem, imported.layout, path);
    (void)Evaluate(problem, plan);
  } catch (const InputError&) {
  }
  return 0;
}
