#pragma once
// Achieved matmul (GEMM) efficiency as a function of the GEMM's shape (DESIGN.md §5, compute:
// "divided by peak x efficiency, where the efficiency is a function of the GEMM shape fitted
// from measurements"). The curve is DeviceSpec::matmul_curve (cluster.h), fitted by
// `stratos calibrate` (calibrate/matmul_fit.h); without it the device's scalar
// matmul_efficiency applies, as before calibration existed.
#include <vector>

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
// `tensor_parallel` ranks, where the layer is priced at one efficiency (a device without a GEMM
// curve, the LM head, one operator of a block; a whole block on a device with a curve is priced
// GEMM by GEMM, TransformerBlockGemms): for a transformer block its MLP up-projection
// (samples * seq_length) x hidden @ hidden x (ffn_hidden_size / tp), the block's largest GEMM
// (Megatron column-parallel split); for the head the LM head, hidden x (vocab / tp). Unknown
// (all 0) for embeddings (no GEMM), explicit layers and models without a transformer shape.
// Depends only on the layer, the microbatch and TP, so a stage's compute stays a sum over its
// layers.
GemmShape LayerGemmShape(const ModelSpec& model, const LayerSpec& layer, double samples,
                         int tensor_parallel);

// The GEMMs of one forward pass of a transformer block through `samples` sequences on one of
// `tensor_parallel` ranks (Megatron's column/row-parallel split, Narayanan et al. SC'21 §3.2):
// dense = the QKV projection tokens x (h + 2 hkv)/tp @ h, the output projection tokens x h @
// h/tp, and the MLP (GeLU: fc1 tokens x f/tp @ h and fc2 tokens x h @ f/tp; SwiGLU: gate and up
// tokens x f/tp @ h, down tokens x h @ f/tp), with tokens = samples * seq_length; attention = one
// head's score GEMM QK^T, s x s @ d (d = h / heads), done attention_batch = samples * heads / tp
// times, and attention x V, s x d @ s, as often (the same FLOPs). Their FLOPs add up to the
// block's LayerSpec::forward_flops * samples / tp (model.cc, Megatron SC'21 appendix).
// Requires a transformer shape (hidden_size, heads, seq_length > 0) and tensor_parallel >= 1.
struct BlockGemms {
  std::vector<GemmShape> dense;
  GemmShape attention;
  double attention_batch = 0;

  double DenseFlops() const;
  // QK^T and attention x V over every head of every sample: 2 * attention_batch * 2 s^2 d.
  double AttentionFlops() const { return 2.0 * attention_batch * attention.Flops(); }
};
BlockGemms TransformerBlockGemms(const ModelSpec& model, double samples, int tensor_parallel);

// Forward seconds of a block's attention core (both batched GEMMs, and between them the softmax
// when it is materialized) on `device`: a roofline, max(FLOPs / (peak * e), bytes / HBM
// bandwidth), plus the matmul curve's per-GEMM overhead per kernel, where e is the curve's
// asymptote (the device's scalar matmul_efficiency without a curve). A batched GEMM fills the
// device through its batch, so the curve's small-dimension knee does not apply; its arithmetic
// intensity, bounded by the head dimension, does. Bytes (2 per element, per rank): Q, K, V read
// and the context written, s (2h + 2hkv) per sample; with `materialized` scores also the scores
// written by QK^T and the probabilities read by attention x V, 2 * 2 a s^2 per sample (the
// softmax and dropout between them are the activation roofline's, cost_model.cc). FlashAttention
// (materialized = false) is one kernel, the materialized core two.
double AttentionCoreSeconds(const DeviceSpec& device, const ModelSpec& model, double samples,
                            int tensor_parallel, bool materialized);

}  // namespace stratos
