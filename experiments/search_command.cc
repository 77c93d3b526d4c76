#include <CLI/CLI.hpp>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <limits>
#include <optional>
#include <nlohmann/json.hpp>

#include "costmodel/error.h"
#include "costmodel/evaluate.h"
#include "experiments/cli_rules.h"
#include "experiments/commands.h"
#include "experiments/output.h"
#include "experiments/run_commands.h"
#include "experiments/searchers.h"
#include "interop/interop.h"
#include "runtime/data.h"
#include "runtime/launcher.h"
#include "runtime/trainer.h"

namespace stratos {

namespace {

constexpr double kGiB = 1024.0 * 1024.0 * 1024.0;

struct Outcome {
  std::string algorithm;
  SearchResult result;
  std::optional<Estimate> estimate;
  nlohmann::json options;  // every option of the searcher, by name, as used
};

double MinHeadroomBytes(const Estimate& estimate) {
  double headroom = std::numeric_limits<double>::infinity();
  for (const StageEstimate& stage : estimate.stages)
    headroom = std::min(headroom, stage.MemoryHeadroomBytes());
  return headroom;
}

nlohmann::json ProblemJson(const Problem& problem) {
  const ClusterSpec& cluster = problem.cluster;
  nlohmann::json groups = nlohmann::json::array();
  for (int g = 0; g < cluster.NumGroups(); ++g)
    groups.push_back({{"name", cluster.GroupName(g)},
                      {"device", cluster.Group(g).device},
                      {"nodes", cluster.Group(g).count},
                      {"gpus_per_node", cluster.Group(g).gpus_per_node}});
  return {{"model", problem.model.name},
          {"model_source", problem.model.source},
          {"parameters", problem.model.ParameterCount()},
          {"num_layers", problem.NumLayers()},
          {"cluster", problem.cluster.name},
          {"cluster_source", problem.cluster.source},
          {"nodes", problem.cluster.NumNodes()},
          {"node_groups", groups},
          {"devices", problem.NumDevices()},
          {"global_batch_size", problem.training.global_batch_size},
          {"seq_length", problem.model.seq_length},
          {"schedule", ScheduleName(problem.training.schedule)},
          {"dp_overlap_fraction", problem.training.dp_overlap_fraction},
          {"dp_bucket_bytes", problem.training.dp_bucket_bytes},
          {"grad_dtype_bytes", problem.training.grad_dtype_bytes}};
}

}  // namespace

void AddAlgorithmFlag(CLI::App* command, std::vector<std::string>& algorithms) {
  std::vector<std::string> names = SearcherNames();
  names.push_back("all");
  command
      ->add_option("--algo", algorithms,
                   "searchers, comma list or repeated (all: every one; stratos experiment "
                   "options lists their options)")
      ->delimiter(',')
      ->allow_extra_args(false)
      ->check(cli::OneOf(names))
      ->capture_default_str();
}

void AddSearchFlags(CLI::App* command, SearchArgs& args) {
  AddProblemFlags(command, args.problem);
  AddAlgorithmFlag(command, args.algorithms);
  command->add_option("--time-limit", args.time_limit_seconds, "seconds per searcher")
      ->check(cli::NumberAbove(0))
      ->capture_default_str();
  command
      ->add_option("--memory-limit", args.memory_limit_gib,
                   "GiB a searcher's tables may take (default: half the physical memory); more "
                   "and it declines the problem")
      ->check(cli::NumberAbove(0));
  command->add_option("--seed", args.seed, "random seed")
      ->check(cli::IntAtLeast(0))
      ->capture_default_str();
  command->add_option("--max-stages", args.max_stages,
                      "most pipeline stages (default: min(layers, devices, 16))")
      ->check(cli::IntAtLeast(1));
  command->add_option("--max-tp", args.max_tensor_parallel,
                      "largest tensor-parallel degree to search (default: GPUs per node); above "
                      "it, TP groups of 2, 4, ... whole nodes too")
      ->check(cli::IntAtLeast(1));
  command
      ->add_option("--virtual-stages", args.virtual_stages,
                   "model chunks per pipeline rank to offer, comma list, e.g. 1,2,4: > 1 is the "
                   "interleaved 1F1B schedule (the grid prices every uniform plan so, the other "
                   "searchers their best plan)")
      ->capture_default_str();
  command
      ->add_option("--grad-compressions", args.grad_compressions,
                   "per-stage gradient compression options, e.g. none,bf16,powersgd or with "
                   "parameters none,powersgd(rank=1),topk(density=0.1) (changes the math of "
                   "training; see stratos cosearch)")
      ->capture_default_str();
  command
      ->add_option("--export", args.export_target,
                   "also export the best plan for this runtime into OUTPUT_DIR/export")
      ->check(cli::OneOf(TargetNames()));
  command->add_option("--output-dir", args.output_dir, "where outputs go")
      ->check(cli::OutputDirectory())->capture_default_str();
  command->add_flag("!--no-progress", args.progress, "no progress lines on stderr");
  command->add_option("--option", args.option_assignments,
                      "a searcher option by name, repeatable: relax.iterations=60, "
                      "space.max_stages=8, search.max_evaluations=1000 (list: stratos "
                      "experiment options)")
      ->allow_extra_args(false);
}

namespace {

// search --run: trains the fastest predicted plan that the runtime can run (the others are
// named with the reason) on this machine and prints the measured iteration time against the
// search's prediction. Returns the exit code.
int RunBestPlan(const SearchArgs& args, const std::vector<Outcome>& outcomes) {
  std::vector<const Outcome*> ranked;
  for (const Outcome& o : outcomes)
    if (o.estimate) ranked.push_back(&o);
  std::stable_sort(ranked.begin(), ranked.end(), [](const Outcome* a, const Outcome* b) {
    return a->estimate->iteration_seconds < b->estimate->iteration_seconds;
  });
  const ModelSpec model = LoadRuntimeModel(args.problem.model, args.problem.seq_length);
  const CharDataset data(DefaultDataPath(), model.seq_length);
  const Outcome* chosen = nullptr;
  for (const Outcome* o : ranked) {
    const Plan& plan = *o->result.plan;
    try {
      CheckRuntimePlan(model, plan, plan.NumDevices(), fmt::format("{} plan", o->algorithm),
                       data.VocabSize(), args.problem.cluster);
      chosen = o;
      break;
    } catch (const InputError& e) {
      fmt::print("--run: the runtime cannot run the {} plan yet: {}\n", o->algorithm, e.what());
    }
  }
  if (chosen == nullptr) {
    fmt::print(stderr, "stratos: --run: no plan that the runtime can run\n");
    return kExitNoResult;
  }
  TrainOptions options;
  options.model = args.problem.model;
  options.seq_length = args.problem.seq_length;
  options.plan = *chosen->result.plan;
  options.steps = args.run_steps;
  options.output_dir = args.output_dir + "/run";
  options.cluster = args.problem.cluster;
  options.Validate();
  fmt::print("\n--run: training the {} plan ({}) for {} steps, {} worker processes; logs in "
             "{}/logs\n",
             chosen->algorithm, options.plan.Summary(), options.steps, options.plan.NumDevices(),
             options.output_dir);
  std::fflush(stdout);
  const LaunchResult result =
      RunLocal(options, SelfExecutable(), {"worker", "--config"}, RunArgs().deadline_seconds);
  if (!result.Succeeded()) {
    fmt::print(stderr, "stratos: --run: workers failed: {}\n{}", result.Summary(),
               WorkerErrors(options.output_dir));
    return kExitNoResult;
  }
  const nlohmann::json measurement = ReadJsonFile(options.output_dir + "/measurement.json");
  const double measured = measurement.at("iteration_seconds").get<double>();
  const double predicted = chosen->estimate->iteration_seconds;
  const std::vector<double> losses = measurement.at("losses").get<std::vector<double>>();
  fmt::print("--run: loss {:.4f} -> {:.4f}; iteration {:.4f} s measured, {:.4f} s predicted by "
             "the search ({:+.1f}%); wrote {}/measurement.json and predicted_vs_measured.json\n",
             losses.front(), losses.back(), measured, predicted,
             100 * (predicted / measured - 1), options.output_dir);
  return kExitSuccess;
}

}  // namespace

int RunSearch(const SearchArgs& args) {
  const std::vector<std::string> algorithms = ExpandAlgorithms(args.algorithms);
  // Every searcher's options: the flags first, then --option assignments by name.
  std::vector<std::unique_ptr<SearcherSetup>> setups;
  for (const std::string& name : algorithms) {
    setups.push_back(std::make_unique<SearcherSetup>(name));
    SearchOptions& options = setups.back()->search_options();
    options.time_limit_seconds = args.time_limit_seconds;
    options.memory_limit_bytes = args.memory_limit_gib * 1024.0 * 1024.0 * 1024.0;
    options.seed = args.seed;
    options.progress = args.progress;
    options.space.max_stages = args.max_stages;
    options.space.max_tensor_parallel = args.max_tensor_parallel;
    setups.back()->Set("space.virtual_stages", args.virtual_stages,
                       "command line: --virtual-stages");
    options.space.grad_compressions =
        ParseCompressionList(args.grad_compressions, "command line", "--grad-compressions");
  }
  ApplyOptionAssignments(args.option_assignments, setups);
  for (const auto& setup : setups) setup->Validate("command line");

  Problem problem = LoadProblem(args.problem);
  // --run: the plans are priced as the runtime trains (fp32 weights, gradients, activations).
  if (args.run)
    problem.training =
        RuntimeTraining(problem.training.global_batch_size, problem.training.schedule);
  // --export: the searchers price plans as the target runs them (interop.h TrainingForTarget).
  std::optional<Target> export_target;
  if (!args.export_target.empty())
    export_target = ParseTarget(args.export_target, "command line: --export");
  std::string training_change;
  if (export_target && !args.run) {
    training_change = TargetTrainingChange(*export_target, problem.training);
    problem.training = TrainingForTarget(*export_target, problem.training);
  }
  const CostModel cost_model(problem);
  fmt::print("problem: {} ({:.3f} B parameters, {} layers) on {} ({} devices), global batch "
             "{}, seq {}, {}\n",
             problem.model.name, problem.model.ParameterCount() / 1e9, problem.NumLayers(),
             problem.cluster.NodesLabel(), problem.NumDevices(),
             problem.training.global_batch_size, problem.model.seq_length,
             ScheduleName(problem.training.schedule));
  if (!training_change.empty()) fmt::print("{}\n", training_change);

  std::vector<Outcome> outcomes;
  for (const auto& setup : setups) {
    const std::string& name = setup->algorithm();
    fmt::print("\n== {} ==\n", name);
    std::fflush(stdout);
    Outcome outcome{name, setup->MakeSearcher()->Search(problem, setup->search_options()),
                    std::nullopt, setup->ToJson()["options"]};
    fmt::print("{}\n", outcome.result.summary.BriefReport());
    if (outcome.result.plan) {
      outcome.estimate = Evaluate(cost_model, *outcome.result.plan);
      fmt::print("{}", EstimateReport(*outcome.estimate, *outcome.result.plan));
    } else {
      fmt::print("{}: {}\n",
                 outcome.result.summary.termination == TerminationType::kDeclined
                     ? "declined (not searched)"
                     : "no feasible plan",
                 outcome.result.summary.message);
    }
    outcomes.push_back(std::move(outcome));
  }

  double best = std::numeric_limits<double>::infinity();
  for (const Outcome& o : outcomes)
    if (o.estimate) best = std::min(best, o.estimate->iteration_seconds);

  // The best proven lower bound (DP, ILP, exhaustive when they finish) makes "gap" a gap to the
  // optimum; otherwise it is the gap to the best plan any searcher found.
  double bound = 0.0;
  for (const Outcome& o : outcomes)
    if (o.result.summary.lower_bound_seconds)
      bound = std::max(bound, *o.result.summary.lower_bound_seconds);
  // TFLOP/s and MFU are per GPU the plan uses: the GPUs column shows a plan that leaves some of
  // the cluster idle (a uniform plan whose stages do not fill it).
  fmt::print("\n{:<11} {:<17} {:>12} {:>6} {:>9} {:>7} {:>13} {:>12} {:>10} {:>11} {:>8}\n",
             "algorithm", "status", "iteration s", "GPUs", "TFLOP/s", "MFU %", "headroom GiB",
             "bound s", "search s", "evaluations", "gap %");
  bool idle_gpus = false;
  for (const Outcome& o : outcomes) {
    const SearchSummary& summary = o.result.summary;
    if (o.estimate) {
      const Estimate& e = *o.estimate;
      idle_gpus = idle_gpus || e.num_devices < problem.NumDevices();
      fmt::print("{:<11} {:<17} {:>12.4f} {:>6} {:>9.1f} {:>7.1f} {:>13.2f} {:>12} {:>10.3f} {:>11} "
                 "{:>8.2f}\n",
                 o.algorithm, TerminationTypeName(summary.termination), e.iteration_seconds,
                 e.num_devices, e.tflops_per_gpu, 100 * e.mfu, MinHeadroomBytes(e) / kGiB,
                 summary.lower_bound_seconds ? fmt::format("{:.4f}", *summary.lower_bound_seconds)
                                             : std::string("-"),
                 summary.wall_seconds, summary.evaluations,
                 100 * (e.iteration_seconds / best - 1));
    } else {
      fmt::print("{:<11} {:<17} {:>12} {:>6} {:>9} {:>7} {:>13} {:>12} {:>10.3f} {:>11} {:>8}\n",
                 o.algorithm, TerminationTypeName(summary.termination), "-", "-", "-", "-", "-",
                 "-", summary.wall_seconds, summary.evaluations, "-");
    }
  }
  if (idle_gpus)
    fmt::print("(TFLOP/s and MFU per GPU the plan uses; a plan on fewer than the {} GPUs leaves the "
               "rest idle)\n",
               problem.NumDevices());

  if (bound > 0 && std::isfinite(best))
    fmt::print("best plan {:.4f} s, best proven lower bound {:.4f} s: {}\n", best, bound,
               best <= bound * (1 + 1e-9) ? "the best plan is optimal"
                                          : fmt::format("within {:.2f}% of optimal",
                                                        100 * (best / bound - 1)));

  // Outputs: one set (summary.json, anytime.csv, plans/, traces/), staged, then moved into place
  // with summary.json last.
  std::string anytime = "algorithm,wall_seconds,best_predicted_iteration_seconds\n";
  for (const Outcome& o : outcomes)
    for (const AnytimePoint& point : o.result.summary.anytime)
      anytime += fmt::format("{},{},{}\n", o.algorithm, point.wall_seconds,
                             point.best_iteration_seconds);
  OutputSet outputs(args.output_dir, {"plans", "traces", "export", "anytime.csv", "summary.json"});
  // --export: the best plan, written into the set (a refusal is reported after the set lands).
  std::string export_error;
  if (export_target) {
    const Outcome* best_outcome = nullptr;
    for (const Outcome& o : outcomes)
      if (o.estimate && (!best_outcome || o.estimate->iteration_seconds <
                                              best_outcome->estimate->iteration_seconds))
        best_outcome = &o;
    if (best_outcome == nullptr) {
      export_error = "no plan to export";
    } else {
      try {
        EnsureDirectory(outputs.Path("export"));
        for (const ExportFile& file :
             ExportPlan(problem, *best_outcome->result.plan, *export_target,
                        fmt::format("{} plan", best_outcome->algorithm)))
          WriteFileAtomically(outputs.Path("export") + "/" + file.name, file.text,
                              file.executable);
      } catch (const InputError& e) {
        export_error = e.what();
      }
    }
  }
  EnsureDirectory(outputs.Path("plans"));
  EnsureDirectory(outputs.Path("traces"));
  nlohmann::json results = nlohmann::json::array();
  for (const Outcome& o : outcomes) {
    const SearchSummary& summary = o.result.summary;
    nlohmann::json entry = {{"algorithm", o.algorithm},
                            {"status", TerminationTypeName(summary.termination)},
                            {"message", summary.message},
                            {"search_wall_seconds", summary.wall_seconds},
                            {"evaluations", summary.evaluations},
                            {"iterations", summary.iterations},
                            {"options", o.options}};
    if (summary.lower_bound_seconds) entry["lower_bound_seconds"] = *summary.lower_bound_seconds;
    if (o.estimate) {
      const Plan& plan = *o.result.plan;
      nlohmann::json plan_json = PlanToJson(plan);
      entry["predicted_iteration_seconds"] = o.estimate->iteration_seconds;
      entry["tflops_per_gpu"] = o.estimate->tflops_per_gpu;
      entry["mfu"] = o.estimate->mfu;
      entry["devices_used"] = o.estimate->num_devices;
      entry["gap_to_best"] = o.estimate->iteration_seconds / best - 1;
      entry["plan"] = plan_json;
      plan_json["algorithm"] = o.algorithm;
      plan_json["estimate"] = EstimateToJson(*o.estimate, plan);
      WriteJsonAtomically(outputs.Path("plans") + "/" + o.algorithm + ".json", plan_json);
      WritePlanTrace(outputs.Path("traces") + "/" + o.algorithm + ".trace.json", *o.estimate, plan,
                     fmt::format("{}: {}", o.algorithm, problem.model.name));
    } else {
      entry["predicted_iteration_seconds"] = nullptr;
      entry["plan"] = nullptr;
    }
    results.push_back(entry);
  }
  WriteFileAtomically(outputs.Path("anytime.csv"), anytime);
  WriteJsonAtomically(outputs.Path("summary.json"),
                      {{"problem", ProblemJson(problem)}, {"results", results}});
  outputs.Commit();
  fmt::print("\nwrote {}/summary.json, anytime.csv, plans/ and traces/ (open a trace in "
             "chrome://tracing or Perfetto)\n",
             args.output_dir);
  if (!args.export_target.empty()) {
    if (!export_error.empty()) {
      fmt::print(stderr, "stratos: --export {}: {}\n", args.export_target, export_error);
      return kExitNoResult;
    }
    fmt::print("wrote {}/export/ ({} launch files of the best plan)\n", args.output_dir,
               args.export_target);
  }
  if (!std::isfinite(best)) {
    bool all_declined = true;
    std::string reasons;
    for (const Outcome& o : outcomes) {
      const SearchSummary& summary = o.result.summary;
      all_declined = all_declined && summary.termination == TerminationType::kDeclined;
      reasons += fmt::format("\n  {}: {}: {}", o.algorithm, TerminationTypeName(summary.termination),
                             summary.message);
    }
    if (all_declined) {
      fmt::print(stderr, "stratos: every searcher declined the problem (nothing was searched):{}\n",
                 reasons);
      return kExitDeclined;
    }
    fmt::print(stderr, "stratos: no feasible plan:{}\n", reasons);
    return kExitNoResult;
  }
  if (args.run) return RunBestPlan(args, outcomes);
  return kExitSuccess;
}

}  // namespace stratos
