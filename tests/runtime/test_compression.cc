// Gradient compressors (runtime/compression.h) in one process, and DP runs with compression on
// localhost (Gloo): none reproduces the single-process run, compressed runs train and differ,
// and a resumed compressed run continues bitwise.
#include <doctest/doctest.h>
#include <nlohmann/json.hpp>

#include <cmath>

#include "costmodel/compression.h"
#include "costmodel/error.h"
#include "runtime/compression.h"

#include "tests/runtime/runtime_test_util.h"

namespace stratos {
namespace {

using torch::Tensor;

CompressionSpec Spec(GradCompression kind) {
  CompressionSpec spec;
  spec.kind = kind;
  return spec;
}

std::unique_ptr<GradientCompressor> Make(const CompressionSpec& spec,
                                         std::vector<int64_t> shape, uint64_t seed = 7,
                                         bool error_feedback = true) {
  CompressorOptions options;
  options.seed = seed;
  options.error_feedback = error_feedback;
  return GradientCompressor::Create(spec, {std::move(shape)}, options);
}

Tensor Randn(std::vector<int64_t> shape, uint64_t seed) {
  return torch::randn(shape, at::detail::createCPUGenerator(seed));
}

double RelativeError(const Tensor& a, const Tensor& b) {
  return (a - b).norm().item<double>() / b.norm().item<double>();
}

TEST_CASE("top-k keeps exactly k non-zeros: the largest entries of the first gradient") {
  CompressionSpec spec = Spec(GradCompression::kTopK);
  spec.topk_density = 0.1;
  auto compressor = Make(spec, {10, 50});  // 500 elements, k = 50
  const Tensor g = Randn({10, 50}, 1);
  const Tensor out = compressor->RoundTrip(0, g);
  CHECK(out.sizes() == g.sizes());
  CHECK(out.count_nonzero().item<int64_t>() == 50);
  // They are g's 50 largest magnitudes, unchanged (the residual starts at zero).
  const Tensor threshold = std::get<0>(g.abs().flatten().topk(50)).min();
  const Tensor kept = out.ne(0);
  CHECK(torch::equal(out.masked_select(kept), g.masked_select(kept)));
  CHECK(g.abs().masked_select(kept).min().item<float>() >= threshold.item<float>());
  CHECK(compressor->LastMessageBytes() == 50 * 8);
}

// Sum over steps of what was transmitted (the round trip of a group of one) plus the final
// residual equals the sum of the inputs: error feedback loses nothing, it only delays.
void CheckErrorFeedbackPreservesSum(const CompressionSpec& spec, int residual_index) {
  INFO(spec.Label());
  const std::vector<int64_t> shape{24, 40};
  auto compressor = Make(spec, shape);
  Tensor inputs = torch::zeros(shape), transmitted = torch::zeros(shape);
  for (int step = 0; step < 10; ++step) {
    const Tensor g = Randn(shape, 100 + step);
    inputs += g;
    transmitted += compressor->RoundTrip(0, g);
  }
  const Tensor residual = compressor->State().at(residual_index).view(shape);
  CHECK(residual.abs().max().item<float>() > 0);  // something was held back
  // fp32 sums of 10 N(0,1) terms: stated tolerance 1e-5 absolute.
  CHECK((transmitted + residual - inputs).abs().max().item<float>() < 1e-5);
}

TEST_CASE("error feedback preserves the sum over steps: top-k, sign, PowerSGD") {
  CompressionSpec topk = Spec(GradCompression::kTopK);
  topk.topk_density = 0.05;
  CheckErrorFeedbackPreservesSum(topk, 1);
  CheckErrorFeedbackPreservesSum(Spec(GradCompression::kSign), 1);
  CompressionSpec power = Spec(GradCompression::kPowerSgd);
  power.powersgd_rank = 2;
  CheckErrorFeedbackPreservesSum(power, 1);
}

TEST_CASE("DGC momentum correction accumulates velocity and masks it where sent") {
  CompressionSpec spec = Spec(GradCompression::kTopK);
  spec.topk_density = 0.25;
  spec.topk_momentum = 0.9;
  auto compressor = Make(spec, {8});
  const Tensor g = torch::tensor({1.0f, -2.0f, 3.0f, 0.5f, 0.1f, -0.2f, 0.3f, 0.4f});
  const Tensor first = compressor->RoundTrip(0, g);  // u = g, v = g: sends 3 and -2
  CHECK(torch::equal(first, torch::tensor({0.0f, -2.0f, 3.0f, 0.0f, 0.0f, 0.0f, 0.0f, 0.0f})));
  const std::vector<Tensor> state = compressor->State();  // calls, v, u
  REQUIRE(state.size() == 3);
  CHECK(torch::equal(state[2], g * first.eq(0)));  // momentum factor masking
  const Tensor second = compressor->RoundTrip(0, g);
  // u = 0.9 u + g, v = v + u: entry 0 is 1 + 1.9 = 2.9, entry 3 is 0.5 + 0.95 = 1.45; entries
  // 1 and 2 restart from u = g (-2, 3). The two largest: 3 and 2.9.
  CHECK(second[0].item<float>() == doctest::Approx(2.9));
  CHECK(second[2].item<float>() == doctest::Approx(3.0));
  CHECK(second.count_nonzero().item<int64_t>() == 2);
}

TEST_CASE("PowerSGD reproduces a rank-r matrix exactly once warm") {
  const int r = 3;
  CompressionSpec spec = Spec(GradCompression::kPowerSgd);
  spec.powersgd_rank = r;
  const Tensor a = Randn({64, r}, 2).mm(Randn({r, 48}, 3));  // rank 3
  auto compressor = Make(spec, {64, 48});
  for (int step = 0; step < 3; ++step) {
    const Tensor out = compressor->RoundTrip(0, a);
    INFO("step ", step);
    CHECK(RelativeError(out, a) < 1e-5);
  }
  CHECK(compressor->LastMessageBytes() == (64 + 48) * r * 4);
}

TEST_CASE("PowerSGD without error feedback reaches the best rank-r error on a random matrix") {
  const int r = 4;
  CompressionSpec spec = Spec(GradCompression::kPowerSgd);
  spec.powersgd_rank = r;
  const Tensor m = Randn({64, 48}, 4);
  // Eckart-Young: the best rank-r error is the norm of the trailing singular values.
  const Tensor sigma = torch::linalg_svdvals(m);
  const double best = sigma.narrow(0, r, sigma.size(0) - r).norm().item<double>();
  auto compressor = Make(spec, {64, 48}, 7, /*error_feedback=*/false);
  double error = 0;
  for (int step = 0; step < 30; ++step) error = (compressor->RoundTrip(0, m) - m).norm().item<double>();
  MESSAGE(fmt::format("PowerSGD rank {} after 30 warm steps: error {:.4f}, best {:.4f}", r, error,
                      best));
  CHECK(error >= best * (1 - 1e-5));
  CHECK(error <= best * 1.02);  // stated: within 2% of the optimum after 30 power iterations
}

TEST_CASE("TernGrad values lie in {-s, 0, s} and are unbiased over seeds") {
  const std::vector<int64_t> shape{500};
  const Tensor g = Randn(shape, 5);
  const float s = g.abs().max().item<float>();
  Tensor mean = torch::zeros(shape);
  const int seeds = 40, calls = 50;
  for (int seed = 0; seed < seeds; ++seed) {
    auto compressor = Make(Spec(GradCompression::kTernGrad), shape, 1000 + seed);
    for (int call = 0; call < calls; ++call) {
      const Tensor t = compressor->RoundTrip(0, g);
      const Tensor magnitude = t.abs();
      CHECK(torch::logical_or(magnitude.eq(0), magnitude.eq(s)).all().item<bool>());
      CHECK(torch::logical_or(t.eq(0), t.sign().eq(g.sign())).all().item<bool>());
      mean += t / (seeds * calls);
    }
  }
  // Each draw has variance s |g| - g^2 <= s^2 / 4: the mean of N draws is within
  // 5 s / (2 sqrt(N)) of g (5 standard deviations, for all 500 entries).
  const double tolerance = 5 * s / (2 * std::sqrt(double(seeds * calls)));
  const double worst = (mean - g).abs().max().item<double>();
  MESSAGE(fmt::format("TernGrad: largest |mean - g| {:.4f} over {} draws (tolerance {:.4f})",
                      worst, seeds * calls, tolerance));
  CHECK(worst < tolerance);
}

TEST_CASE("1-bit sign keeps each sign and the mean magnitude") {
  const Tensor g = Randn({30, 7}, 6);
  auto compressor = Make(Spec(GradCompression::kSign), {30, 7});
  const Tensor out = compressor->RoundTrip(0, g);
  const float scale = g.abs().mean().item<float>();
  CHECK(torch::equal(out.sign(), g.sign()));
  CHECK(out.abs().min().item<float>() == doctest::Approx(scale).epsilon(1e-6));
  CHECK(out.abs().max().item<float>() == doctest::Approx(scale).epsilon(1e-6));
  CHECK(compressor->LastMessageBytes() == (210 + 7) / 8 + 4);
}

TEST_CASE("bf16 and fp16 round trips are within half-precision rounding") {
  const Tensor g = Randn({1000}, 8);
  // Round to nearest: |error| <= 2^-8 |g| for bf16 (8 significant bits, fp32's exponent
  // range); <= 2^-11 |g| for fp16 (11 bits) above its smallest normal 2^-14, and at most half
  // its subnormal spacing, 2^-25, below it.
  struct Case {
    GradCompression kind;
    double relative, absolute;
  };
  for (const Case& c : {Case{GradCompression::kBf16, std::ldexp(1.0, -8), 0.0},
                        Case{GradCompression::kFp16, std::ldexp(1.0, -11), std::ldexp(1.0, -25)}}) {
    auto compressor = Make(Spec(c.kind), {1000});
    const Tensor out = compressor->RoundTrip(0, g);
    const Tensor error = (out - g).abs();
    INFO(GradCompressionName(c.kind), ": worst relative error ",
         (error / g.abs()).max().item<double>());
    CHECK((error <= g.abs() * c.relative + c.absolute).all().item<bool>());
    CHECK(error.max().item<double>() > 0);
    CHECK(compressor->LastMessageBytes() == 2000);
  }
}

TEST_CASE("payloads are the bytes the cost model prices") {
  const std::vector<int64_t> shape{96, 40};
  const Tensor g = Randn(shape, 9);
  for (GradCompression kind : AllGradCompressions()) {
    if (kind == GradCompression::kNone) continue;
    CompressionSpec spec = Spec(kind);
    auto compressor = Make(spec, shape);
    compressor->RoundTrip(0, g);
    const CompressedMessage message = MessageBytes(spec, ShapeOf(shape), 4);
    INFO(GradCompressionName(kind));
    CHECK(compressor->LastMessageBytes() ==
          int64_t(message.all_reduce_bytes + message.all_gather_bytes));
  }
}

TEST_CASE("compressor state round-trips: a restored compressor continues bitwise") {
  for (GradCompression kind : AllGradCompressions()) {
    if (kind == GradCompression::kNone) continue;
    INFO(GradCompressionName(kind));
    CompressionSpec spec = Spec(kind);
    spec.topk_momentum = 0.5;
    const std::vector<std::vector<int64_t>> shapes{{16, 12}, {12}};
    auto a = GradientCompressor::Create(spec, shapes, {3, true});
    for (int step = 0; step < 3; ++step) {
      a->RoundTrip(0, Randn({16, 12}, 20 + step));
      a->RoundTrip(1, Randn({12}, 30 + step));
    }
    auto b = GradientCompressor::Create(spec, shapes, {3, true});
    b->LoadState(a->State());
    CHECK(torch::equal(a->RoundTrip(0, Randn({16, 12}, 40)), b->RoundTrip(0, Randn({16, 12}, 40))));
    CHECK(torch::equal(a->RoundTrip(1, Randn({12}, 41)), b->RoundTrip(1, Randn({12}, 41))));
    std::vector<Tensor> short_state = a->State();
    short_state.pop_back();
    CHECK_THROWS_AS(b->LoadState(short_state), InputError);
  }
  CHECK_THROWS_WITH_AS(GradientCompressor::Create(Spec(GradCompression::kNone), {{4}}),
                       doctest::Contains("nothing to compress"), InputError);
}

// ---------------------------------------------------------------------------------------------
// Multi-process DP 2 runs.

TrainOptions CompressedDp2(const CompressionSpec& spec, int steps) {
  TrainOptions options = TinyOptions(1, 2, 1, 1);
  options.steps = steps;
  for (StagePlan& stage : options.plan.stages) stage.config.grad_compression = spec;
  return options;
}

std::vector<double> RunDp2(const TrainOptions& options, const std::string& name) {
  const LaunchResult result = RunWorkers(options, name);
  INFO(result.Summary());
  REQUIRE(result.Succeeded());
  return MeasuredLosses(TestPath(name));
}

TEST_CASE("DP 2: none matches one process; bf16 and top-k train and differ from none") {
  const std::vector<double> reference = RunInProcess(TinyOptions(1, 1, 1, 1), "gc_ref").losses;
  const std::vector<double> none = RunDp2(CompressedDp2({}, 20), "gc_none");
  CheckLossesMatch(reference, none, "DP 2, grad_compression none");

  CompressionSpec topk = Spec(GradCompression::kTopK);
  topk.topk_density = 0.05;
  for (const CompressionSpec& spec : {Spec(GradCompression::kBf16), topk}) {
    const std::string name = "gc_" + std::string(GradCompressionName(spec.kind));
    const std::vector<double> losses = RunDp2(CompressedDp2(spec, 20), name);
    INFO(spec.Label());
    REQUIRE(losses.size() == none.size());
    double largest = 0;
    for (size_t i = 0; i < losses.size(); ++i)
      largest = std::max(largest, std::abs(losses[i] - none[i]) / none[i]);
    MESSAGE(fmt::format("DP 2 {}: loss {:.4f} -> {:.4f} (none: {:.4f} -> {:.4f}), largest "
                        "relative difference to none {:.3g}",
                        spec.Label(), losses.front(), losses.back(), none.front(), none.back(),
                        largest));
    CHECK(losses.front() == none.front());  // the first loss is before any update
    CHECK(losses.back() < losses.front() - 0.3);
    CHECK(largest > kLossTolerance);  // compression changes the trajectory ...
    CHECK(losses.back() < none.back() * 1.25);  // ... but not by much on this toy run
  }
}

TEST_CASE("DP 2 x PP 2: per-stage PowerSGD and sign train, and resume continues bitwise") {
  // Stage 0 PowerSGD rank 2, stage 1 1-bit sign: both have error-feedback state to carry.
  TrainOptions options = TinyOptions(2, 2, 1, 1);
  options.steps = 8;
  options.plan.stages[0].config.grad_compression.kind = GradCompression::kPowerSgd;
  options.plan.stages[0].config.grad_compression.powersgd_rank = 2;
  options.plan.stages[1].config.grad_compression.kind = GradCompression::kSign;
  const std::vector<double> uninterrupted = RunDp2(options, "gc_mixed");
  CHECK(uninterrupted.back() < uninterrupted.front() - 0.2);

  TrainOptions first = options;
  first.steps = 4;
  first.checkpoint_dir = TestDir("gc_mixed_ckpt");
  RunDp2(first, "gc_mixed_first");
  TrainOptions second = first;
  second.steps = 8;
  second.resume = true;
  const std::vector<double> resumed = RunDp2(second, "gc_mixed_resumed");
  REQUIRE(resumed.size() == 4);
  for (int i = 0; i < 4; ++i) CHECK(resumed[i] == uninterrupted[4 + i]);

  // The checkpoint carries the compressor state: a plan without compression refuses it.
  TrainOptions mismatched = second;
  for (StagePlan& stage : mismatched.plan.stages) stage.config.grad_compression = {};
  const LaunchResult result = RunWorkers(mismatched, "gc_mismatch");
  CHECK_FALSE(result.Succeeded());
}

}  // namespace
}  // namespace stratos
