#pragma once
// Seeded instance generators for experiments and tests (experiments/specs): explicit models with
// non-uniform layers, and the operator-granularity view of transformer models. Deterministic per
// seed on every platform (std::mt19937_64 with our own mapping to [0, 1)).
#include <cstdint>

#include "costmodel/model.h"

namespace stratos {

struct NonUniformModelOptions {
  // Layers; >= 1 (the studies use 32 to 1024).
  int num_layers = 96;
  // Each per-layer quantity is drawn log-uniformly over [base * 10^(-d/2), base * 10^(d/2)],
  // independently per quantity and layer; >= 0 and <= 12.
  double spread_decades = 1.5;
  // The base (geometric-mean) layer is a GPT block of this hidden size and sequence length
  // (heads = hidden / 128), as BuildTransformerLayers gives it; >= 128 and >= 1.
  int hidden_size = 4096;
  int seq_length = 2048;

  // Throws InputError naming the field, its value and the rule.
  void Validate() const;
};

// An explicit model (family "explicit", name "nonuniform-L<layers>-s<seed>") whose layers draw
// their forward FLOPs (attention FLOPs in proportion), parameter count, activation bytes (all
// three Korthikanti components in proportion) and output bytes log-uniformly around the base
// block. Each layer's input bytes are the previous layer's output bytes (the first layer's: the
// base block's input); every layer does the base block's 2 TP all-reduces per forward and has a
// cost class of its own. Throws InputError for invalid options.
ModelSpec MakeNonUniformModel(const NonUniformModelOptions& options, std::uint64_t seed);

// The operator-granularity view of a transformer model (as Alpa's layer construction sees it):
// every transformer block of `model` (gpt or llama, expanded by BuildTransformerLayers) becomes
// its 10 sublayers, in order:
//   ln1, qkv (projection), attention (QK^T, softmax, x V), out_proj, residual1 (dropout + add),
//   ln2, mlp_up (fc1; SwiGLU: gate and up), activation (GeLU / SwiGLU), mlp_down (fc2),
//   residual2 (dropout + add).
// FLOPs (Megatron SC'21 appendix, 2 x tokens x matmul parameters; 4 s^2 h for attention) and
// parameters go to the sublayer that owns them; the activation bytes of Korthikanti et al. 2022
// Table 2 go to the sublayer that stores them (replicated 10 s h: the two norm inputs, the qkv and
// mlp_up inputs, the two dropout masks; sharded: q, k, v to attention, its output to out_proj,
// the f-wide tensors to activation and mlp_down; 5 a s^2 to attention). The block's 2 TP
// all-reduces sit on out_proj and residual2 (h-wide messages, as the block's). Only ln1 keeps
// the block input for full recomputation (Megatron checkpoints a block at its input). Output
// bytes are each sublayer's output tensor: what a pipeline cut after it sends (the residual
// stream that a real cut inside a block would also send is not counted). Sublayers keep
// LayerKind::kTransformer, so the GEMM-efficiency shape is the block's and, by additivity, a
// stage holding whole blocks costs what the block-level model says, except that full
// recomputation re-materializes one sublayer at a time instead of one block (less working
// memory; CostModel::StageOverhead). Every sublayer type shares
// one cost class across blocks. Sums over a block's sublayers equal the block: forward and
// attention FLOPs, parameters, each activation component, TP all-reduces. Name "<name>-ops".
// Throws InputError for a model that is not a gpt or llama transformer.
ModelSpec MakeOperatorGranularityModel(const ModelSpec& model);

}  // namespace stratos
