#include "costmodel/generators.h"

#include <fmt/format.h>

#include <cmath>
#include <random>

#include "costmodel/error.h"

namespace stratos {

void NonUniformModelOptions::Validate() const {
  // Named as the keys of a spec's nonuniform family (experiments/experiment_spec.h).
  if (num_layers < 1 || num_layers > (1 << 20))
    ThrowOptionError("layers", num_layers, "must be in [1, 1048576]");
  if (!(spread_decades >= 0 && spread_decades <= 12))
    ThrowOptionError("spread_decades", spread_decades, "must be in [0, 12]");
  if (hidden_size < 128 || hidden_size % 128 != 0)
    ThrowOptionError("hidden_size", hidden_size, "must be a multiple of 128, >= 128");
  if (seq_length < 1) ThrowOptionError("seq_length", seq_length, "must be >= 1");
}

ModelSpec MakeNonUniformModel(const NonUniformModelOptions& options, std::uint64_t seed) {
  options.Validate();
  ModelSpec shape;
  shape.name = "base";
  shape.family = "gpt";
  shape.hidden_size = options.hidden_size;
  shape.num_layers = 1;
  shape.num_attention_heads = options.hidden_size / 128;
  shape.vocab_size = 51200;
  shape.seq_length = options.seq_length;
  BuildTransformerLayers(shape);
  const LayerSpec& base = shape.layers.at(1);

  std::mt19937_64 rng(seed * 0x9E3779B97F4A7C15ULL + 0x5EED);
  // 10^(d (u - 1/2)) with u uniform in [0, 1) from the top 53 bits.
  auto factor = [&]() {
    const double u = static_cast<double>(rng() >> 11) * 0x1.0p-53;
    return std::pow(10.0, options.spread_decades * (u - 0.5));
  };
  ModelSpec model;
  model.name = fmt::format("nonuniform-L{}-s{}", options.num_layers, seed);
  model.family = "explicit";
  model.source = fmt::format("generated: MakeNonUniformModel(layers {}, spread {} decades, seed {})",
                             options.num_layers, options.spread_decades, seed);
  model.seq_length = options.seq_length;
  double previous_output = base.input_bytes;
  for (int l = 0; l < options.num_layers; ++l) {
    const double flops = factor(), params = factor(), activations = factor(), output = factor();
    LayerSpec layer;
    layer.name = fmt::format("layer.{}", l);
    layer.kind = LayerKind::kExplicit;
    layer.cost_class = l;
    layer.forward_flops = base.forward_flops * flops;
    layer.attention_flops = base.attention_flops * flops;
    layer.param_count = base.param_count * params;
    layer.stored_param_count = layer.param_count;
    layer.activation_replicated_bytes = base.activation_replicated_bytes * activations;
    layer.activation_sharded_bytes = base.activation_sharded_bytes * activations;
    layer.activation_attention_bytes = base.activation_attention_bytes * activations;
    layer.input_bytes = previous_output;
    layer.output_bytes = base.output_bytes * output;
    layer.tp_allreduces_per_forward = base.tp_allreduces_per_forward;
    previous_output = layer.output_bytes;
    model.layers.push_back(layer);
  }
  return model;
}

ModelSpec MakeOperatorGranularityModel(const ModelSpec& model) {
  if (model.family != "gpt" && model.family != "llama")
    ThrowInputError(model.source.empty() ? model.name : model.source, "model.family",
                    fmt::format("\"{}\"", model.family),
                    "operator granularity needs a gpt or llama transformer");
  const bool llama = model.family == "llama";
  const double h = model.hidden_size, s = model.seq_length, f = model.ffn_hidden_size;
  const double a = model.num_attention_heads;
  const double hkv = model.num_key_value_heads * (h / a);
  constexpr double kBytes = 2;  // bf16 activations, as BuildTransformerLayers

  // One block's sublayers; fields not set are 0.
  auto sub = [&](const char* name, int cls) {
    LayerSpec layer;
    layer.name = name;
    layer.kind = LayerKind::kTransformer;
    layer.cost_class = cls;
    return layer;
  };
  std::vector<LayerSpec> block;
  LayerSpec ln1 = sub("ln1", 1);
  ln1.param_count = llama ? h : 2 * h;
  ln1.activation_replicated_bytes = kBytes * s * h;  // its input
  ln1.input_bytes = kBytes * s * h;                  // the block input (full recomputation)
  ln1.output_bytes = kBytes * s * h;
  block.push_back(ln1);
  LayerSpec qkv = sub("qkv", 2);
  qkv.param_count = h * h + 2 * h * hkv + (llama ? 0 : h + 2 * hkv);
  qkv.forward_flops = 2 * s * (h * h + 2 * h * hkv);
  qkv.activation_replicated_bytes = kBytes * s * h;  // its input (the norm's output)
  qkv.output_bytes = kBytes * s * (h + 2 * hkv);
  block.push_back(qkv);
  LayerSpec attention = sub("attention", 3);
  attention.attention_flops = 4 * s * s * h;
  attention.forward_flops = attention.attention_flops;
  attention.activation_sharded_bytes = s * (2 * h + 4 * hkv);  // q, k, v
  attention.activation_attention_bytes = 5 * a * s * s;       // softmax, dropout mask and output
  attention.output_bytes = kBytes * s * h;
  block.push_back(attention);
  LayerSpec out_proj = sub("out_proj", 4);
  out_proj.param_count = h * h + (llama ? 0 : h);
  out_proj.forward_flops = 2 * s * h * h;
  out_proj.activation_sharded_bytes = 2 * s * h;  // its input (the attention output)
  out_proj.output_bytes = kBytes * s * h;
  out_proj.tp_allreduces_per_forward = 1;
  block.push_back(out_proj);
  LayerSpec residual1 = sub("residual1", 5);
  residual1.activation_replicated_bytes = s * h;  // dropout mask
  residual1.output_bytes = kBytes * s * h;
  block.push_back(residual1);
  LayerSpec ln2 = sub("ln2", 6);
  ln2.param_count = llama ? h : 2 * h;
  ln2.activation_replicated_bytes = kBytes * s * h;
  ln2.output_bytes = kBytes * s * h;
  block.push_back(ln2);
  LayerSpec mlp_up = sub("mlp_up", 7);
  mlp_up.param_count = (llama ? 2 : 1) * h * f + (llama ? 0 : f);
  mlp_up.forward_flops = 2 * s * (llama ? 2 : 1) * h * f;
  mlp_up.activation_replicated_bytes = kBytes * s * h;  // its input
  mlp_up.output_bytes = kBytes * s * (llama ? 2 : 1) * f;
  block.push_back(mlp_up);
  LayerSpec activation = sub("activation", 8);
  activation.activation_sharded_bytes = (llama ? 4 : 2) * s * f;  // fc1 (gate and up) outputs
  activation.output_bytes = kBytes * s * f;
  block.push_back(activation);
  LayerSpec mlp_down = sub("mlp_down", 9);
  mlp_down.param_count = h * f + (llama ? 0 : h);
  mlp_down.forward_flops = 2 * s * h * f;
  mlp_down.activation_sharded_bytes = 2 * s * f;  // its input
  mlp_down.output_bytes = kBytes * s * h;
  block.push_back(mlp_down);
  LayerSpec residual2 = sub("residual2", 10);
  residual2.activation_replicated_bytes = s * h;  // dropout mask
  residual2.output_bytes = kBytes * s * h;
  residual2.tp_allreduces_per_forward = 1;
  block.push_back(residual2);
  for (LayerSpec& layer : block) layer.stored_param_count = layer.param_count;

  ModelSpec out = model;
  out.name = model.name + "-ops";
  out.layers.clear();
  const int block_classes = static_cast<int>(block.size());
  for (const LayerSpec& layer : model.layers) {
    if (layer.kind != LayerKind::kTransformer) {
      LayerSpec copy = layer;
      copy.cost_class = layer.kind == LayerKind::kEmbedding ? 0 : block_classes + 1;
      out.layers.push_back(copy);
      continue;
    }
    for (const LayerSpec& part : block) {
      LayerSpec copy = part;
      copy.name = layer.name + "." + part.name;
      copy.block_operator = true;
      out.layers.push_back(copy);
    }
  }
  return out;
}

}  // namespace stratos
