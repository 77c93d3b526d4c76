// The runtime's GPU path (CUDA tensors, bf16 autocast, CUDA-event timing). Test suite "gpu":
// `runtime_test -ts=gpu` (make test-gpu) runs only these. They compile everywhere and, where
// LibTorch sees no CUDA device, each returns at once with a "skipped" message; the CPU side of
// the same code (device selection, timer, options) is tested in test_device.cc.
#include <doctest/doctest.h>
#include <torch/torch.h>

#include <chrono>
#include <cmath>
#include <fstream>

#include "runtime/communicator.h"
#include "runtime/data_parallel.h"
#include "runtime/data.h"
#include "runtime/device.h"
#include "runtime/gpt.h"
#include "runtime/kineto_trace.h"
#include "runtime/trainer.h"
#include "tests/runtime/runtime_test_util.h"

namespace stratos {
namespace {

bool SkipWithoutCuda() {
  if (torch::cuda::is_available()) return false;
  MESSAGE("skipped: this LibTorch sees no CUDA device");
  return true;
}

// The CPU and a CUDA GPU compute fp32 GEMMs and attention with different kernels (and summation
// orders), so losses agree to rounding that Adam carries along, not bitwise. Stated tolerance
// of CPU-vs-GPU loss parity, relative, at every one of 20 steps.
constexpr double kCrossDeviceLossTolerance = 1e-6;  // measured on an H200: 8.9e-8

TEST_SUITE("gpu") {

TEST_CASE("a tiny GPT trains to the CPU run's losses on CUDA in fp32 (20 steps)") {
  if (SkipWithoutCuda()) return;
  TrainOptions cpu = TinyOptions(1, 1, 1, 2);
  TrainOptions cuda = cpu;
  cuda.device = "cuda";
  const TestRun on_cpu = RunInProcess(cpu, "gpu_parity_cpu");
  const TestRun on_gpu = RunInProcess(cuda, "gpu_parity_cuda");
  REQUIRE(on_gpu.losses.size() == 20);
  double worst = 0;
  for (size_t i = 0; i < on_cpu.losses.size(); ++i)
    worst = std::max(worst, std::abs(on_gpu.losses[i] - on_cpu.losses[i]) / on_cpu.losses[i]);
  MESSAGE(fmt::format("CPU vs CUDA fp32: loss {:.5f} -> {:.5f} (CPU) and {:.5f} -> {:.5f} (CUDA), "
                      "largest relative difference {:.3g}",
                      on_cpu.losses.front(), on_cpu.losses.back(), on_gpu.losses.front(),
                      on_gpu.losses.back(), worst));
  CHECK(worst <= kCrossDeviceLossTolerance);
  CHECK(on_gpu.losses.back() < on_gpu.losses.front() - 0.5);
}

TEST_CASE("bf16 autocast trains: GEMMs in bf16, fp32 master weights, loss near the fp32 run's") {
  if (SkipWithoutCuda()) return;
  const ModelSpec model = LoadRuntimeModel("gpt-tiny", 32);
  auto self = MakeSelfCommunicator("tp");
  const torch::Device device = RankDevice("cuda", 0);
  GptStage stage(model, 0, model.NumLayers(), Recompute::kNone, self.get(), 7, device, true);
  CHECK((stage.FlatParameters().scalar_type() == torch::kFloat32));
  CHECK(stage.FlatParameters().is_cuda());
  {
    AutocastScope autocast(true);
    CHECK(AutocastEnabled());
    const torch::Tensor x = torch::randn({4, 64}, torch::TensorOptions().device(device));
    CHECK((torch::linear(x, torch::randn({8, 64}, x.options())).scalar_type() == torch::kBFloat16));
  }
  CHECK_FALSE(AutocastEnabled());

  TrainOptions fp32 = TinyOptions(1, 1, 1, 2);
  fp32.device = "cuda";
  TrainOptions bf16 = fp32;
  bf16.dtype = "bf16";
  const TestRun a = RunInProcess(fp32, "gpu_fp32");
  const TestRun b = RunInProcess(bf16, "gpu_bf16");
  REQUIRE(b.losses.size() == 20);
  for (double loss : b.losses) CHECK(std::isfinite(loss));
  MESSAGE(fmt::format("bf16 loss {:.4f} -> {:.4f}, fp32 {:.4f} -> {:.4f}", b.losses.front(),
                      b.losses.back(), a.losses.front(), a.losses.back()));
  CHECK(b.losses.back() < b.losses.front() - 0.5);
  // bf16 keeps 8 bits of mantissa: the losses stay within a few percent of fp32's.
  CHECK(std::abs(b.losses.back() - a.losses.back()) < 0.05 * a.losses.back());
}

TEST_CASE("bf16 keeps the residual stream in bf16, or in fp32 with fp32_residual_connection") {
  if (SkipWithoutCuda()) return;
  const ModelSpec model = LoadRuntimeModel("gpt-tiny", 32);
  auto self = MakeSelfCommunicator("tp");
  const torch::Device device = RankDevice("cuda", 0);
  // A middle stage (blocks only) returns its input's dtype: what it sends to the next stage.
  GptStage bf16_stream(model, 1, 3, Recompute::kNone, self.get(), 7, device, true);
  GptStage fp32_stream(model, 1, 3, Recompute::kNone, self.get(), 7, device, true, true);
  CHECK((bf16_stream.ActivationDtype() == torch::kBFloat16));
  CHECK((fp32_stream.ActivationDtype() == torch::kFloat32));
  const auto options = torch::TensorOptions().device(device);
  const torch::Tensor x = torch::randn({2, 32, model.hidden_size}, options);
  const torch::Tensor y16 = bf16_stream.Forward(x.to(torch::kBFloat16), torch::Tensor());
  const torch::Tensor y32 = fp32_stream.Forward(x, torch::Tensor());
  CHECK((y16.scalar_type() == torch::kBFloat16));
  CHECK((y32.scalar_type() == torch::kFloat32));
  // Same weights: the streams differ by bf16 rounding only.
  CHECK(torch::allclose(y16.to(torch::kFloat32), y32, /*rtol=*/0.05, /*atol=*/0.05));

  TrainOptions stream16 = TinyOptions(1, 1, 1, 2);
  stream16.device = "cuda";
  stream16.dtype = "bf16";
  TrainOptions stream32 = stream16;
  stream32.fp32_residual_connection = true;
  const TestRun a = RunInProcess(stream16, "gpu_bf16_stream");
  const TestRun b = RunInProcess(stream32, "gpu_fp32_stream");
  REQUIRE(a.losses.size() == b.losses.size());
  MESSAGE(fmt::format("bf16 stream loss {:.4f} -> {:.4f}, fp32 stream {:.4f} -> {:.4f}",
                      a.losses.front(), a.losses.back(), b.losses.front(), b.losses.back()));
  CHECK(a.losses.back() < a.losses.front() - 0.5);
  CHECK(std::abs(a.losses.back() - b.losses.back()) < 0.05 * b.losses.back());
}

TEST_CASE("Adam's fused CUDA step equals the unfused ops on the CPU") {
  if (SkipWithoutCuda()) return;
  TrainOptions options;
  auto self = MakeSelfCommunicator("dp");
  const torch::Tensor start = torch::randn({100003});
  torch::Tensor on_cpu = start.clone();
  torch::Tensor on_gpu = start.to(RankDevice("cuda", 0));
  ShardedAdam cpu_adam(options, on_cpu, self.get(), false);
  ShardedAdam gpu_adam(options, on_gpu, self.get(), false);
  CHECK_FALSE(cpu_adam.Fused());
  CHECK(gpu_adam.Fused() == bool(STRATOS_FUSED_ADAM));
  for (int step = 0; step < 5; ++step) {
    const torch::Tensor grads = torch::randn({start.numel()}) * (step + 1);
    cpu_adam.Step(grads);
    gpu_adam.Step(grads.to(on_gpu.device()));
  }
  const double worst = (on_gpu.cpu() - on_cpu).abs().max().item<double>();
  MESSAGE(fmt::format("fused ({}) vs unfused Adam after 5 steps: largest difference {:.3g}",
                      gpu_adam.Fused() ? "yes" : "no", worst));
  CHECK(worst < 1e-6);
  CHECK((on_gpu.cpu() - start).abs().max().item<double>() > 1e-3);  // it did move
}

TEST_CASE("recomputation under bf16 autocast gives the same gradients as storing activations") {
  if (SkipWithoutCuda()) return;
  const ModelSpec model = LoadRuntimeModel("gpt-tiny", 32);
  auto self = MakeSelfCommunicator("tp");
  const torch::Device device = RankDevice("cuda", 0);
  const CharDataset data(DefaultDataPath(), 32);
  const auto batch = data.TrainBatch(1, 0, 2, 0, 2);
  std::vector<torch::Tensor> grads;
  for (Recompute recompute : {Recompute::kNone, Recompute::kSelective, Recompute::kFull}) {
    GptStage stage(model, 0, model.NumLayers(), recompute, self.get(), 3, device, true);
    stage.Forward(batch.inputs.to(device), batch.targets.to(device)).backward();
    std::vector<torch::Tensor> parts;
    for (const torch::Tensor& p : stage.Parameters()) parts.push_back(p.grad().reshape({-1}));
    grads.push_back(torch::cat(parts));
  }
  // The recompute runs the same bf16 kernels on the same inputs (autocast restored on
  // autograd's thread): equal up to the order of accumulation.
  for (int i = 1; i < 3; ++i)
    CHECK(torch::allclose(grads[i], grads[0], /*rtol=*/1e-3, /*atol=*/1e-6));
}

TEST_CASE("CUDA events time the device's work, not its launch") {
  if (SkipWithoutCuda()) return;
  const torch::Device device = RankDevice("cuda", 0);
  const auto options = torch::TensorOptions().device(device);
  torch::Tensor a = torch::randn({4096, 4096}, options), c = torch::empty_like(a);
  torch::mm_out(c, a, a);  // warm-up
  DeviceTimer timer(device);
  const auto host_start = std::chrono::steady_clock::now();
  const int start = timer.Mark();
  for (int i = 0; i < 20; ++i) torch::mm_out(c, a, a);
  const int end = timer.Mark();
  timer.Synchronize();
  const double host = std::chrono::duration<double>(std::chrono::steady_clock::now() - host_start).count();
  const double device_seconds = timer.Seconds(start, end);
  MESSAGE(fmt::format("20 fp32 4096^3 GEMMs: {:.3f} ms on the device, {:.3f} ms on the host until "
                      "synchronized ({:.1f} TFLOP/s)",
                      device_seconds * 1e3, host * 1e3, 20 * 2.0 * std::pow(4096.0, 3) / device_seconds / 1e12));
  CHECK(device_seconds > 0);
  CHECK(device_seconds <= host * 1.01);
  CHECK(timer.Offset(end) >= timer.Offset(start));
}

TEST_CASE("a CUDA run's measurement and trace come from GPU timings") {
  if (SkipWithoutCuda()) return;
  TrainOptions options = TinyOptions(1, 1, 1, 2);
  options.device = "cuda";
  options.steps = 4;
  options.output_dir = TestDir("gpu_reports");
  const TestRun run = RunInProcess(options, "gpu_reports_store");
  const auto& m = run.measurement;
  CHECK(m.at("iteration_seconds").get<double>() > 0);
  const auto& events = m.at("ranks").at(0).at("events");
  int forwards = 0;
  double last_start = -1;
  for (const auto& e : events) {
    if (e[1] == "forward") {
      ++forwards;
      CHECK(e[3].get<double>() > 0);
      CHECK(e[2].get<double>() >= last_start);
      last_start = e[2].get<double>();
    }
  }
  CHECK(forwards == 3 * 2);  // trace_steps x microbatches
  CHECK(m.at("predicted_vs_measured").at("cluster") == "local-cuda");
  // Device memory (LibTorch >= 2.9): the allocator's peaks, what lies outside it, and the
  // predicted peak beside the measured one.
  const auto& rank = m.at("ranks").at(0);
#if STRATOS_TORCH_AT_LEAST(2, 9)
  REQUIRE(rank.contains("memory"));
#endif
  if (rank.contains("memory")) {
    const auto& memory = rank.at("memory");
    CHECK(memory.at("peak_allocated_bytes").get<double>() > 0);
    CHECK(memory.at("peak_reserved_bytes").get<double>() >=
          memory.at("peak_allocated_bytes").get<double>());
    CHECK(memory.at("outside_allocator_bytes").get<double>() > 0);  // the CUDA context at least
    const auto& stage = m.at("predicted_vs_measured").at("stages").at(0);
    CHECK(stage.at("predicted_peak_memory_bytes").get<double>() > 0);
    CHECK(stage.contains("measured_peak_allocated_bytes"));
  } else {
    MESSAGE("no device memory statistics in this LibTorch (" << TORCH_VERSION << ")");
  }
}

TEST_CASE("a Kineto trace of one CUDA step holds the step's GPU kernels") {
  if (SkipWithoutCuda()) return;
  if (!KinetoAvailable()) {
    MESSAGE("skipped: this build has no Kineto profiler");
    return;
  }
  TrainOptions options = TinyOptions(1, 1, 1, 2);
  options.device = "cuda";
  options.steps = 3;
  options.kineto_step = 1;
  options.output_dir = TestDir("gpu_kineto");
  RunInProcess(options, "gpu_kineto_store");
  std::ifstream in(options.output_dir + "/kineto/rank_0.json");
  REQUIRE(in.good());
  const auto trace = nlohmann::json::parse(in);
  int kernels = 0, operators = 0;
  for (const auto& event : trace.at("traceEvents")) {
    const std::string category = event.value("cat", "");
    if (category == "kernel") ++kernels;
    if (category == "cpu_op") ++operators;
  }
  MESSAGE(fmt::format("Kineto trace of one step: {} GPU kernels, {} CPU operators", kernels,
                      operators));
  CHECK(kernels > 50);
  CHECK(operators > kernels / 2);
}

}  // TEST_SUITE("gpu")

}  // namespace
}  // namespace stratos
