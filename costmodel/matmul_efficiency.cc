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

}  // namespace stratos
