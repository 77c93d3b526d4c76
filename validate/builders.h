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

// The same model computing attention with FlashAttention (Dao et al., NeurIPS'22), as
// Megatron-Core with Transformer Engine does: the attention scores and their dropout mask
// (5 a s^2 bytes per sample and layer, Korthikanti et al. 2022 Table 2) are never written to
// memory, neither stored for the backward pass nor streamed through HBM. Sets each transformer
// block's activation_attention_bytes to 0; its FLOPs are unchanged (FlashAttention's extra
// backward QK^T, 2 s^2 h per sample and layer, is not counted).
void UseFlashAttention(ModelSpec& model);

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
