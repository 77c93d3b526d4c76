#pragma once
// Gradient compression for data-parallel gradient synchronization (DESIGN.md §1, §5): what each
// scheme puts on the wire and what it costs to compress and decompress. No LibTorch here; the
// compressors themselves are in runtime/compression.h.
//
// Schemes and their collectives. A compressed form can ride a ring all-reduce only when sums of
// compressed forms are compressed forms of the sum:
//   bf16 / fp16  cast to half precision, ring all-reduce in half precision (2 bytes/element).
//   powersgd     rank-r power iteration, all-reduce of P (rows x r) and then of Q (cols x r); the
//                sum of P_i = M_i Q is (sum M_i) Q, so both all-reduces are exact (Vogels,
//                Karimireddy, Jaggi, "PowerSGD: Practical Low-Rank Gradient Compression for
//                Distributed Optimization", NeurIPS 2019, Algorithm 1). Vectors (biases, norms)
//                and matrices too small to gain travel uncompressed in the same all-reduce.
//   topk         the k = ceil(density * numel) largest-magnitude entries of (gradient + residual)
//                with error feedback and optional momentum correction (Lin et al., "Deep Gradient
//                Compression", ICLR 2018). Different ranks pick different indices, so the sparse
//                forms are all-gathered: k values + k int32 indices per rank, and every rank
//                receives (n - 1) of them: the bytes grow with the group size n.
//   terngrad     stochastic ternarization to {-s, 0, s}, s = max |g| (Wen et al., "TernGrad:
//                Ternary Gradients to Reduce Communication in Distributed Deep Learning",
//                NeurIPS 2017): 2 bits per element + one fp32 scale per tensor, all-gathered.
//   sign         1-bit quantization with error feedback, scale = mean |g + residual| per tensor
//                (Seide et al., "1-Bit Stochastic Gradient Descent and its Application to
//                Data-Parallel Distributed Training of Speech DNNs", Interspeech 2014; the
//                per-tensor mean-abs scale of Karimireddy et al. ICML 2019): 1 bit per element +
//                one fp32 scale per tensor, all-gathered.
#include <cstdint>
#include <string>
#include <vector>

namespace stratos {

struct LayerSpec;
struct ModelSpec;
enum class LayerKind;

enum class GradCompression { kNone, kBf16, kFp16, kTopK, kPowerSgd, kTernGrad, kSign };

// "none" | "bf16" | "fp16" | "topk" | "powersgd" | "terngrad" | "sign".
const char* GradCompressionName(GradCompression kind);
// The inverse of GradCompressionName. Throws InputError "<where>: <key> = "x": must be one of
// "none", "bf16", ...", e.g. where = "command line", key = "--grad-compression".
GradCompression ParseGradCompression(const std::string& text, const std::string& where,
                                     const std::string& key = "grad_compression");
// Every kind, in enum order (for CLI help and tests).
const std::vector<GradCompression>& AllGradCompressions();

struct CompressionSpec {
  GradCompression kind = GradCompression::kNone;
  // topk: fraction of each gradient tensor's elements sent, in (0, 1]. DGC sends 0.1%; 1% is a
  // safer default for small models.
  double topk_density = 0.01;
  // topk: DGC momentum correction factor in [0, 1): the residual accumulates the local velocity
  // u = momentum * u + g instead of g, and sent entries are cleared from u too (momentum factor
  // masking). 0 = plain error feedback, which is what an optimizer with its own momentum (Adam,
  // as in the runtime) wants; DGC's 0.9 pairs with plain SGD.
  double topk_momentum = 0.0;
  // powersgd: rank r >= 1 of the approximation (Vogels et al. use 1, 2, 4).
  int powersgd_rank = 4;

  // "none", "bf16", "topk(density=0.01)", "topk(density=0.01, momentum=0.9)", "powersgd(rank=4)".
  std::string Label() const;
  bool operator==(const CompressionSpec& o) const;
  bool operator!=(const CompressionSpec& o) const { return !(*this == o); }
};

// Empty if `spec` is usable, else the rule broken, e.g. "topk_density 0 must be in (0, 1]".
// Parameters of other kinds are not checked.
std::string CheckCompressionSpec(const CompressionSpec& spec);
// CheckCompressionSpec plus the stage rules: compression needs the full gradient on every DP
// rank, so ZeRO stages 2 and 3 (sharded gradients) are refused.
std::string CheckStageCompression(const CompressionSpec& spec, int zero_stage);

// A comma list of compressions, each a name with its kind's default parameters ("none,bf16,
// powersgd") or a name with parameters in the spelling Label() prints ("topk(density=0.1)",
// "topk(density=0.01, momentum=0.9)", "powersgd(rank=1)"). Throws InputError naming where, key
// and the bad item: an unknown name or parameter, a value that is not a number, a rule of
// CheckCompressionSpec, unbalanced parentheses, or an empty list.
std::vector<CompressionSpec> ParseCompressionList(const std::string& text, const std::string& where,
                                                  const std::string& key);

// Whether the compressed form is exchanged by all-gather (topk, terngrad, sign) instead of a
// ring all-reduce (none, bf16, fp16, powersgd).
bool UsesAllGather(GradCompression kind);

// One gradient tensor as a compressor sees it: rows x cols, where an n-d tensor is the matrix
// (shape[0], product of the rest) as in PyTorch's powerSGD_hook, and a vector has cols = 1.
// Doubles, so that sharded sizes of any model neither overflow nor truncate.
struct GradientTensorShape {
  double rows = 0;
  double cols = 1;
  double Elements() const { return rows * cols; }
  bool IsMatrix() const { return rows > 1 && cols > 1; }
};
GradientTensorShape ShapeOf(const std::vector<int64_t>& sizes);

// Whether PowerSGD compresses this tensor: a matrix with r (rows + cols) < rows cols (PyTorch's
// powerSGD_hook with min_compression_rate 1). Other tensors are all-reduced uncompressed.
bool PowerSgdCompresses(const GradientTensorShape& shape, int rank);

// What one rank contributes to the synchronization of one gradient tensor, in bytes.
struct CompressedMessage {
  double all_reduce_bytes = 0;  // buffer(s) summed by ring all-reduce (PowerSGD: P, then Q)
  double all_gather_bytes = 0;  // message all-gathered from every rank
};

// The message of one tensor whose gradients are `grad_dtype_bytes` per element:
//   none        all-reduce  E * grad_dtype_bytes
//   bf16/fp16   all-reduce  2 E
//   powersgd    all-reduce  r (rows + cols) * grad_dtype_bytes for a matrix with
//               r (rows + cols) < E, else E * grad_dtype_bytes (uncompressed)
//   topk        all-gather  k (grad_dtype_bytes + 4), k = max(1, ceil(density E))
//   terngrad    all-gather  ceil(E / 4) + 4   (2-bit codes + fp32 scale)
//   sign        all-gather  ceil(E / 8) + 4   (1-bit signs + fp32 scale)
// with E = shape.Elements(). The runtime sends exactly these payloads (runtime/compression.cc).
CompressedMessage MessageBytes(const CompressionSpec& spec, const GradientTensorShape& shape,
                               double grad_dtype_bytes);

// Entries top-k keeps of a tensor of `elements`: max(1, ceil(density * elements)), at most
// elements (the product is rounded to 1e-9 first, so 0.01 * 100 is 1, not 2).
int64_t TopKCount(double density, int64_t elements);
double TopKCount(double density, double elements);

// Bytes each rank puts on the wire for one synchronization of one gradient tensor over a ring of
// group_size ranks (nccl-tests PERFORMANCE.md): 2 (n-1)/n of the all-reduce bytes plus (n-1)
// times the all-gather message. 0 for a group of one.
double WireBytes(const CompressionSpec& spec, const GradientTensorShape& shape,
                 double grad_dtype_bytes, int group_size);
double WireBytes(const CompressionSpec& spec, double elements, double grad_dtype_bytes,
                 int group_size);

// Work of compressing this rank's gradient tensor and decompressing the group's messages, per
// synchronization. Memory traffic counts passes over the dense tensor at grad_dtype_bytes (a
// pass = one read or one write of E elements) plus the packed payloads:
//   none        0
//   bf16/fp16   cast down and back: 2 E (grad_dtype_bytes + 2); 0 if grad_dtype_bytes <= 2
//               (the gradient already is half precision)
//   topk        error feedback (read g, read and write residual: 3 passes), momentum correction
//               (3 more when momentum > 0), selection (write and read |v|: 2), decompression
//               (zero the dense result: 1 pass) and the scatter-add of the n received messages
//               (n k (8 + 2 grad_dtype_bytes))
//   terngrad    max |g| (1), uniform draws (write and read 4 E bytes), ternarize (read g, 1),
//               pack (E / 4); decompression unpacks n messages and accumulates (n (E / 4 +
//               2 E grad_dtype_bytes))
//   sign        error feedback (3), mean |v| (1), pack (read v: 1, E / 8), residual update
//               (read and write: 2); decompression as terngrad with E / 8
//   powersgd    error feedback (3 passes) and residual update (3) over compressed matrices, and
//               FLOPs 2 r E for P = M Q, 2 r E for Q = M^T P, 2 r E for P Q^T, 2 rows r^2 for
//               the Gram-Schmidt orthogonalization of P (Vogels et al. §3)
// Costs of the matching all-reduce/all-gather are not included (see MessageBytes).
struct CompressionWork {
  double flops = 0;         // at the device's matmul rate
  double memory_bytes = 0;  // at the device's memory bandwidth
};
CompressionWork CompressionWorkOf(const CompressionSpec& spec, const GradientTensorShape& shape,
                                  double grad_dtype_bytes, int group_size);

// The gradient tensors of one layer on one tensor-parallel rank, for the cost model: the weight
// matrices as (other dimension / tp, hidden) — Megatron's column- and row-parallel linears split
// the dimension that is not the hidden size, the vocab-parallel embedding splits the vocabulary
// — and all remaining parameters (biases, norms, token types) lumped into one vector.
//   gpt/bert block: qkv (h + 2 hkv, h), out (h, h), fc1 (f, h), fc2 (f, h); llama: gate, up and
//   down (f, h) each and no biases. Embedding: words (V, h), learned positions (P, h). Head: the
//   stored lm_head copy (V, h), BERT's pooler and MLM transform (h, h). Explicit layers: one
//   square matrix of stored_param_count / tp elements.
// The elements add up to layer.stored_param_count / tp (tested for the zoo models).
std::vector<GradientTensorShape> LayerGradientShapes(const ModelSpec& model,
                                                     const LayerSpec& layer, int tensor_parallel);
// The unsharded "other" dimensions of the (other, hidden) weight matrices that a block-level
// layer of `kind` holds in a transformer family (LayerGradientShapes' list above); empty for
// explicit layers and models without a hidden size.
std::vector<double> LayerWeightMatrixRows(const ModelSpec& model, LayerKind kind);
// Elements of each parameter tensor of one layer on one tensor-parallel rank (what ZeRO-3
// gathers one at a time, TrainingSpec::zero3_gather): LayerGradientShapes' weight matrices,
// then its lumped vector split evenly over the layer's vector tensors
// (LayerSpec::vector_param_tensors, which model.cc counts beside the parameters: a gpt/bert
// block's 4 biases and 2 LayerNorms' weight and bias (8), a llama block's 2 RMSNorm weights; a
// gpt head's final LayerNorm (2), a llama head's RMSNorm (1), BERT's pooler and MLM-transform
// biases, LayerNorm and decoder bias (5); BERT's token-type embedding and embedding LayerNorm
// (3)). Explicit layers, and an operator of an operator-granularity block
// (LayerSpec::block_operator, a submodule): one tensor. Adds up to stored_param_count / tp.
// Example: a gpt block has 12 tensors, a llama block 7 (fused qkv, out, gate, up, down, 2 norms).
std::vector<double> LayerParameterTensorElements(const ModelSpec& model, const LayerSpec& layer,
                                                 int tensor_parallel);

}  // namespace stratos
