#include <nlohmann/json.hpp>

#include "costmodel/error.h"
#include "costmodel/evaluate.h"
#include "experiments/commands.h"
#include "experiments/run_commands.h"
#include "experiments/output.h"

namespace stratos {

namespace {

// The node group of each of `num_stages` stages of `devices` devices each: the groups that
// --stage-groups names, or, without it, the first group in the cluster's order with room left
// whose nodes can hold the mesh. Throws InputError naming --stage-groups for an unknown group or
// a wrong count, and when the stages do not fit the groups.
std::vector<int> StageGroups(const ClusterSpec& cluster, const std::string& names, int num_stages,
                             int devices) {
  const std::string where = "command line";
  std::vector<int> groups;
  if (!names.empty()) {
    size_t begin = 0;
    while (begin <= names.size()) {
      const size_t comma = std::min(names.find(',', begin), names.size());
      const std::string name = names.substr(begin, comma - begin);
      const int group = cluster.GroupIndex(name);
      if (group < 0)
        ThrowInputError(where, "--stage-groups", fmt::format("\"{}\"", names),
                        fmt::format("names no node group \"{}\" (groups: {})", name,
                                    cluster.GroupNames()));
      groups.push_back(group);
      begin = comma + 1;
    }
    if (static_cast<int>(groups.size()) != num_stages)
      ThrowInputError(where, "--stage-groups", fmt::format("\"{}\"", names),
                      fmt::format("must name one group per stage ({} for --pp {})", num_stages,
                                  num_stages));
    return groups;
  }
  std::vector<int> free(cluster.NumGroups());
  for (int g = 0; g < cluster.NumGroups(); ++g) free[g] = cluster.GroupDevices(g);
  int group = 0;
  for (int s = 0; s < num_stages; ++s) {
    StageConfig probe;
    while (group < cluster.NumGroups() &&
           (free[group] < devices ||
            !SetMeshForDevices(probe, devices, cluster.Group(group).gpus_per_node)))
      ++group;
    if (group == cluster.NumGroups())
      ThrowInputError(where, "--pp", num_stages,
                      fmt::format("{} stages of {} devices do not fill the node groups in order "
                                  "(give --stage-groups)",
                                  num_stages, devices));
    free[group] -= devices;
    groups.push_back(group);
  }
  return groups;
}

// A Megatron-style plan: PP uniform stages, each a mesh of DP x TP devices (on a heterogeneous
// cluster, in the node groups StageGroups gives); with --virtual-stages v > 1 each rank's layers
// in v chunks, the interleaved 1F1B schedule (InterleavePlan). Throws InputError naming the flag
// for a plan these flags cannot make.
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
  const ClusterSpec& cluster = problem.cluster;
  const int mesh_devices = args.data_parallel * args.tensor_parallel;
  const std::vector<int> groups =
      cluster.NumGroups() > 1 || !args.stage_groups.empty()
          ? StageGroups(cluster, args.stage_groups, args.pipeline_parallel, mesh_devices)
          : std::vector<int>(args.pipeline_parallel, 0);
  StageConfig config;
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
  for (size_t s = 0; s < ranges.size(); ++s) {
    config.node_group = groups[s];
    const int gpus_per_node = cluster.Group(groups[s]).gpus_per_node;
    if (!SetMeshForDevices(config, mesh_devices, gpus_per_node))
      ThrowInputError(where, "--dp", args.data_parallel,
                      fmt::format("dp x tp = {} must fit in a node or fill whole nodes of {} GPUs{}",
                                  mesh_devices, gpus_per_node,
                                  cluster.NumGroups() > 1
                                      ? " (node group " + cluster.GroupName(groups[s]) + ")"
                                      : ""));
    plan.stages.push_back({ranges[s].first, ranges[s].second, config});
  }
  ValidatePlan(problem, plan, "command line (--tp/--pp/--dp/--micro-batch)");
  const int v = args.virtual_stages;
  if (v == 1) return plan;
  if (args.pipeline_parallel < 2)
    ThrowInputError(where, "--virtual-stages", v, "needs --pp >= 2 (chunks interleave ranks)");
  if (plan.schedule != Schedule::kOneFOneB)
    ThrowInputError(where, "--virtual-stages", v, "needs --schedule 1f1b (interleaved 1F1B)");
  for (size_t s = 0; s < plan.stages.size(); ++s)
    if (plan.stages[s].NumLayers() < v)
      ThrowInputError(where, "--virtual-stages", v,
                      fmt::format("exceeds the {} layers of pipeline rank {} (a chunk needs one)",
                                  plan.stages[s].NumLayers(), s));
  const std::optional<Plan> interleaved = InterleavePlan(plan, v);
  STRATOS_CHECK(interleaved.has_value(), "InterleavePlan refused v = {} for --pp {}", v,
                args.pipeline_parallel);
  ValidatePlan(problem, *interleaved, "command line (--virtual-stages)");
  return *interleaved;
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
  fmt::print("problem: {} on {} ({} devices), global batch {}\n", problem.model.name,
             problem.cluster.NodesLabel(), problem.NumDevices(),
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
