#pragma once
// Small builders shared by the validation reports: a GPT model from a published table row, a
// zoo cluster with a node count, a stage's mesh from its DP x TP degrees.
#include <string>
#include <vector>

#include "costmodel/cluster.h"
#include "costmodel/model.h"
#include "costmodel/plan.h"
#include "costmodel/stage_config.h"

namespace stratos {

// A GPT (learned positions, LayerNorm, GeLU MLP of 4h, tied embeddings) with these shapes,
// expanded into [embedding, layers x block, head]. Throws InputError for impossible shapes.
ModelSpec GptModel(const std::string& name, int hidden_size, int num_attention_heads,
                   int num_layers, int seq_length, int vocab_size);

// The zoo cluster `name` (data/clusters/<name>.toml) with `num_nodes` nodes.
ClusterSpec ZooCluster(const std::string& name, int num_nodes);

// The device of the cluster's first node group (the one a homogeneous cluster prices). Throws
// InternalError if the device catalog lacks it (ReadClusterFile makes that impossible).
DeviceSpec& PricedDevice(ClusterSpec& cluster);

// A stage of dp x tp devices: one node's first dp*tp GPUs if they fit in a node, else whole
// nodes. Throws InputError naming `where` if dp x tp neither fits a node nor fills whole nodes.
StageConfig StageOnDevices(const ClusterSpec& cluster, int data_parallel, int tensor_parallel,
                           int zero_stage, Recompute recompute, const std::string& where);

// Megatron-LM's placement of a GPT's layer list [embedding, block 0 .. block L-1, head] on p
// pipeline stages: L / p blocks per stage (the last stage takes the remainder), the embedding on
// the first stage and the head on the last; every stage gets `config`.
std::vector<StagePlan> MegatronStages(int num_blocks, int pipeline_parallel,
                                      const StageConfig& config);

}  // namespace stratos
