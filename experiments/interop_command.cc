// `stratos export` and `stratos import` (interop/interop.h), and search's --export.
#include <fmt/format.h>

#include <cmath>
#include <nlohmann/json.hpp>

#include "costmodel/cluster_io.h"
#include "costmodel/error.h"
#include "costmodel/evaluate.h"
#include "costmodel/model_io.h"
#include "costmodel/zoo.h"
#include "experiments/commands.h"
#include "experiments/output.h"
#include "experiments/searchers.h"
#include "interop/interop.h"

namespace stratos {

namespace {

// Plan files carry their global batch; the problem takes it from there.
Problem ProblemForPlan(const ProblemArgs& args, const Plan& plan) {
  ProblemArgs with_batch = args;
  with_batch.global_batch_size = plan.global_batch_size;
  return LoadProblem(with_batch);
}

std::string PercentChange(double after, double before) {
  return fmt::format("{:+.1f}%", 100 * (after / before - 1));
}

// Writes ExportPlan's files into `dir` as one set (OutputSet); returns their names.
std::vector<std::string> ExportPlanToDirectory(const Problem& problem, const Plan& plan,
                                               Target target, const std::string& dir,
                                               const std::string& where) {
  const std::vector<ExportFile> files = ExportPlan(problem, plan, target, where);
  std::vector<std::string> names;
  for (const ExportFile& file : files) names.push_back(file.name);
  OutputSet outputs(dir, names);
  for (const ExportFile& file : files)
    WriteFileAtomically(outputs.Path(file.name), file.text, file.executable);
  outputs.Commit();
  return names;
}

}  // namespace

int RunExport(const ExportArgs& args) {
  const Target target = ParseTarget(args.target, "command line: --to");
  Plan plan = ReadPlanFile(args.plan_file);
  Problem problem = ProblemForPlan(args.problem, plan);
  ValidatePlan(problem, plan, args.plan_file);
  const std::string training_change = TargetTrainingChange(target, problem.training);
  if (!training_change.empty()) fmt::print("{}\n", training_change);
  problem.training = TrainingForTarget(target, problem.training);
  const Estimate original = Evaluate(problem, plan);
  fmt::print("plan {}: {}\npredicted iteration: {:.4f} s{}\n", args.plan_file, plan.Summary(),
             original.iteration_seconds,
             original.Fits() ? "" : "; DOES NOT FIT: " + original.MemoryViolation());
  if (!original.Fits() && !training_change.empty())
    fmt::print("(`stratos search --export {}` searches plans priced as {} runs them)\n",
               args.target, args.target);
  if (args.nearest) {
    const NearestPlan nearest = NearestPlanForTarget(problem, plan, target, args.plan_file);
    if (nearest.changes.empty()) {
      fmt::print("{} runs the plan as it is\n", args.target);
    } else {
      const Estimate estimate = Evaluate(problem, nearest.plan);
      fmt::print("nearest plan {} runs: {}\n", args.target, nearest.plan.Summary());
      for (const std::string& change : nearest.changes) fmt::print("  changed: {}\n", change);
      fmt::print("predicted iteration: {:.4f} s (the plan's {:.4f} s, {}){}\n",
                 estimate.iteration_seconds, original.iteration_seconds,
                 PercentChange(estimate.iteration_seconds, original.iteration_seconds),
                 estimate.Fits() ? "" : "; DOES NOT FIT: " + estimate.MemoryViolation());
      plan = nearest.plan;
    }
  }
  const std::vector<std::string> names =
      ExportPlanToDirectory(problem, plan, target, args.output_dir, args.plan_file);
  for (const std::string& name : names) fmt::print("wrote {}/{}\n", args.output_dir, name);
  if (!args.plan_output.empty()) WriteJsonAtomically(args.plan_output, PlanToJson(plan));
  return kExitSuccess;
}

int RunImport(const ImportArgs& args) {
  const Target target = ParseTarget(args.from, "command line: --from");
  ClusterSpec cluster = ReadClusterFile(ResolveClusterPath(args.problem.cluster));
  if (!args.problem.nodes.empty()) cluster = cluster.WithNodeCounts(args.problem.nodes);
  ImportedConfig imported = ImportConfig(target, args.file, cluster.NumDevices());
  ParallelLayout& layout = imported.layout;
  if (imported.world_known && args.problem.nodes.empty()) {
    if (layout.gpus_per_node > cluster.GpusPerNode())
      ThrowInputError(args.file, "processes per node", layout.gpus_per_node,
                      fmt::format("the cluster {} has {} GPUs per node (give --cluster)",
                                  cluster.name, cluster.GpusPerNode()));
    cluster = cluster.WithNodes(layout.nodes);
  }
  Problem problem;
  problem.cluster = cluster;
  if (!args.problem.model.empty()) {
    problem.model = ReadModelFile(ResolveModelPath(args.problem.model), args.problem.seq_length);
  } else if (!imported.model.family.empty()) {
    problem.model = imported.model;
    if (args.problem.seq_length > 0) {
      problem.model.seq_length = args.problem.seq_length;
      problem.model.max_position_embeddings =
          std::max(problem.model.max_position_embeddings, args.problem.seq_length);
    }
    BuildTransformerLayers(problem.model);
  } else {
    ThrowInputError(args.file, "model", "(not in the configuration)", "give --model");
  }
  if (layout.blocks.empty()) layout.blocks = {problem.model.num_layers};
  problem.training.global_batch_size = layout.global_batch_size;
  problem.training.schedule = layout.schedule;
  SetDpOverlap(args.problem, &problem.training);
  if (layout.tensor_parallel > 1) problem.training.sequence_parallel = layout.sequence_parallel;
  const std::string training_change = TargetTrainingChange(target, problem.training);
  problem.training = TrainingForTarget(target, problem.training);
  // The configuration's gradient buckets and all-gather overlap, unless the flags give them.
  std::string overlap_note;
  if (args.problem.dp_bucket_mib == 0 && imported.dp_bucket_params > 0) {
    problem.training.dp_bucket_bytes =
        imported.dp_bucket_params * problem.training.grad_dtype_bytes;
    overlap_note = fmt::format(
        "DP gradients reduced in buckets of {:.4g} M parameters under the backward pass "
        "(the configuration's {})",
        imported.dp_bucket_params / 1e6,
        target == Target::kDeepSpeed ? "zero_optimization.overlap_comm" : "--overlap-grad-reduce");
    if (args.problem.dp_overlap == 0 && imported.overlap_param_gather) {
      problem.training.dp_overlap_fraction = 1.0;
      overlap_note += "; the parameter all-gather under the next forward (--overlap-param-gather)";
    }
  }
  const Plan plan = PlanFromLayout(problem, layout, args.file);
  const Estimate estimate = Evaluate(problem, plan);
  fmt::print("problem: {} on {} ({} devices), global batch {}, seq {}\n", problem.model.name,
             problem.cluster.NodesLabel(), problem.NumDevices(),
             problem.training.global_batch_size, problem.model.seq_length);
  if (!training_change.empty()) fmt::print("{}\n", training_change);
  if (!overlap_note.empty()) fmt::print("{}\n", overlap_note);
  fmt::print("{}", EstimateReport(estimate, plan));
  if (!args.plan_output.empty()) {
    WriteJsonAtomically(args.plan_output, PlanToJson(plan));
    fmt::print("wrote {}\n", args.plan_output);
  }
  fmt::print("your configuration: {:.4f} s/iteration{}\n", estimate.iteration_seconds,
             estimate.Fits() ? "" : " (does not fit: " + estimate.MemoryViolation() + ")");
  if (!args.search) return estimate.Fits() ? kExitSuccess : kExitNoResult;

  std::optional<Plan> best;
  double best_seconds = INFINITY;
  std::string best_algorithm;
  for (const std::string& algorithm : ExpandAlgorithms(args.algorithms)) {
    SearcherSetup setup(algorithm);
    setup.search_options().time_limit_seconds = args.time_limit_seconds;
    setup.search_options().progress = true;
    setup.Validate("command line");
    const SearchResult result = setup.MakeSearcher()->Search(problem, setup.search_options());
    if (!result.plan) continue;
    const double seconds = Evaluate(problem, *result.plan).iteration_seconds;
    if (seconds < best_seconds) {
      best = result.plan;
      best_seconds = seconds;
      best_algorithm = algorithm;
    }
  }
  if (!best) {
    fmt::print(stderr, "stratos: the search found no feasible plan\n");
    return kExitNoResult;
  }
  fmt::print("best found ({}): {:.4f} s/iteration ({} against your configuration)\n  {}\n",
             best_algorithm, best_seconds,
             PercentChange(best_seconds, estimate.iteration_seconds), best->Summary());
  return kExitSuccess;
}

}  // namespace stratos
