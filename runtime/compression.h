#pragma once
// Gradient compressors with state (error-feedback residuals, DGC momenta, PowerSGD's warm-start
// Q), for the data-parallel gradient synchronization and for in-process use (DESIGN.md §9, §7).
// What each scheme sends and what that costs is in costmodel/compression.h; the payloads below
// are exactly those of MessageBytes there.
//
// Algorithms, per gradient tensor g of parameter p, in a DP group of n ranks:
//   bf16 / fp16  c = half(g / n), ring all-reduce of c in half precision, result float(sum c).
//                No error feedback (the rounding error is unbiased and tiny).
//   topk         Deep Gradient Compression (Lin et al. ICLR 2018, Algorithm 1 and §3.2):
//                momentum correction u = m u + g (u = g when m = 0), residual v = v + u;
//                send the k = max(1, ceil(density numel)) entries of largest |v| as (values,
//                int32 indices); clear them from v and u (momentum factor masking). The sparse
//                forms are all-gathered; the result is the mean of the n scattered forms.
//   powersgd     Vogels et al. NeurIPS 2019, Algorithm 1 with error feedback: M = g + e as the
//                matrix (shape[0], rest); P = M Q; all-reduce P; orthogonalize P (Gram-Schmidt);
//                Q = M^T P; all-reduce Q and divide by n; result P Q^T; e = M - P Q^T. Q is kept
//                for the next step (warm start, one power iteration per step) and starts as the
//                same seeded Gaussian on every rank. Vectors and matrices where r (rows + cols)
//                >= rows cols are all-reduced uncompressed in the same buffer as P.
//   terngrad     Wen et al. NeurIPS 2017, Eq. 2: s = max |g|, b ~ Bernoulli(|g| / s) per
//                element, t = s sign(g) b in {-s, 0, s}, E[t] = g (unbiased, no error feedback).
//                Draws from a generator seeded by (seed, group rank, parameter, call), so a run
//                and its resume draw the same numbers. 2-bit codes + fp32 s, all-gathered.
//   sign         1-bit SGD with error feedback (Seide et al. Interspeech 2014): v = g + e,
//                s = mean |v| (per tensor, as in Karimireddy et al. ICML 2019), q = s sign(v)
//                (sign(0) = +1), e = v - q. 1-bit codes + fp32 s, all-gathered.
// The all-gathered forms are packed into one uint8 message per call (all parameters of a
// bucket), so a call costs one collective (two for PowerSGD).
#include <torch/torch.h>

#include <cstdint>
#include <functional>
#include <memory>
#include <vector>

#include "costmodel/compression.h"
#include "runtime/communicator.h"

namespace stratos {

// An exchange in flight.
class PendingReduce {
 public:
  explicit PendingReduce(std::function<void()> finish) : finish_(std::move(finish)) {}
  // Waits for the exchange and writes the group's mean gradient into the tensors given to
  // ReduceAsync. Every rank must Finish its pending reduces in the order it started them
  // (PowerSGD issues its second all-reduce here). Throws CommError.
  void Finish();

 private:
  std::function<void()> finish_;
};

struct CompressorOptions {
  // PowerSGD's initial Q (equal on every rank of a group: pass the run's seed) and TernGrad's
  // draws (the group rank is mixed in, so ranks draw independently).
  uint64_t seed = 0;
  // Error feedback for topk, powersgd and sign. Off only to test the bare compressor (PowerSGD
  // without it is plain subspace iteration on a fixed matrix).
  bool error_feedback = true;
};

class GradientCompressor {
 public:
  // A compressor for gradients of these parameter shapes (indexed by parameter id), with all
  // state allocated (zeros; PowerSGD's Q Gaussian). Throws InputError for an invalid spec and
  // for kind none (there is nothing to compress: use a plain all-reduce).
  static std::unique_ptr<GradientCompressor> Create(const CompressionSpec& spec,
                                                    std::vector<std::vector<int64_t>> shapes,
                                                    const CompressorOptions& options = {});
  virtual ~GradientCompressor() = default;

  const CompressionSpec& Spec() const { return spec_; }
  int NumParameters() const { return static_cast<int>(shapes_.size()); }

  // Compresses grads[i], this rank's fp32 gradient of parameter params[i] (contiguous, any view
  // with that parameter's numel), advances the error-feedback state and starts the exchange over
  // `group`. PendingReduce::Finish writes the mean over the group of the decompressed gradients
  // into grads[i]. Every rank of the group must make the same calls with the same params.
  std::unique_ptr<PendingReduce> ReduceAsync(const std::vector<int>& params,
                                             std::vector<torch::Tensor> grads,
                                             Communicator& group);
  void Reduce(const std::vector<int>& params, std::vector<torch::Tensor> grads,
              Communicator& group) {
    ReduceAsync(params, std::move(grads), group)->Finish();
  }

  // In one process, without a communicator: the gradient after the compress / decompress round
  // trip of a group of one (the mean of one), advancing this compressor's state as a real step
  // does. `grad` is not modified. The co-search mixes variants of one gradient this way.
  torch::Tensor RoundTrip(int param, const torch::Tensor& grad);

  // Everything a resumed run needs to continue bitwise: per-parameter call counts and the
  // kind's tensors (residuals, momenta, Q), always the same count for one spec and shapes.
  std::vector<torch::Tensor> State() const;
  // Throws InputError if `state` does not match this compressor (count or shapes), naming what.
  void LoadState(const std::vector<torch::Tensor>& state);

  // Bytes this rank contributed to the collectives of its last ReduceAsync (all-reduce buffers
  // or the all-gathered message), for checks against MessageBytes.
  int64_t LastMessageBytes() const { return last_message_bytes_; }

 protected:
  GradientCompressor(const CompressionSpec& spec, std::vector<std::vector<int64_t>> shapes,
                     const CompressorOptions& options);
  // Kind-specific: compress, start the collective, return what finishes it.
  virtual std::function<void()> Start(const std::vector<int>& params,
                                      std::vector<torch::Tensor> flat_grads,
                                      Communicator& group) = 0;
  // The kind's state tensors (handles sharing storage with the compressor's own), fixed order.
  virtual std::vector<torch::Tensor> StateTensors() const = 0;
  // A generator for (seed, group rank, parameter, its call count).
  torch::Generator GeneratorFor(int group_rank, int param) const;
  int64_t Elements(int param) const { return numels_[param]; }

  CompressionSpec spec_;
  std::vector<std::vector<int64_t>> shapes_;
  std::vector<int64_t> numels_;
  CompressorOptions options_;
  torch::Tensor calls_;  // (num_parameters,) int64: ReduceAsync calls that included each one
  int64_t last_message_bytes_ = 0;
};

}  // namespace stratos
