#pragma once
// Shared by the libFuzzer harnesses: a fixed problem to evaluate what a reader accepts, and a
// scratch directory for readers that take files. Only InputError is an expected outcome; any
// other exception escapes and libFuzzer reports it as a crash.
#include <stdlib.h>
#include <unistd.h>

#include <cstdint>
#include <filesystem>
#include <fstream>
#include <string>
#include <string_view>

#include "costmodel/cluster_io.h"
#include "costmodel/error.h"
#include "costmodel/evaluate.h"
#include "costmodel/model.h"
#include "costmodel/plan.h"

namespace stratos::fuzz {

inline std::string_view Text(const uint8_t* data, size_t size) {
  return {reinterpret_cast<const char*>(data), size};
}

// Two nodes of 8 A100-like GPUs on two network levels.
inline ClusterSpec FixedCluster() {
  return ParseClusterToml(R"(
[cluster]
name = "fuzz"
[[device]]
name = "gpu"
peak_TFLOPS = 312
memory_GB = 80
hbm_GBps = 2039
[[node_group]]
count = 2
gpus_per_node = 8
device = "gpu"
[[network]]
name = "nvlink"
bandwidth_GBps = 232
latency_us = 5
[[network]]
name = "ib"
bandwidth_GBps = 192
latency_us = 10
)",
                          "fixed cluster");
}

// FixedCluster's two nodes as one node group, and a second group of one node of 8 slower GPUs
// on levels of its own, so that plans may place stages in either group.
inline ClusterSpec FixedMixedCluster() {
  return ParseClusterToml(R"(
[cluster]
name = "fuzz-mixed"
[[device]]
name = "gpu"
peak_TFLOPS = 312
memory_GB = 80
hbm_GBps = 2039
[[device]]
name = "slow"
peak_TFLOPS = 125
memory_GB = 16
hbm_GBps = 900
[[node_group]]
count = 2
gpus_per_node = 8
device = "gpu"
[[node_group]]
count = 1
gpus_per_node = 8
device = "slow"
intra_node_network = "pcie"
inter_node_network = "eth"
[[network]]
name = "nvlink"
bandwidth_GBps = 232
latency_us = 5
[[network]]
name = "ib"
bandwidth_GBps = 192
latency_us = 10
[[network]]
name = "pcie"
bandwidth_GBps = 12
latency_us = 5
[[network]]
name = "eth"
bandwidth_GBps = 3.125
latency_us = 30
)",
                          "fixed mixed cluster");
}

// A 4-block GPT.
inline ModelSpec FixedModel() {
  ModelSpec model;
  model.name = "fuzz-gpt";
  model.family = "gpt";
  model.hidden_size = 256;
  model.num_layers = 4;
  model.num_attention_heads = 8;
  model.vocab_size = 1000;
  model.seq_length = 128;
  BuildTransformerLayers(model);
  return model;
}

// Evaluates the plan that holds every layer in one stage of `devices` data-parallel devices
// (one microbatch of `devices` samples) on `problem`'s cluster.
inline void EvaluateOneStage(Problem problem, int devices) {
  problem.training.global_batch_size = devices;
  Plan plan;
  plan.global_batch_size = devices;
  plan.num_microbatches = 1;
  StageConfig config;
  config.data_parallel = devices;
  if (!SetMeshForDevices(config, devices, problem.cluster.GpusPerNode())) return;
  plan.stages.push_back({0, problem.NumLayers(), config});
  (void)Evaluate(problem, plan);
}

// A directory of this process, removed at exit.
inline const std::string& ScratchDir() {
  struct Dir {
    std::string path;
    Dir() {
      std::string templ = (std::filesystem::temp_directory_path() / "stratos_fuzz_XXXXXX").string();
      path = mkdtemp(templ.data()) ? templ : std::string();
    }
    ~Dir() {
      std::error_code ignored;
      if (!path.empty()) std::filesystem::remove_all(path, ignored);
    }
  };
  static const Dir dir;
  return dir.path;
}

inline void WriteFile(const std::string& path, std::string_view text) {
  std::ofstream(path, std::ios::binary | std::ios::trunc) << text;
}

}  // namespace stratos::fuzz
