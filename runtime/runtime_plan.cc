#include "runtime/runtime_plan.h"

#include <fmt/format.h>

#include <algorithm>
#include <thread>

#include "costmodel/cluster_io.h"
#include "costmodel/error.h"
#include "costmodel/model_io.h"
#include "costmodel/zoo.h"
#include "runtime/device.h"
#include "runtime/gpt.h"

namespace stratos {

using torch::Tensor;

ModelSpec LoadRuntimeModel(const std::string& name_or_path, int seq_length) {
  return ReadModelFile(ResolveModelPath(name_or_path), seq_length);
}

double LocalWorkerSlowdown(int num_workers) {
  if (num_workers < 1) ThrowInputError("local workers", "num_workers", num_workers, "must be >= 1");
  const double threads = std::max(1u, std::thread::hardware_concurrency());
  return std::max(1.0, num_workers / threads);
}

ClusterSpec LocalCpuCluster(int num_workers, double flops_per_worker) {
  ClusterSpec cluster;
  cluster.name = "local-cpu";
  cluster.source = "this machine's CPU worker processes (runtime/runtime_plan.h LocalCpuCluster)";
  DeviceSpec device;
  device.name = "cpu-worker";
  device.peak_flops = flops_per_worker;
  device.memory_bytes = 4.0 * (1ull << 30);
  device.hbm_bytes_per_second = 10e9;
  device.matmul_efficiency = 1.0;
  device.source = "peak = measured fp32 matmul FLOP/s of one thread; memory and bandwidth assumed";
  cluster.devices.push_back(device);
  cluster.node_groups.push_back({1, std::max(1, num_workers), device.name});
  NetworkLevel loopback;
  loopback.name = "loopback (Gloo over TCP)";
  loopback.bandwidth_bytes_per_second = 1e9;
  loopback.latency_seconds = 30e-6;
  loopback.source = "assumed; calibrate from predicted_vs_measured.json";
  cluster.networks.push_back(loopback);
  return cluster;
}

double MeasureMatmulFlops(int n, torch::Device device, torch::ScalarType dtype) {
  torch::NoGradGuard no_grad;
  const auto options = torch::TensorOptions().dtype(dtype).device(device);
  Tensor a = torch::randn({n, n}, options), b = torch::randn({n, n}, options);
  Tensor c = torch::mm(a, b);  // warm-up
  const int reps = 5;
  DeviceTimer timer(device);
  const int start = timer.Mark();
  for (int i = 0; i < reps; ++i) torch::mm_out(c, a, b);
  const int end = timer.Mark();
  timer.Synchronize();
  return reps * 2.0 * n * n * n / std::max(timer.Seconds(start, end), 1e-9);
}

TrainingSpec RuntimeTraining(int global_batch_size, Schedule schedule, const std::string& dtype,
                             const RuntimeGradSync& sync) {
  TrainingSpec training;
  training.global_batch_size = global_batch_size;
  training.schedule = schedule;
  // bf16 autocast keeps fp32 parameters, gradients and Adam state; activations are bf16 (the
  // residual stream too, unless --fp32-residual-connection).
  training.activation_dtype_bytes = dtype == "bf16" ? 2 : 4;
  training.param_dtype_bytes = 4;
  training.grad_dtype_bytes = 4;
  training.optimizer_state_bytes_per_param = 8;
  // Beside each parameter's fp32 gradient, the gradient synchronizer's flat fp32 buffer
  // (data_parallel.h; under ZeRO-2/3 at DP > 1 only this rank's shard of it, which the model
  // states count); with bf16 autocast, its cache of bf16 weight copies during the passes.
  training.grad_buffer_bytes_per_param = 4;
  training.buffer_bytes_per_param = dtype == "bf16" ? 2 : 0;
  training.optimizer_step_bytes_per_param = 28;
  // The synchronizer reduces (ZeRO-1: reduce-scatters) once, in the last microbatch's backward
  // pass bucket by bucket (or after it without overlap), ZeRO-2/3 in every microbatch's (each
  // pass's reduce-scatters waited for at its end: the m - 1 before the last priced exposed);
  // ShardedAdam all-gathers the updated shards after the step, with nothing to hide behind.
  training.dp_bucket_bytes = sync.overlap ? static_cast<double>(sync.bucket_bytes) : 0.0;
  training.dp_overlap_fraction = 0.0;
  training.zero_reduce_every_microbatch = true;
  training.zero3_gather = Zero3Gather::kLayer;  // one gather per layer (ParameterGatherer)
  training.pp_scatter_gather = true;  // 1/tp per TP rank, then a TP all-gather (pipeline_step.h)
  training.sequence_parallel = false;
  return training;
}

bool RuntimeFlashAttention() { return TORCH_VERSION_MAJOR >= 2; }

Problem RuntimeProblem(const ModelSpec& model, const Plan& plan, int num_workers,
                       double flops_per_worker, const std::string& cluster,
                       const std::string& dtype, bool flash_attention,
                       const RuntimeGradSync& sync) {
  Problem problem;
  problem.model = model;
  problem.cluster = cluster.empty() ? LocalCpuCluster(num_workers, flops_per_worker)
                                    : ReadClusterFile(ResolveClusterPath(cluster));
  // A plan searched on a heterogeneous cluster runs on this machine's workers with its node
  // groups mapped to worker subsets: one group of the workers per group the plan names.
  int groups = 1;
  for (const StagePlan& stage : plan.stages) groups = std::max(groups, stage.config.node_group + 1);
  if (cluster.empty() && groups > 1) {
    const NodeGroup workers = problem.cluster.node_groups.front();
    problem.cluster.node_groups.clear();
    for (int g = 0; g < groups; ++g) {
      int devices = 0;
      for (int r = 0; r < plan.NumPipelineRanks(); ++r)
        if (plan.stages[r].config.node_group == g) devices += plan.stages[r].config.NumDevices();
      problem.cluster.node_groups.push_back(
          {1, std::max(1, devices), workers.device, fmt::format("workers-{}", g)});
    }
  }
  // With virtual stages the synchronizer is not armed (pipeline_step.cc): the whole reduction
  // follows the last backward pass.
  RuntimeGradSync priced = sync;
  if (plan.virtual_stages > 1) priced.overlap = false;
  problem.training = RuntimeTraining(plan.global_batch_size, plan.schedule, dtype, priced);
  if (flash_attention) UseFlashAttention(problem.model);
  return problem;
}

void CheckRuntimePlan(const ModelSpec& model, const Plan& plan, int world_size,
                      const std::string& where, int data_vocab_size, const std::string& cluster) {
  CheckRuntimeModel(model);
  if (plan.virtual_stages > 1 && plan.num_microbatches % plan.NumPipelineRanks() != 0)
    ThrowInputError(where, "num_microbatches", plan.num_microbatches,
                    fmt::format("must be a multiple of the {} pipeline ranks for the interleaved "
                                "1F1B schedule (virtual_stages {})",
                                plan.NumPipelineRanks(), plan.virtual_stages));
  if (plan.NumDevices() != world_size)
    ThrowInputError(where, "stages", fmt::format("{} devices in all", plan.NumDevices()),
                    fmt::format("must equal the {} worker processes (--nproc / WORLD_SIZE)",
                                world_size));
  ValidatePlan(RuntimeProblem(model, plan, world_size, 1e10, cluster, "f32",
                              RuntimeFlashAttention()),
               plan, where);
  for (int s = 0; s < plan.NumStages(); ++s) {
    const StageConfig& c = plan.stages[s].config;
    const int tp = c.tensor_parallel;
    if (model.ffn_hidden_size % tp != 0)
      ThrowInputError(where, fmt::format("stages[{}].tensor_parallel", s), tp,
                      fmt::format("must divide the model's ffn_hidden_size {}",
                                  model.ffn_hidden_size));
    if (model.vocab_size % tp != 0)
      ThrowInputError(where, fmt::format("stages[{}].tensor_parallel", s), tp,
                      fmt::format("must divide the model's vocab_size {} (vocab-parallel "
                                  "embedding)",
                                  model.vocab_size));
  }
  if (data_vocab_size > model.vocab_size)
    ThrowInputError(model.source.empty() ? model.name : model.source, "model.vocab_size",
                    model.vocab_size,
                    fmt::format("must be >= the data's {} distinct characters", data_vocab_size));
}

Plan UniformRuntimePlan(const ModelSpec& model, int pp, int dp, int tp, int micro_batch,
                        int global_batch, Schedule schedule, int zero_stage, Recompute recompute,
                        int virtual_stages) {
  const std::string where = "command line";
  if (pp < 1) ThrowInputError(where, "--pp", pp, "must be >= 1");
  if (model.NumLayers() == model.num_layers + 2 && pp > model.num_layers)
    ThrowInputError(where, "--pp", pp,
                    fmt::format("must be at most the model's {} transformer blocks",
                                model.num_layers));
  if (virtual_stages < 1)
    ThrowInputError(where, "--virtual-stages", virtual_stages, "must be >= 1");
  if (virtual_stages > 1 && model.NumLayers() == model.num_layers + 2 &&
      pp * virtual_stages > model.num_layers)
    ThrowInputError(where, "--virtual-stages", virtual_stages,
                    fmt::format("--pp x --virtual-stages = {} must be at most the model's {} "
                                "transformer blocks",
                                pp * virtual_stages, model.num_layers));
  if (dp < 1) ThrowInputError(where, "--dp", dp, "must be >= 1");
  if (tp < 1) ThrowInputError(where, "--tp", tp, "must be >= 1");
  if (micro_batch < 1) ThrowInputError(where, "--micro-batch", micro_batch, "must be >= 1");
  if (global_batch < 1 || global_batch % (micro_batch * dp) != 0)
    ThrowInputError(where, "--global-batch", global_batch,
                    fmt::format("must be a positive multiple of micro-batch x dp = {}",
                                micro_batch * dp));
  Plan plan;
  plan.global_batch_size = global_batch;
  plan.num_microbatches = global_batch / (micro_batch * dp);
  plan.schedule = schedule;
  StageConfig config;
  config.mesh_nodes = 1;
  config.mesh_gpus_per_node = dp * tp;
  config.data_parallel = dp;
  config.tensor_parallel = tp;
  config.zero_stage = zero_stage;
  config.recompute = recompute;
  plan.virtual_stages = virtual_stages;
  for (auto [first, last] : MegatronStageLayers(model, pp * virtual_stages))
    plan.stages.push_back({first, last, config});
  return plan;
}

}  // namespace stratos
