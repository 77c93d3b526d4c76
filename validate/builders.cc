#include "validate/builders.h"

#include <fmt/format.h>

#include "costmodel/cluster_io.h"
#include "costmodel/error.h"
#include "costmodel/zoo.h"

namespace stratos {

ModelSpec GptModel(const std::string& name, int hidden_size, int num_attention_heads,
                   int num_layers, int seq_length, int vocab_size) {
  ModelSpec model;
  model.name = name;
  model.family = "gpt";
  model.source = name;
  model.hidden_size = hidden_size;
  model.num_attention_heads = num_attention_heads;
  model.num_key_value_heads = num_attention_heads;
  model.num_layers = num_layers;
  model.ffn_hidden_size = 4 * hidden_size;
  model.seq_length = seq_length;
  model.max_position_embeddings = seq_length;
  model.vocab_size = vocab_size;
  model.tie_word_embeddings = true;
  BuildTransformerLayers(model);
  return model;
}

DeviceSpec& PricedDevice(ClusterSpec& cluster) {
  const std::string& name = cluster.node_groups.at(0).device;
  for (DeviceSpec& device : cluster.devices)
    if (device.name == name) return device;
  throw InternalError(fmt::format("cluster {}: no device {}", cluster.name, name));
}

ClusterSpec ZooCluster(const std::string& name, int num_nodes) {
  return ReadClusterFile(ResolveClusterPath(name)).WithNodes(num_nodes);
}

StageConfig StageOnDevices(const ClusterSpec& cluster, int data_parallel, int tensor_parallel,
                           int zero_stage, Recompute recompute, const std::string& where) {
  const int devices = data_parallel * tensor_parallel;
  const int gpus_per_node = cluster.GpusPerNode();
  StageConfig config;
  if (devices <= gpus_per_node) {
    config.mesh_nodes = 1;
    config.mesh_gpus_per_node = devices;
  } else {
    if (devices % gpus_per_node != 0)
      ThrowInputError(where, "dp x tp", devices,
                      fmt::format("must fit in a node or fill whole nodes of {} GPUs",
                                  gpus_per_node));
    config.mesh_nodes = devices / gpus_per_node;
    config.mesh_gpus_per_node = gpus_per_node;
  }
  config.data_parallel = data_parallel;
  config.tensor_parallel = tensor_parallel;
  config.zero_stage = zero_stage;
  config.recompute = recompute;
  return config;
}

std::vector<StagePlan> MegatronStages(int num_blocks, int pipeline_parallel,
                                      const StageConfig& config) {
  const int L = num_blocks, p = pipeline_parallel;
  std::vector<StagePlan> stages;
  for (int s = 0; s < p; ++s) {
    const int first = s == 0 ? 0 : 1 + s * (L / p);
    const int last = s == p - 1 ? L + 2 : 1 + (s + 1) * (L / p);
    stages.push_back({first, last, config});
  }
  return stages;
}

}  // namespace stratos
