#pragma once
// Model description: the layer list that the cost model partitions into pipeline stages.
//
// A model is a chain of layers. Transformer families ("gpt", "llama", "bert") are expanded into
// [embedding, num_layers x transformer block, head]; "explicit" models list their layers.
// Every quantity is per sample (one sequence of seq_length tokens) and for the whole layer
// (no tensor parallelism); the cost model scales by microbatch size and parallel degrees.
#include <string>
#include <vector>

namespace stratos {

enum class LayerKind { kEmbedding, kTransformer, kHead, kExplicit };

const char* LayerKindName(LayerKind kind);

// The fp32 softmax a head's vocabulary-parallel cross entropy keeps for its backward pass, and
// the half-precision logits its GEMM writes, bytes per logit (Megatron-LM
// vocab_parallel_cross_entropy; cost_model.h prices the passes between them).
inline constexpr double kStoredSoftmaxBytesPerLogit = 4;
inline constexpr double kHalfLogitBytes = 2;

struct LayerSpec {
  std::string name;
  LayerKind kind = LayerKind::kExplicit;
  // Layers with equal cost_class have identical costs under every stage configuration; the
  // relaxation and the DP use it to share tables (all transformer blocks of a model share one).
  int cost_class = 0;

  // GEMM FLOPs of one forward pass for one sample (Megatron SC'21 appendix: a transformer block
  // does 24 s h^2 + 4 s^2 h with ffn = 4h; generalized to GQA and any ffn size).
  double forward_flops = 0;
  // Of forward_flops, the attention-score part (QK^T and attention x V, 4 s^2 h) that selective
  // recomputation redoes in the backward pass (Korthikanti et al. 2022, Sec. 5).
  double attention_flops = 0;
  // Unique parameters of the layer (what a published parameter count sums).
  double param_count = 0;
  // Parameters the stage holding this layer stores. Differs from param_count for a head with
  // tied embeddings: like Megatron-LM, the last stage keeps its own copy of the word embeddings.
  double stored_param_count = 0;
  // How many of the layer's parameter tensors are vectors (biases, norms' weights and biases),
  // counted where the parameters are: ZeRO-3 gathers each tensor on its own
  // (compression.h LayerParameterTensorElements). 0 for explicit layers.
  int vector_param_tensors = 0;

  // Activation bytes kept for the backward pass, per sample, without recomputation, split as in
  // Korthikanti et al. 2022 (Table 2): for a GPT block 10 s h (LayerNorm inputs, dropout masks,
  // replicated across TP ranks without sequence parallelism) + 24 s h (split by TP) + 5 a s^2
  // (attention scores, split by TP, dropped by selective recomputation).
  double activation_replicated_bytes = 0;
  double activation_sharded_bytes = 0;
  double activation_attention_bytes = 0;
  // Logits per sample a head layer computes (s x V; 0 for other layers), split by TP: the
  // cross entropy's transient (TrainingSpec::loss_transient_bytes_per_logit) and its HBM passes
  // (cost_model.h kCrossEntropyForwardBytesPerLogit) scale with them.
  double logits_per_sample = 0;
  // Bytes of the layer's input, per sample: what full recomputation keeps.
  double input_bytes = 0;
  // Bytes of the layer's output, per sample: what the next pipeline stage receives.
  double output_bytes = 0;
  // Tensor-parallel all-reduces of output_bytes per forward pass (Megatron: 2 per block); the
  // backward pass does as many again.
  int tp_allreduces_per_forward = 0;
  // One operator of a transformer block (MakeOperatorGranularityModel, kind kTransformer): its
  // GEMMs take the block's shape, but a device's block curve (cluster.h LayerCurve), fitted on
  // whole blocks, does not apply to it.
  bool block_operator = false;

  double ActivationBytes() const {
    return activation_replicated_bytes + activation_sharded_bytes + activation_attention_bytes;
  }
};

struct ModelSpec {
  // The most layers a model may hold (the readers refuse more): a bound on what every searcher
  // and Evaluate() must allocate per model, far above operator-granularity 1T-parameter models.
  static constexpr int kMaxLayers = 1 << 20;

  std::string name;
  std::string family;  // "gpt" | "llama" | "bert" | "explicit"
  std::string source;  // file it was read from, for error messages
  // Transformer shape (0 for explicit models).
  int hidden_size = 0;
  int num_layers = 0;  // transformer blocks
  int num_attention_heads = 0;
  int num_key_value_heads = 0;
  int ffn_hidden_size = 0;
  int vocab_size = 0;
  int seq_length = 0;
  int max_position_embeddings = 0;
  bool tie_word_embeddings = false;
  // Explicit models: one-time cost of each stage boundary (seconds per iteration), for the
  // seed's synthetic pipeline-partition problems. 0 for real models.
  double cut_cost_seconds = 0;
  // Backward FLOPs / forward FLOPs (2 for real layers: gradients w.r.t. inputs and weights).
  double backward_to_forward_ratio = 2.0;

  std::vector<LayerSpec> layers;

  int NumLayers() const { return static_cast<int>(layers.size()); }
  double ParameterCount() const;
  // Model FLOPs of one training step per sample (forward + backward, no recomputation).
  double TrainingFlopsPerSample() const;
  // max(cost_class) + 1: classes are indexable 0 .. NumCostClasses() - 1.
  int NumCostClasses() const;
};

// Expands a transformer family into its layer list, filling `layers` from the shape fields.
// Llama: SwiGLU MLP (3 h f), RMSNorm, rotary positions, GQA. GPT: GeLU MLP (2 h f), LayerNorm
// with bias, learned positions. BERT: GPT block + token types, pooler and MLM head.
// Fills defaults in place first (num_key_value_heads = heads, ffn_hidden_size = 4h,
// max_position_embeddings = seq_length). Throws InputError if the shape is impossible (heads not
// dividing hidden, kv heads not dividing heads, a size <= 0, an unknown family, more than
// kMaxLayers - 2 blocks, 4h above INT_MAX for the default FFN, or for gpt/bert seq_length >
// max_position_embeddings).
void BuildTransformerLayers(ModelSpec& model);

// The same model computing attention with FlashAttention (Dao et al., NeurIPS'22), as
// Megatron-Core with Transformer Engine and PyTorch's scaled_dot_product_attention on CUDA do:
// the attention scores and their dropout mask (5 a s^2 bytes per sample and layer, Korthikanti
// et al. 2022 Table 2) are never written to memory, neither stored for the backward pass nor
// streamed through HBM. Sets each transformer block's activation_attention_bytes to 0; its model
// FLOPs are unchanged (the time of its kernel, causal tiles skipped and the scores recomputed in
// backward: cost_model.h FlashAttentionComputedShare, kFlashAttentionBackwardToForward).
void UseFlashAttention(ModelSpec& model);

}  // namespace stratos
