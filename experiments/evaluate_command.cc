#include <nlohmann/json.hpp>

#include "costmodel/error.h"
#include "costmodel/evaluate.h"
#include "experiments/commands.h"
#include "experiments/run_commands.h"
#include "experiments/output.h"

namespace stratos {

namespace {

// A Megatron-style plan: PP uniform stages, each a mesh of DP x TP devices.
Plan UniformPlan(const Problem& problem, const EvaluateArgs& args) {
  const std::string where = "command line";
  // --tp/--pp/--dp/--micro-batch are >= 1 (checked while parsing); --tp needs the others.
  if (args.pipeline_parallel < 1 || args.data_parallel < 1 || args.micro_batch_size < 1)
    throw InputError("command line: a uniform plan needs --tp, --pp, --dp and --micro-batch");
  const int batch = problem.training.global_batch_size;
  const int per_microbatch = args.micro_batch_size * args.data_parallel;
  if (batch % per_microbatch != 0)
    ThrowInputError(where, "--micro-batch", args.micro_batch_size,
                    fmt::format("micro-batch x dp = {} must divide the global batch {}",
                                per_microbatch, batch));
  const int gpus_per_node = problem.cluster.GpusPerNode();
  const int mesh_devices = args.data_parallel * args.tensor_parallel;
  StageConfig config;
  if (!SetMeshForDevices(config, mesh_devices, gpus_per_node))
    ThrowInputError(where, "--dp", args.data_parallel,
                    fmt::format("dp x tp = {} must fit in a node or fill whole nodes of {} GPUs",
                                mesh_devices, gpus_per_node));
  config.data_parallel = args.data_parallel;
  config.tensor_parallel = args.tensor_parallel;
  config.zero_stage = args.zero_stage;
  config.recompute = ParseRecompute(args.recompute, where + ": --recompute");
  config.grad_compression = CompressionFromCommandLine(args.grad_compression, args.topk_density,
                                                      args.topk_momentum, args.powersgd_rank);
  Plan plan;
  plan.global_batch_size = batch;
  plan.num_microbatches = batch / per_microbatch;
  plan.schedule = problem.training.schedule;
  // Megatron-LM's placement: blocks split over the stages, embedding first, head last.
  const bool blocks = problem.model.num_layers + 2 == problem.NumLayers();
  const int max_stages = blocks ? problem.model.num_layers : problem.NumLayers();
  if (args.pipeline_parallel > max_stages)
    ThrowInputError(where, "--pp", args.pipeline_parallel,
                    fmt::format("must be at most the model's {} {}", max_stages,
                                blocks ? "transformer blocks" : "layers"));
  const std::vector<std::pair<int, int>> ranges =
      MegatronStageLayers(problem.model, args.pipeline_parallel);
  for (auto [first, last] : ranges) plan.stages.push_back({first, last, config});
  ValidatePlan(problem, plan, "command line (--tp/--pp/--dp/--micro-batch)");
  return plan;
}

}  // namespace

int RunEvaluate(const EvaluateArgs& args) {
  const Problem problem = LoadProblem(args.problem);
  Plan plan;
  if (!args.plan_file.empty()) {
    plan = ReadPlanFile(args.plan_file);
    ValidatePlan(problem, plan, args.plan_file);
  } else {
    plan = UniformPlan(problem, args);
  }
  const Estimate estimate = Evaluate(problem, plan);
  fmt::print("problem: {} on {} x {} ({} devices), global batch {}\n", problem.model.name,
             problem.cluster.NumNodes(), problem.cluster.name, problem.NumDevices(),
             problem.training.global_batch_size);
  fmt::print("{}", EstimateReport(estimate, plan));
  if (!args.json_file.empty()) {
    nlohmann::json json = EstimateToJson(estimate, plan);
    json["plan"] = PlanToJson(plan);
    WriteJsonAtomically(args.json_file, json);
  }
  if (!args.trace_file.empty()) WritePlanTrace(args.trace_file, estimate, plan, problem.model.name);
  if (!estimate.Fits()) {
    fmt::print(stderr, "stratos: plan does not fit: {}\n", estimate.MemoryViolation());
    return kExitNoResult;
  }
  return kExitSuccess;
}

}  // namespace stratos
