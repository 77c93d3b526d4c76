#include "costmodel/model.h"

#include <fmt/format.h>

#include <algorithm>
#include <climits>
#include <string>

#include "costmodel/error.h"

namespace stratos {

const char* LayerKindName(LayerKind kind) {
  switch (kind) {
    case LayerKind::kEmbedding:
      return "embedding";
    case LayerKind::kTransformer:
      return "transformer";
    case LayerKind::kHead:
      return "head";
    case LayerKind::kExplicit:
      return "explicit";
  }
  return "unknown";
}

double ModelSpec::ParameterCount() const {
  double total = 0;
  for (const LayerSpec& layer : layers) total += layer.param_count;
  return total;
}

double ModelSpec::TrainingFlopsPerSample() const {
  double forward = 0;
  for (const LayerSpec& layer : layers) forward += layer.forward_flops;
  return (1.0 + backward_to_forward_ratio) * forward;
}

int ModelSpec::NumCostClasses() const {
  int max_class = -1;
  for (const LayerSpec& layer : layers) max_class = std::max(max_class, layer.cost_class);
  return max_class + 1;
}

namespace {

constexpr double kActivationBytes = 2;  // bf16 activations

// Validated shape of a transformer, all sizes as doubles so that products do not overflow.
struct Shape {
  double h = 0;    // hidden size
  double a = 0;    // attention heads
  double hkv = 0;  // key/value width = kv heads * head dim (GQA)
  double f = 0;    // MLP hidden size
  double V = 0;    // vocabulary
  double s = 0;    // sequence length
  double P = 0;    // learned position embeddings (gpt, bert)
};

std::string Where(const ModelSpec& model) {
  return model.source.empty() ? std::string("model") : model.source;
}

void RequirePositive(const ModelSpec& model, const char* key, int value) {
  if (value < 1) ThrowInputError(Where(model), fmt::format("model.{}", key), value, "must be >= 1");
}

// Fills defaults (kv heads = heads, ffn = 4h, positions = seq) and checks that the shape is
// possible. Throws InputError naming the key, the value and the rule.
Shape ValidateShape(ModelSpec& model) {
  const std::string where = Where(model);
  const std::string& family = model.family;
  if (family != "gpt" && family != "llama" && family != "bert") {
    ThrowInputError(where, "model.family", fmt::format("\"{}\"", family),
                    "must be one of \"gpt\", \"llama\", \"bert\" to build transformer layers");
  }
  if (model.num_key_value_heads == 0) model.num_key_value_heads = model.num_attention_heads;
  if (model.ffn_hidden_size == 0) {
    if (model.hidden_size > INT_MAX / 4)
      ThrowInputError(where, "model.hidden_size", model.hidden_size,
                      "the default ffn_hidden_size 4 x hidden_size must be at most 2^31 - 1");
    model.ffn_hidden_size = 4 * model.hidden_size;
  }
  if (model.max_position_embeddings == 0) model.max_position_embeddings = model.seq_length;

  RequirePositive(model, "hidden_size", model.hidden_size);
  RequirePositive(model, "num_layers", model.num_layers);
  if (model.num_layers > ModelSpec::kMaxLayers - 2)
    ThrowInputError(where, "model.num_layers", model.num_layers,
                    fmt::format("must be at most {} (stratos models hold at most {} layers with "
                                "the embedding and the head)",
                                ModelSpec::kMaxLayers - 2, ModelSpec::kMaxLayers));
  RequirePositive(model, "num_attention_heads", model.num_attention_heads);
  RequirePositive(model, "num_key_value_heads", model.num_key_value_heads);
  RequirePositive(model, "ffn_hidden_size", model.ffn_hidden_size);
  RequirePositive(model, "vocab_size", model.vocab_size);
  RequirePositive(model, "seq_length", model.seq_length);
  RequirePositive(model, "max_position_embeddings", model.max_position_embeddings);
  if (model.hidden_size % model.num_attention_heads != 0) {
    ThrowInputError(where, "model.num_attention_heads", model.num_attention_heads,
                    fmt::format("must divide model.hidden_size = {}", model.hidden_size));
  }
  if (model.num_attention_heads % model.num_key_value_heads != 0) {
    ThrowInputError(
        where, "model.num_key_value_heads", model.num_key_value_heads,
        fmt::format("must divide model.num_attention_heads = {}", model.num_attention_heads));
  }
  // Learned absolute positions (GPT, BERT) cannot embed positions past the table; rotary
  // positions (Llama) have no table.
  if (family != "llama" && model.seq_length > model.max_position_embeddings) {
    ThrowInputError(where, "model.seq_length", model.seq_length,
                    fmt::format("must be <= model.max_position_embeddings = {} (learned positions)",
                                model.max_position_embeddings));
  }

  Shape shape;
  shape.h = model.hidden_size;
  shape.a = model.num_attention_heads;
  const double head_dim = shape.h / shape.a;
  shape.hkv = model.num_key_value_heads * head_dim;
  shape.f = model.ffn_hidden_size;
  shape.V = model.vocab_size;
  shape.s = model.seq_length;
  shape.P = model.max_position_embeddings;
  return shape;
}

LayerSpec Embedding(const ModelSpec& model, const Shape& x) {
  LayerSpec layer;
  layer.name = "embedding";
  layer.kind = LayerKind::kEmbedding;
  layer.cost_class = 0;
  double params = x.V * x.h;                                // word embeddings
  if (model.family != "llama") params += x.P * x.h;         // learned positions
  if (model.family == "bert") params += 2 * x.h + 2 * x.h;  // token types + LayerNorm
  if (model.family == "bert") layer.vector_param_tensors = 3;  // as HF BertEmbeddings holds them
  layer.param_count = params;
  layer.stored_param_count = params;
  layer.forward_flops = 0;  // a gather, no GEMM
  layer.activation_replicated_bytes = kActivationBytes * x.s * x.h;
  layer.input_bytes = 0;  // token ids, negligible
  layer.output_bytes = kActivationBytes * x.s * x.h;
  layer.tp_allreduces_per_forward = 1;  // vocab-parallel embedding (Megatron)
  return layer;
}

// One transformer block. FLOPs: Megatron SC'21 appendix (24 s h^2 + 4 s^2 h for ffn = 4h, no
// GQA), i.e. 2 s x (matmul parameters) + 4 s^2 h for QK^T and attention x V. Activations:
// Korthikanti et al. 2022 Table 2 (10 s h + 24 s h + 5 a s^2 bytes), with the 24 s h term
// generalized to GQA (K and V are hkv wide) and to any ffn size (gated MLPs keep 3 f-wide
// tensors instead of 2).
LayerSpec TransformerBlock(const ModelSpec& model, const Shape& x, int index) {
  const bool llama = model.family == "llama";
  LayerSpec layer;
  layer.name = fmt::format("block.{}", index);
  layer.kind = LayerKind::kTransformer;
  layer.cost_class = 1;
  const double attention_matmul = x.h * x.h + 2 * x.h * x.hkv + x.h * x.h;  // q, k, v, o
  const double mlp_matmul = (llama ? 3 : 2) * x.h * x.f;                    // SwiGLU : GeLU
  const double matmul = attention_matmul + mlp_matmul;
  double extra = 0;
  if (llama) {
    extra = 2 * x.h;  // two RMSNorm weights, no biases
    layer.vector_param_tensors = 2;
  } else {
    extra = (x.h + 2 * x.hkv) + x.h + x.f + x.h  // biases of qkv, o, fc1, fc2
            + 2 * (2 * x.h);                     // two LayerNorms (weight + bias)
    layer.vector_param_tensors = 4 + 2 * 2;
  }
  layer.param_count = matmul + extra;
  layer.stored_param_count = layer.param_count;
  layer.attention_flops = 4 * x.s * x.s * x.h;
  layer.forward_flops = 2 * x.s * matmul + layer.attention_flops;
  layer.activation_replicated_bytes = 10 * x.s * x.h;
  // q/k/v input and attention output (2h + 4hkv + 2h bytes per token), then the MLP's
  // f-wide tensors (2 for GeLU: fc1 output and GeLU output at 2 bytes; 3 for SwiGLU).
  layer.activation_sharded_bytes =
      x.s * (2 * x.h + 4 * x.hkv + 2 * x.h) + x.s * ((llama ? 6 : 4) * x.f);
  layer.activation_attention_bytes = 5 * x.a * x.s * x.s;
  layer.input_bytes = kActivationBytes * x.s * x.h;
  layer.output_bytes = kActivationBytes * x.s * x.h;
  layer.tp_allreduces_per_forward = 2;  // after attention and after the MLP (Megatron)
  return layer;
}

LayerSpec Head(const ModelSpec& model, const Shape& x) {
  LayerSpec layer;
  layer.name = "head";
  layer.kind = LayerKind::kHead;
  layer.cost_class = 2;
  const double lm_head = x.V * x.h;
  double params = 0;
  if (model.family == "gpt") {
    params = 2 * x.h;  // final LayerNorm
    layer.vector_param_tensors = 2;
  }
  if (model.family == "llama") {
    params = x.h;  // final RMSNorm
    layer.vector_param_tensors = 1;
  }
  if (model.family == "bert") {
    // Post-LN: no final norm. Pooler (dense + bias), MLM transform (dense + bias + LayerNorm),
    // decoder bias (HF BertModel + BertForMaskedLM head).
    params = (x.h * x.h + x.h) + (x.h * x.h + x.h) + 2 * x.h + x.V;
    layer.vector_param_tensors = 5;
  }
  layer.param_count = params + (model.tie_word_embeddings ? 0 : lm_head);
  // Megatron-LM keeps its own copy of tied word embeddings on the last pipeline stage.
  layer.stored_param_count = params + lm_head;
  layer.forward_flops = 2 * x.s * x.h * x.V;
  if (model.family == "bert") layer.forward_flops += 2 * x.s * x.h * x.h;  // MLM transform
  layer.activation_replicated_bytes = kActivationBytes * x.s * x.h;        // input of the lm_head
  // The fp32 softmax the vocabulary-parallel cross entropy keeps for its backward pass, split by
  // TP; its forward's transient (the half-precision logits beside it) is the training's
  // loss_transient_bytes_per_logit.
  layer.logits_per_sample = x.s * x.V;
  layer.activation_sharded_bytes = kStoredSoftmaxBytesPerLogit * layer.logits_per_sample;
  layer.input_bytes = kActivationBytes * x.s * x.h;
  layer.output_bytes = 0;
  layer.tp_allreduces_per_forward = 1;  // vocab-parallel cross entropy
  return layer;
}

}  // namespace

void UseFlashAttention(ModelSpec& model) {
  for (LayerSpec& layer : model.layers)
    if (layer.kind == LayerKind::kTransformer) layer.activation_attention_bytes = 0;
}

void BuildTransformerLayers(ModelSpec& model) {
  const Shape shape = ValidateShape(model);
  model.layers.clear();
  model.layers.reserve(model.num_layers + 2);
  model.layers.push_back(Embedding(model, shape));
  for (int i = 0; i < model.num_layers; ++i) {
    model.layers.push_back(TransformerBlock(model, shape, i));
  }
  model.layers.push_back(Head(model, shape));
}

}  // namespace stratos
