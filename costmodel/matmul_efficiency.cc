#include "costmodel/matmul_efficiency.h"

#include <algorithm>

#include "costmodel/error.h"

namespace stratos {

double MatmulSeconds(const MatmulCurve& curve, double peak_flops, const GemmShape& shape) {
  STRATOS_CHECK(shape.Known(), "GEMM shape {}x{}x{}", shape.m, shape.n, shape.k);
  const double smallest = std::min({shape.m, shape.n, shape.k});
  return shape.Flops() / (peak_flops * curve.max_efficiency) *
             (1.0 + curve.half_efficiency_dim / smallest) +
         curve.overhead_seconds;
}

double MatmulEfficiency(const DeviceSpec& device, const GemmShape& shape) {
  if (!device.matmul_curve || !shape.Known()) return device.matmul_efficiency;
  return shape.Flops() /
         (device.peak_flops * MatmulSeconds(*device.matmul_curve, device.peak_flops, shape));
}

GemmShape LayerGemmShape(const ModelSpec& model, const LayerSpec& layer, double samples,
                         int tensor_parallel) {
  if (model.hidden_size <= 0 || model.seq_length <= 0 || tensor_parallel < 1) return {};
  const double tokens = samples * model.seq_length;
  switch (layer.kind) {
    case LayerKind::kTransformer:
      return {tokens, static_cast<double>(model.ffn_hidden_size) / tensor_parallel,
              static_cast<double>(model.hidden_size)};
    case LayerKind::kHead:
      return {tokens, static_cast<double>(model.vocab_size) / tensor_parallel,
              static_cast<double>(model.hidden_size)};
    case LayerKind::kEmbedding:
    case LayerKind::kExplicit:
      break;
  }
  return {};
}

double BlockGemms::DenseFlops() const {
  double flops = 0;
  for (const GemmShape& shape : dense) flops += shape.Flops();
  return flops;
}

BlockGemms TransformerBlockGemms(const ModelSpec& model, double samples, int tensor_parallel) {
  STRATOS_CHECK(model.hidden_size > 0 && model.num_attention_heads > 0 && model.seq_length > 0 &&
                    tensor_parallel >= 1,
                "transformer shape h={} heads={} s={} tp={}", model.hidden_size,
                model.num_attention_heads, model.seq_length, tensor_parallel);
  const double tp = tensor_parallel;
  const double h = model.hidden_size;
  const double heads = model.num_attention_heads;
  const double d = h / heads;
  const double kv = model.num_key_value_heads > 0 ? model.num_key_value_heads : heads;
  const double f = model.ffn_hidden_size > 0 ? model.ffn_hidden_size : 4 * h;
  const double s = model.seq_length;
  const double tokens = samples * s;
  BlockGemms gemms;
  gemms.dense.push_back({tokens, (h + 2 * kv * d) / tp, h});  // QKV
  gemms.dense.push_back({tokens, h, h / tp});                 // output projection
  if (model.family == "llama") {
    gemms.dense.push_back({tokens, f / tp, h});  // gate
    gemms.dense.push_back({tokens, f / tp, h});  // up
  } else {
    gemms.dense.push_back({tokens, f / tp, h});  // fc1
  }
  gemms.dense.push_back({tokens, h, f / tp});  // fc2 / down
  gemms.attention = {s, s, d};
  gemms.attention_batch = samples * heads / tp;
  return gemms;
}

double AttentionCoreSeconds(const DeviceSpec& device, const ModelSpec& model, double samples,
                            int tensor_parallel, bool materialized) {
  const BlockGemms gemms = TransformerBlockGemms(model, samples, tensor_parallel);
  const double tp = tensor_parallel;
  const double h = model.hidden_size;
  const double s = model.seq_length;
  const double heads = model.num_attention_heads;
  const double kv = model.num_key_value_heads > 0 ? model.num_key_value_heads : heads;
  const double hkv = kv * h / heads;
  constexpr double kElementBytes = 2;
  double bytes = kElementBytes * samples * s * (2 * h + 2 * hkv) / tp;
  if (materialized) bytes += 2 * kElementBytes * samples * heads * s * s / tp;
  const double efficiency =
      device.matmul_curve ? device.matmul_curve->max_efficiency : device.matmul_efficiency;
  const double kernels = materialized ? 2 : 1;
  const double overhead = device.matmul_curve ? device.matmul_curve->overhead_seconds : 0.0;
  return std::max(gemms.AttentionFlops() / (device.peak_flops * efficiency),
                  bytes / device.hbm_bytes_per_second) +
         kernels * overhead;
}

}  // namespace stratos
