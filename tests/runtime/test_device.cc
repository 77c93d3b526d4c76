// The device-side pieces of the runtime that every machine can test: the backend following the
// tensors, device selection, the timer's host path, the run options of the GPU path and the
// problem a GPU run is predicted on (test_gpu.cc runs them on a GPU).
#include <doctest/doctest.h>
#include <torch/torch.h>

#include <chrono>
#include <thread>

#include "costmodel/error.h"
#include "costmodel/evaluate.h"
#include "runtime/communicator.h"
#include "runtime/device.h"
#include "runtime/kineto_trace.h"
#include "runtime/profiler.h"
#include "runtime/runtime_plan.h"
#include "runtime/trainer.h"

namespace stratos {
namespace {

TEST_CASE("the auto backend follows where the tensors live") {
  CHECK(ResolveBackend("auto", "cpu") == "gloo");
  CHECK(ResolveBackend("auto", "cuda") == (NcclAvailable() ? "nccl" : "gloo"));
  CHECK(ResolveBackend("nccl", "cpu") == "nccl");  // kept: ProcessGroups refuses it without NCCL
  CHECK(ResolveBackend("gloo", "cuda") == "gloo");
  CHECK_THROWS_WITH_AS(ResolveBackend("mpi", "cpu"),
                       doctest::Contains("backend = mpi: must be gloo, nccl or auto"), InputError);
}

TEST_CASE("a rank's device: the CPU, or its GPU; cuda without a GPU is refused by name") {
  CHECK((RankDevice("cpu", 3) == torch::Device(torch::kCPU)));
  CHECK_THROWS_WITH_AS(RankDevice("tpu", 0), doctest::Contains("device = \"tpu\": must be cpu or cuda"),
                       InputError);
  if (torch::cuda::is_available()) {
    const int count = static_cast<int>(torch::cuda::device_count());
    CHECK(static_cast<int>(RankDevice("cuda", count + 1).index()) == (count + 1) % count);
  } else {
    CHECK_THROWS_WITH_AS(RankDevice("cuda", 0), doctest::Contains("sees no CUDA device"),
                         InputError);
  }
}

TEST_CASE("autocast scopes are no-ops when disabled, and AutocastInput leaves CPU tensors alone") {
  const torch::Tensor x = torch::ones({2, 3});
  {
    AutocastScope off(false);
    CHECK_FALSE(AutocastEnabled());
  }
  CHECK((AutocastInput(x).scalar_type() == torch::kFloat32));
  if (!AutocastSupported()) CHECK_THROWS_AS(AutocastScope(true), std::runtime_error);
}

TEST_CASE("the timer's host path: marks, spans and offsets in seconds") {
  DeviceTimer timer(torch::Device(torch::kCPU));
  const int a = timer.Mark();
  std::this_thread::sleep_for(std::chrono::milliseconds(20));
  const int b = timer.Mark();
  timer.Synchronize();
  CHECK(timer.Seconds(a, b) >= 0.019);
  CHECK(timer.Seconds(a, b) < 5);
  CHECK(timer.Offset(b) >= timer.Offset(a));
  CHECK(timer.Offset(a) >= 0);
  timer.Clear();
  CHECK(timer.Mark() == 0);  // indices are reused
  CHECK_THROWS(timer.Seconds(0, 1));
}

TEST_CASE("run options of the GPU path are checked by name") {
  TrainOptions options;
  options.dtype = "bf16";
  CHECK_THROWS_WITH_AS(options.Validate(), doctest::Contains("dtype = \"bf16\": needs device cuda"),
                       InputError);
  options.device = "cuda";
  CHECK_NOTHROW(options.Validate());
  options.dtype = "f16";
  CHECK_THROWS_WITH_AS(options.Validate(), doctest::Contains("dtype = \"f16\": must be f32 or bf16"),
                       InputError);
  options.dtype = "f32";
  options.fp32_residual_connection = true;
  CHECK_THROWS_WITH_AS(options.Validate(),
                       doctest::Contains("fp32_residual_connection = true: applies to dtype bf16 only"),
                       InputError);
  options.dtype = "bf16";
  CHECK_NOTHROW(options.Validate());
  options.cluster = "h200-node";
  const TrainOptions back = TrainOptionsFromJson(TrainOptionsToJson(options), "test");
  CHECK(back.device == "cuda");
  CHECK(back.dtype == "bf16");
  CHECK(back.fp32_residual_connection);
  CHECK(back.cluster == "h200-node");
}

TEST_CASE("a Kineto trace is refused by name where the build has none, or without an output") {
  TrainOptions options;
  options.kineto_step = 0;
  if (!KinetoAvailable()) {
    CHECK_THROWS_WITH_AS(options.Validate(), doctest::Contains("no Kineto profiler"), InputError);
    CHECK_THROWS_AS(StartKinetoTrace(false), std::runtime_error);
  } else {
    CHECK_THROWS_WITH_AS(options.Validate(), doctest::Contains("needs an output directory"),
                         InputError);
  }
  options.kineto_step = -2;
  CHECK_THROWS_WITH_AS(options.Validate(), doctest::Contains("kineto_step = -2: must be >= -1"),
                       InputError);
  CHECK_THROWS_AS(StopKinetoTrace("unused.json"), std::runtime_error);  // none running
}

TEST_CASE("a GPU run is predicted on its cluster description, bf16 activations at 2 bytes") {
  const ModelSpec model = LoadRuntimeModel("gpt3-1.3b", 0);
  const Plan plan = UniformRuntimePlan(model, 1, 1, 1, 4, 16, Schedule::kOneFOneB, 0,
                                       Recompute::kNone);
  const Problem problem = RuntimeProblem(model, plan, 1, 0, "h200-node", "bf16");
  CHECK(problem.cluster.Device().name == "H200-SXM5-141GB");
  CHECK(problem.training.activation_dtype_bytes == 2);
  CHECK(problem.training.param_dtype_bytes == 4);
  // The gradient synchronizer's flat buffer and autocast's bf16 weight copies.
  CHECK(problem.training.grad_buffer_bytes_per_param == 4);
  CHECK(problem.training.buffer_bytes_per_param == 2);
  CHECK(problem.model.layers[1].activation_attention_bytes > 0);
  const Problem fused = RuntimeProblem(model, plan, 1, 0, "h200-node", "bf16", true);
  CHECK(fused.model.layers[1].activation_attention_bytes == 0);
  CHECK(!ReadDeviceMemory(torch::Device(torch::kCPU)).has_value());
  CHECK(RuntimeProblem(model, plan, 1).cluster.name == "local-cpu");
  CHECK_THROWS_AS(RuntimeProblem(model, plan, 1, 0, "no-such-cluster"), InputError);
}

TEST_CASE("the runtime's DP gradient sync is priced as its synchronizer runs it") {
  const ModelSpec model = LoadRuntimeModel("gpt3-1.3b", 0);
  const Plan plan = UniformRuntimePlan(model, 1, 8, 1, 1, 16, Schedule::kOneFOneB, 1,
                                       Recompute::kNone);
  // Buckets launched from the last backward pass's hooks: the reduction is bucketed; the
  // all-gather after the step is exposed whole.
  RuntimeGradSync sync;
  sync.bucket_bytes = 25 << 20;
  const Problem bucketed = RuntimeProblem(model, plan, 8, 0, "h200-node", "bf16", true, sync);
  CHECK(bucketed.training.dp_bucket_bytes == 25 << 20);
  CHECK(bucketed.training.dp_overlap_fraction == 0);
  CHECK(bucketed.training.zero_reduce_every_microbatch);
  // ZeRO-3 gathers a layer at a time (ParameterGatherer), not DeepSpeed's tensor at a time.
  CHECK(bucketed.training.zero3_gather == Zero3Gather::kLayer);
  CHECK(RuntimeProblem(model, plan, 8, 0, "h200-node", "bf16", true).training.dp_bucket_bytes ==
        1 << 20);
  // Without overlap the whole reduction runs after the backward pass.
  sync.overlap = false;
  const Problem after = RuntimeProblem(model, plan, 8, 0, "h200-node", "bf16", true, sync);
  CHECK(after.training.dp_bucket_bytes == 0);
  const Estimate hidden = Evaluate(bucketed, plan), exposed = Evaluate(after, plan);
  const StageTerms& h = hidden.stages.at(0).terms;
  const StageTerms& e = exposed.stages.at(0).terms;
  CHECK(h.dp_sync_seconds == doctest::Approx(e.dp_sync_seconds));
  CHECK(e.dp_sync_exposed_seconds == doctest::Approx(e.dp_sync_seconds));
  CHECK(h.dp_bucketed_sync_seconds > 0);
  CHECK(hidden.iteration_seconds < exposed.iteration_seconds);
  // ZeRO-2 reduce-scatters each of the m = 2 microbatches' gradients: the first one's is priced in
  // the microbatch time, exposed; ZeRO-1 reduces once.
  CHECK(h.zero_reduce_scatter_seconds == 0);
  Plan zero2 = plan;
  zero2.stages[0].config.zero_stage = 2;
  REQUIRE(zero2.num_microbatches == 2);
  const StageTerms& z = Evaluate(bucketed, zero2).stages.at(0).terms;
  CHECK(z.zero_reduce_scatter_seconds > 0);
  // An interleaved plan's runs reduce after the last backward pass.
  const Plan interleaved = UniformRuntimePlan(model, 2, 4, 1, 1, 16, Schedule::kOneFOneB, 1,
                                              Recompute::kNone, 2);
  sync.overlap = true;
  CHECK(RuntimeProblem(model, interleaved, 8, 0, "h200-node", "bf16", true, sync)
            .training.dp_bucket_bytes == 0);
}

}  // namespace
}  // namespace stratos

namespace stratos {
namespace {

TEST_CASE("the block profile times blocks per block of a stack, forward with the autograd graph") {
  ProfileOptions options;
  options.repeats = 1;
  options.layer_hiddens = {64};
  options.layer_head_dims = {64};  // one head dimension: one row per TP degree
  options.layer_seq_lens = {16};
  options.layer_micro_batches = {2};
  options.layer_tensor_parallel = {1, 2};
  options.layer_stack = 3;
  const std::vector<LayerRow> rows = ProfileLayers(options);
  REQUIRE(rows.size() == 2);
  for (const LayerRow& row : rows) {
    CHECK(row.forward_seconds > 0);
    CHECK(row.backward_seconds > 0);
    CHECK(row.dtype == "f32");
  }
  CHECK(rows[1].forward_flops == doctest::Approx(rows[0].forward_flops / 2));  // one TP shard
  options.layer_stack = 0;
  CHECK_THROWS_WITH_AS(options.Validate(), doctest::Contains("layer_stack = 0: must be >= 1"),
                       InputError);
}

}  // namespace
}  // namespace stratos
