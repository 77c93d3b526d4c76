#include "runtime/compression.h"

#include <ATen/CPUGeneratorImpl.h>
#include <fmt/format.h>
#include <fmt/ranges.h>

#include <cstring>

#include "costmodel/error.h"

namespace stratos {

using torch::Tensor;

namespace {

uint64_t SplitMix64(uint64_t x) {
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

uint64_t Mix(uint64_t seed, std::initializer_list<uint64_t> values) {
  uint64_t h = SplitMix64(seed);
  for (uint64_t v : values) h = SplitMix64(h ^ v);
  return h;
}

// Byte-level packing of the all-gathered messages (memcpy: no alignment assumptions).
void PutBytes(Tensor& message, int64_t offset, const Tensor& values) {
  const Tensor c = values.contiguous();
  std::memcpy(message.data_ptr<uint8_t>() + offset, c.data_ptr(), c.nbytes());
}

Tensor GetTensor(const Tensor& message, int64_t offset, torch::ScalarType dtype, int64_t numel) {
  Tensor out = torch::empty({numel}, dtype);
  std::memcpy(out.data_ptr(), message.data_ptr<uint8_t>() + offset, out.nbytes());
  return out;
}

// codes: (E,) integers in [0, 2^bits) -> (ceil(E bits / 8),) uint8, element j of each byte in
// bits [j bits, (j + 1) bits).
Tensor PackCodes(const Tensor& codes, int bits) {
  const int per_byte = 8 / bits;
  const int64_t E = codes.numel();
  const int64_t bytes = (E + per_byte - 1) / per_byte;
  Tensor padded = torch::zeros({bytes * per_byte}, torch::kInt32);
  padded.narrow(0, 0, E).copy_(codes);
  const Tensor weights = torch::pow(2, torch::arange(0, 8, bits, torch::kInt32));  // (per_byte,)
  return (padded.view({bytes, per_byte}) * weights).sum(1).to(torch::kUInt8);
}

// The inverse of PackCodes: (E,) int32.
Tensor UnpackCodes(const Tensor& packed, int bits, int64_t E) {
  const Tensor shifts = torch::arange(0, 8, bits, torch::kInt32);
  const Tensor codes = torch::bitwise_right_shift(packed.to(torch::kInt32).unsqueeze(1), shifts)
                           .bitwise_and((1 << bits) - 1);
  return codes.reshape({-1}).narrow(0, 0, E);
}

// Modified Gram-Schmidt on the columns of p (rows, r), in place; a zero column stays zero
// (PyTorch's _orthogonalize_gram_schmidt with epsilon).
void Orthogonalize(Tensor p) {
  const int64_t r = p.size(1);
  for (int64_t j = 0; j < r; ++j) {
    Tensor col = p.select(1, j);
    col.div_(col.norm() + 1e-8);
    if (j + 1 < r) {
      Tensor rest = p.narrow(1, j + 1, r - j - 1);
      rest.sub_(torch::outer(col, col.matmul(rest)));
    }
  }
}

// ------------------------------------------------------------------------------------------
// bf16 / fp16: mean of half-precision casts, all-reduced in half precision.

class HalfPrecisionCompressor : public GradientCompressor {
 public:
  using GradientCompressor::GradientCompressor;

 protected:
  std::function<void()> Start(const std::vector<int>& params, std::vector<Tensor> g,
                              Communicator& group) override {
    const auto dtype = spec_.kind == GradCompression::kBf16 ? torch::kBFloat16 : torch::kHalf;
    const int n = group.Size();
    int64_t total = 0;
    for (const Tensor& t : g) total += t.numel();
    Tensor buffer = torch::empty({total}, dtype);
    int64_t offset = 0;
    for (const Tensor& t : g) {
      // Divide first (as PyTorch's fp16_compress_hook), so that the sum does not overflow.
      buffer.narrow(0, offset, t.numel()).copy_(n > 1 ? t / n : t);
      offset += t.numel();
    }
    last_message_bytes_ = buffer.nbytes();
    std::shared_ptr<CommWork> work = group.AllReduceSumAsync(buffer);
    return [work, buffer, g] {
      work->Wait();
      int64_t offset = 0;
      for (const Tensor& t : g) {
        t.copy_(buffer.narrow(0, offset, t.numel()));
        offset += t.numel();
      }
    };
  }
  std::vector<Tensor> StateTensors() const override { return {}; }
};

// ------------------------------------------------------------------------------------------
// Top-k with error feedback and DGC momentum correction, all-gathered.

class TopKCompressor : public GradientCompressor {
 public:
  TopKCompressor(const CompressionSpec& spec, std::vector<std::vector<int64_t>> shapes,
                 const CompressorOptions& options)
      : GradientCompressor(spec, std::move(shapes), options) {
    for (int p = 0; p < NumParameters(); ++p) {
      residual_.push_back(torch::zeros({Elements(p)}));
      if (spec_.topk_momentum > 0) momentum_.push_back(torch::zeros({Elements(p)}));
    }
  }

 protected:
  std::function<void()> Start(const std::vector<int>& params, std::vector<Tensor> g,
                              Communicator& group) override {
    const double m = spec_.topk_momentum;
    std::vector<int64_t> ks;
    int64_t bytes = 0;
    for (int p : params) {
      ks.push_back(TopKCount(spec_.topk_density, Elements(p)));
      bytes += ks.back() * 8;  // fp32 value + int32 index
    }
    Tensor message = torch::empty({bytes}, torch::kUInt8);
    int64_t offset = 0;
    for (size_t i = 0; i < params.size(); ++i) {
      const int p = params[i];
      Tensor& v = residual_[p];
      if (!options_.error_feedback) v.zero_();
      if (m > 0) {
        Tensor& u = momentum_[p];
        u.mul_(m).add_(g[i]);
        v.add_(u);
      } else {
        v.add_(g[i]);
      }
      const Tensor index = std::get<1>(torch::topk(v.abs(), ks[i], 0, true, false));
      PutBytes(message, offset, v.index_select(0, index));
      PutBytes(message, offset + ks[i] * 4, index.to(torch::kInt32));
      offset += ks[i] * 8;
      v.index_fill_(0, index, 0);
      if (m > 0) momentum_[p].index_fill_(0, index, 0);  // momentum factor masking
    }
    last_message_bytes_ = bytes;
    const int n = group.Size();
    std::vector<Tensor> gathered;
    for (int r = 0; r < n; ++r) gathered.push_back(torch::empty({bytes}, torch::kUInt8));
    std::shared_ptr<CommWork> work = group.AllGatherAsync(gathered, message);
    return [work, message, gathered, g, ks, n] {
      work->Wait();
      int64_t offset = 0;
      for (size_t i = 0; i < g.size(); ++i) {
        Tensor sum = torch::zeros({g[i].numel()});
        for (const Tensor& from : gathered)
          sum.index_add_(0, GetTensor(from, offset + ks[i] * 4, torch::kInt32, ks[i]).to(torch::kLong),
                         GetTensor(from, offset, torch::kFloat, ks[i]));
        g[i].copy_(sum.div_(n));
        offset += ks[i] * 8;
      }
    };
  }
  std::vector<Tensor> StateTensors() const override {
    std::vector<Tensor> state = residual_;
    state.insert(state.end(), momentum_.begin(), momentum_.end());
    return state;
  }

 private:
  std::vector<Tensor> residual_;  // v per parameter: (numel,)
  std::vector<Tensor> momentum_;  // u per parameter when momentum > 0: (numel,)
};

// ------------------------------------------------------------------------------------------
// Scaled codes, all-gathered: 1-bit sign with error feedback, or TernGrad.

class CodeCompressor : public GradientCompressor {
 public:
  CodeCompressor(const CompressionSpec& spec, std::vector<std::vector<int64_t>> shapes,
                 const CompressorOptions& options)
      : GradientCompressor(spec, std::move(shapes), options),
        bits_(spec.kind == GradCompression::kSign ? 1 : 2) {
    if (spec_.kind == GradCompression::kSign)
      for (int p = 0; p < NumParameters(); ++p) residual_.push_back(torch::zeros({Elements(p)}));
  }

 protected:
  // Scale s and codes of parameter p: sign codes b in {0, 1} stand for s (2b - 1); TernGrad
  // codes c in {0, 1, 2} for s (c - 1).
  std::pair<float, Tensor> Encode(int p, const Tensor& g, int group_rank) {
    if (spec_.kind == GradCompression::kSign) {
      Tensor& v = residual_[p];
      if (options_.error_feedback) v.add_(g);
      else v.copy_(g);
      const float s = v.abs().mean().item<float>();
      const Tensor bits = v.ge(0);
      if (options_.error_feedback) {
        v.sub_(bits.to(torch::kFloat).mul(2 * s).sub(s));
      } else {
        v.zero_();
      }
      return {s, bits.to(torch::kInt32)};
    }
    const float s = g.abs().max().item<float>();
    if (s == 0) return {s, torch::ones({g.numel()}, torch::kInt32)};
    const Tensor keep = torch::rand({g.numel()}, GeneratorFor(group_rank, p)).lt(g.abs() / s);
    return {s, (g.sign() * keep.to(torch::kFloat)).to(torch::kInt32) + 1};
  }

  std::function<void()> Start(const std::vector<int>& params, std::vector<Tensor> g,
                              Communicator& group) override {
    std::vector<int64_t> sizes;  // message bytes per parameter
    int64_t bytes = 0;
    for (int p : params) {
      sizes.push_back(4 + (Elements(p) * bits_ + 7) / 8);
      bytes += sizes.back();
    }
    Tensor message = torch::empty({bytes}, torch::kUInt8);
    int64_t offset = 0;
    for (size_t i = 0; i < params.size(); ++i) {
      auto [s, codes] = Encode(params[i], g[i], group.Rank());
      PutBytes(message, offset, torch::tensor({s}));
      PutBytes(message, offset + 4, PackCodes(codes, bits_));
      offset += sizes[i];
    }
    last_message_bytes_ = bytes;
    const int n = group.Size();
    std::vector<Tensor> gathered;
    for (int r = 0; r < n; ++r) gathered.push_back(torch::empty({bytes}, torch::kUInt8));
    std::shared_ptr<CommWork> work = group.AllGatherAsync(gathered, message);
    const int bits = bits_;
    const bool sign = spec_.kind == GradCompression::kSign;
    return [work, message, gathered, g, sizes, n, bits, sign] {
      work->Wait();
      int64_t offset = 0;
      for (size_t i = 0; i < g.size(); ++i) {
        const int64_t E = g[i].numel();
        Tensor sum = torch::zeros({E});
        for (const Tensor& from : gathered) {
          const float s = GetTensor(from, offset, torch::kFloat, 1).item<float>();
          const Tensor codes =
              UnpackCodes(GetTensor(from, offset + 4, torch::kUInt8, sizes[i] - 4), bits, E)
                  .to(torch::kFloat);
          sum.add_(sign ? codes.mul(2 * s).sub_(s) : codes.sub(1).mul_(s));
        }
        g[i].copy_(sum.div_(n));
        offset += sizes[i];
      }
    };
  }
  std::vector<Tensor> StateTensors() const override { return residual_; }

 private:
  int bits_;
  std::vector<Tensor> residual_;  // sign: e per parameter, (numel,)
};

// ------------------------------------------------------------------------------------------
// PowerSGD rank r with error feedback and warm start.

class PowerSgdCompressor : public GradientCompressor {
 public:
  PowerSgdCompressor(const CompressionSpec& spec, std::vector<std::vector<int64_t>> shapes,
                     const CompressorOptions& options)
      : GradientCompressor(spec, std::move(shapes), options) {
    const int r = spec_.powersgd_rank;
    for (int p = 0; p < NumParameters(); ++p) {
      const GradientTensorShape shape = ShapeOf(shapes_[p]);
      if (PowerSgdCompresses(shape, r)) {
        rows_.push_back(shapes_[p][0]);
        cols_.push_back(Elements(p) / shapes_[p][0]);
        // The same Gaussian on every rank: seeded by the run's seed and the parameter only.
        auto generator = at::detail::createCPUGenerator(Mix(options_.seed, {0x9051, uint64_t(p)}));
        q_.push_back(torch::randn({cols_.back(), r}, generator));
        error_.push_back(torch::zeros({Elements(p)}));
      } else {
        rows_.push_back(0);
        cols_.push_back(0);
        q_.push_back(torch::zeros({0}));
        error_.push_back(torch::zeros({0}));
      }
    }
  }

 protected:
  bool Compresses(int p) const { return rows_[p] > 0; }

  std::function<void()> Start(const std::vector<int>& params, std::vector<Tensor> g,
                              Communicator& group) override {
    const int64_t r = spec_.powersgd_rank;
    int64_t total = 0, q_total = 0;
    for (int p : params) {
      total += Compresses(p) ? rows_[p] * r : Elements(p);
      q_total += Compresses(p) ? cols_[p] * r : 0;
    }
    // buffer: P (rows, r) of each compressed matrix, the uncompressed tensors as they are.
    Tensor buffer = torch::empty({total});
    std::vector<Tensor> matrices(params.size());  // M = g + e, (rows, cols)
    int64_t offset = 0;
    for (size_t i = 0; i < params.size(); ++i) {
      const int p = params[i];
      if (Compresses(p)) {
        Tensor m = g[i].view({rows_[p], cols_[p]}).clone();
        if (options_.error_feedback) m.add_(error_[p].view({rows_[p], cols_[p]}));
        buffer.narrow(0, offset, rows_[p] * r).view({rows_[p], r}).copy_(m.mm(q_[p]));
        matrices[i] = m;
        offset += rows_[p] * r;
      } else {
        buffer.narrow(0, offset, Elements(p)).copy_(g[i]);
        offset += Elements(p);
      }
    }
    last_message_bytes_ = (total + q_total) * 4;
    std::shared_ptr<CommWork> work = group.AllReduceSumAsync(buffer);
    return [this, work, buffer, matrices, params, g, q_total, &group] {
      work->Wait();
      const int64_t r = spec_.powersgd_rank;
      const int n = group.Size();
      // Orthogonalize the summed P (the span of the mean) and form this rank's Q = M^T P.
      Tensor q_buffer = torch::empty({q_total});
      int64_t offset = 0, q_offset = 0;
      std::vector<Tensor> ps(params.size()), qs(params.size());
      for (size_t i = 0; i < params.size(); ++i) {
        const int p = params[i];
        if (!Compresses(p)) {
          offset += Elements(p);
          continue;
        }
        ps[i] = buffer.narrow(0, offset, rows_[p] * r).view({rows_[p], r});
        Orthogonalize(ps[i]);
        qs[i] = q_buffer.narrow(0, q_offset, cols_[p] * r).view({cols_[p], r});
        qs[i].copy_(matrices[i].t().mm(ps[i]));
        offset += rows_[p] * r;
        q_offset += cols_[p] * r;
      }
      if (q_total > 0) group.AllReduceSum(q_buffer);
      offset = 0;
      for (size_t i = 0; i < params.size(); ++i) {
        const int p = params[i];
        const Tensor& out = g[i];
        if (!Compresses(p)) {
          out.copy_(buffer.narrow(0, offset, Elements(p))).div_(n);
          offset += Elements(p);
          continue;
        }
        qs[i].div_(n);
        const Tensor approximation = ps[i].mm(qs[i].t());  // (rows, cols): the group mean
        if (options_.error_feedback)
          error_[p].view({rows_[p], cols_[p]}).copy_(matrices[i] - approximation);
        q_[p].copy_(qs[i]);  // warm start of the next step
        out.view({rows_[p], cols_[p]}).copy_(approximation);
        offset += rows_[p] * r;
      }
    };
  }
  std::vector<Tensor> StateTensors() const override {
    std::vector<Tensor> state = error_;
    state.insert(state.end(), q_.begin(), q_.end());
    return state;
  }

 private:
  std::vector<int64_t> rows_, cols_;  // 0 for tensors sent uncompressed
  std::vector<Tensor> q_;             // (cols, r) per compressed matrix
  std::vector<Tensor> error_;         // (numel,) per compressed matrix
};

}  // namespace

void PendingReduce::Finish() {
  STRATOS_CHECK(finish_ != nullptr, "PendingReduce finished twice");
  torch::NoGradGuard no_grad;
  auto finish = std::move(finish_);
  finish_ = nullptr;
  finish();
}

GradientCompressor::GradientCompressor(const CompressionSpec& spec,
                                       std::vector<std::vector<int64_t>> shapes,
                                       const CompressorOptions& options)
    : spec_(spec), shapes_(std::move(shapes)), options_(options) {
  for (const auto& shape : shapes_) {
    int64_t numel = 1;
    for (int64_t d : shape) numel *= d;
    numels_.push_back(numel);
  }
  calls_ = torch::zeros({NumParameters()}, torch::kInt64);
}

std::unique_ptr<GradientCompressor> GradientCompressor::Create(
    const CompressionSpec& spec, std::vector<std::vector<int64_t>> shapes,
    const CompressorOptions& options) {
  const std::string rule = CheckCompressionSpec(spec);
  if (!rule.empty()) ThrowInputError("gradient compressor", "spec", spec.Label(), rule);
  std::unique_ptr<GradientCompressor> compressor;
  switch (spec.kind) {
    case GradCompression::kNone:
      throw InputError("gradient compressor: spec = none: nothing to compress (all-reduce instead)");
    case GradCompression::kBf16:
    case GradCompression::kFp16:
      compressor.reset(new HalfPrecisionCompressor(spec, std::move(shapes), options));
      break;
    case GradCompression::kTopK:
      compressor.reset(new TopKCompressor(spec, std::move(shapes), options));
      break;
    case GradCompression::kPowerSgd:
      compressor.reset(new PowerSgdCompressor(spec, std::move(shapes), options));
      break;
    case GradCompression::kTernGrad:
    case GradCompression::kSign:
      compressor.reset(new CodeCompressor(spec, std::move(shapes), options));
      break;
  }
  return compressor;
}

std::unique_ptr<PendingReduce> GradientCompressor::ReduceAsync(const std::vector<int>& params,
                                                               std::vector<Tensor> grads,
                                                               Communicator& group) {
  STRATOS_CHECK(params.size() == grads.size(), "{} parameters, {} gradients", params.size(),
                grads.size());
  torch::NoGradGuard no_grad;
  std::vector<Tensor> flat;
  for (size_t i = 0; i < params.size(); ++i) {
    const int p = params[i];
    STRATOS_CHECK(p >= 0 && p < NumParameters(), "parameter {} of {}", p, NumParameters());
    const Tensor& grad = grads[i];
    STRATOS_CHECK(grad.numel() == numels_[p] && grad.is_contiguous() &&
                      grad.scalar_type() == torch::kFloat,
                  "gradient of parameter {}: {} elements ({}), expected {} contiguous fp32", p,
                  grad.numel(), grad.toString(), numels_[p]);
    flat.push_back(grad.view({-1}));
  }
  std::function<void()> finish = Start(params, std::move(flat), group);
  int64_t* calls = calls_.data_ptr<int64_t>();
  for (int p : params) ++calls[p];
  return std::make_unique<PendingReduce>(std::move(finish));
}

Tensor GradientCompressor::RoundTrip(int param, const Tensor& grad) {
  static const std::unique_ptr<Communicator> self = MakeSelfCommunicator("in-process");
  Tensor copy = grad.detach().to(torch::kFloat).contiguous().clone();
  Reduce({param}, {copy}, *self);
  return copy;
}

std::vector<Tensor> GradientCompressor::State() const {
  std::vector<Tensor> state{calls_.clone()};
  for (const Tensor& t : StateTensors()) state.push_back(t.clone());
  return state;
}

void GradientCompressor::LoadState(const std::vector<Tensor>& state) {
  std::vector<Tensor> mine = StateTensors();
  mine.insert(mine.begin(), calls_);
  if (state.size() != mine.size())
    ThrowInputError("checkpoint", "compression state", fmt::format("{} tensors", state.size()),
                    fmt::format("{} needs {} tensors for these {} parameters", spec_.Label(),
                                mine.size(), NumParameters()));
  torch::NoGradGuard no_grad;
  for (size_t i = 0; i < mine.size(); ++i) {
    if (!state[i].sizes().equals(mine[i].sizes()))
      ThrowInputError("checkpoint", fmt::format("compression state[{}]", i),
                      fmt::format("shape [{}]", fmt::join(state[i].sizes(), ", ")),
                      fmt::format("{} expects shape [{}]", spec_.Label(),
                                  fmt::join(mine[i].sizes(), ", ")));
    mine[i].copy_(state[i]);
  }
}

torch::Generator GradientCompressor::GeneratorFor(int group_rank, int param) const {
  return at::detail::createCPUGenerator(
      Mix(options_.seed, {0x7e46, uint64_t(group_rank), uint64_t(param),
                          uint64_t(calls_.data_ptr<int64_t>()[param])}));
}

}  // namespace stratos
