#pragma once
// Achieved matmul (GEMM) efficiency as a function of the GEMM's shape (DESIGN.md §5, compute:
// "divided by peak x efficiency, where the efficiency is a function of the GEMM shape fitted
// from measurements"). The curve is DeviceSpec::matmul_curve (cluster.h), fitted by
// `stratos calibrate` (calibrate/matmul_fit.h); without it the device's scalar
// matmul_efficiency applies, as before calibration existed.
#include "costmodel/cluster.h"
#include "costmodel/model.h"

namespace stratos {

// A GEMM (m x k) @ (k x n); sizes in elements. All 0: unknown shape.
struct GemmShape {
  double m = 0;
  double n = 0;
  double k = 0;

  double Flops() const { return 2.0 * m * n * k; }
  bool Known() const { return m > 0 && n > 0 && k > 0; }
};

// Seconds of one GEMM of `shape` under `curve` on a device of `peak_flops` FLOP/s:
//   2mnk / (peak * max_efficiency) * (1 + half_efficiency_dim / min(m, n, k)) + overhead.
// Requires shape.Known().
double MatmulSeconds(const MatmulCurve& curve, double peak_flops, const GemmShape& shape);

// Share of device.peak_flops that a GEMM of `shape` achieves: Flops / (peak * MatmulSeconds)
// with the device's matmul_curve, or device.matmul_efficiency when it has none or the shape is
// unknown. In (0, 1].
double MatmulEfficiency(const DeviceSpec& device, const GemmShape& shape);

// The GEMM that stands for a layer's FLOPs when `samples` sequences go through it on one of
// `tensor_parallel` ranks: for a transformer block its MLP up-projection
// (samples * seq_length) x hidden @ hidden x (ffn_hidden_size / tp), the block's largest GEMM
// (Megatron column-parallel split); for the head the LM head, hidden x (vocab / tp). Unknown
// (all 0) for embeddings (no GEMM), explicit layers and models without a transformer shape.
// Depends only on the layer, the microbatch and TP, so a stage's compute stays a sum over its
// layers.
GemmShape LayerGemmShape(const ModelSpec& model, const LayerSpec& layer, double samples,
                         int tensor_parallel);

}  // namespace stratos
