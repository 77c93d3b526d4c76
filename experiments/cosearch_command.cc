// `stratos cosearch` (experiments/cosearch_command.h).
#include "experiments/cosearch_command.h"

#include <fmt/format.h>
#include <nlohmann/json.hpp>
#include <torch/torch.h>

#include <chrono>
#include <cmath>
#include <map>
#include <optional>
#include <sstream>
#include <thread>

#include "cosearch/cosearcher.h"
#include "costmodel/error.h"
#include "experiments/commands.h"
#include "experiments/output.h"
#include "costmodel/evaluate.h"
#include "search/relax_searcher.h"

namespace stratos {

namespace {

using Clock = std::chrono::steady_clock;

std::vector<CompressionSpec> ParseCompressions(const std::string& list) {
  std::vector<CompressionSpec> specs =
      ParseCompressionList(list, "command line", "--grad-compressions");
  if (specs.front().kind != GradCompression::kNone)
    ThrowInputError("command line", "--grad-compressions", list, "must start with none");
  return specs;
}

std::string ChoiceLabel(const CompressionTimeSurrogate& surrogate, const std::vector<int>& c) {
  std::string text;
  for (size_t s = 0; s < c.size(); ++s)
    text += (s ? "|" : "") + surrogate.Options()[c[s]].Label();
  return text;
}

struct FixedPlanResult {
  std::string name;
  std::vector<int> choice;
  double iteration_seconds = 0;
  std::vector<CurvePoint> curve;
  double final_loss = 0;
  double steps_to_target = -1;  // interpolated between evaluations; -1: not reached
  double seconds_to_target = 0;
};

// One stage over every device, TP 1, ZeRO 0, no recomputation (DDP as most jobs run it), with the
// fewest microbatches that fit; nullopt if the per-device batch does not split or nothing fits.
std::optional<Plan> DataParallelPlan(const Problem& problem) {
  const int devices = problem.cluster.NumDevices();
  const int batch = problem.training.global_batch_size;
  if (problem.cluster.node_groups.size() != 1 || batch % devices != 0) return std::nullopt;
  StageConfig config;
  config.data_parallel = devices;
  if (!SetMeshForDevices(config, devices, problem.cluster.GpusPerNode())) return std::nullopt;
  Plan plan;
  plan.global_batch_size = batch;
  plan.stages.push_back({0, problem.model.NumLayers(), config});
  for (int m = 1; m <= batch / devices; ++m) {
    if (batch / devices % m != 0) continue;
    plan.num_microbatches = m;
    if (Evaluate(problem, plan).Fits()) return plan;
  }
  return std::nullopt;
}

}  // namespace

int RunCoSearch(const CoSearchArgs& args) {
  torch::set_num_threads(args.threads > 0 ? args.threads
                                          : std::max(1u, std::thread::hardware_concurrency()));
  CoSearchOptions options;
  options.model = args.proxy_model;
  options.batch_size = args.batch_size;
  options.dp_replicas = args.dp_replicas;
  if (args.batch_size % args.dp_replicas != 0)  // one rule over two flags
    ThrowInputError("command line", "--batch-size", args.batch_size,
                    fmt::format("must be divisible by --dp-replicas = {}", args.dp_replicas));
  options.learning_rate = args.learning_rate;
  options.alpha_learning_rate = args.alpha_learning_rate;
  options.seed = static_cast<uint64_t>(args.seed);
  if (args.warmup_steps >= args.search_steps)  // one rule over two flags
    ThrowInputError("command line", "--warmup-steps", args.warmup_steps,
                    fmt::format("must be < --search-steps = {}", args.search_steps));
  options.search_steps = args.search_steps;
  options.warmup_steps = args.warmup_steps;
  options.second_order = !args.first_order;
  if (args.lambda != "auto") {
    try {
      options.lambda = std::stod(args.lambda);
    } catch (const std::exception&) {
      options.lambda = -1;
    }
    if (!(options.lambda >= 0))
      ThrowInputError("command line", "--lambda", args.lambda, "must be auto or a number >= 0");
  }
  options.checkpoint_dir = args.output_dir + "/checkpoint";
  options.checkpoint_every = args.checkpoint_every;
  options.resume = args.resume;
  options.Validate();
  const std::vector<CompressionSpec> compressions = ParseCompressions(args.grad_compressions);
  EnsureDirectory(args.output_dir);

  // 1. The base plan: relax's (throughput only, no compression), pure data parallelism, or a
  // plan file.
  const Problem problem = LoadProblem(args.target);
  std::optional<Plan> base;
  std::string base_name = args.base_plan;
  if (args.base_plan == "relax") {
    SearchOptions search_options;
    search_options.time_limit_seconds = 30;
    search_options.seed = args.seed;
    const SearchResult found = RelaxSearcher().Search(problem, search_options);
    if (!found.plan) {
      fmt::print(stderr, "stratos cosearch: the target problem has no feasible plan: {}\n",
                 found.summary.message);
      return kExitNoResult;
    }
    base = found.plan;
    base_name = "relax, throughput only";
  } else if (args.base_plan == "data-parallel") {
    base = DataParallelPlan(problem);
    if (!base) {
      fmt::print(stderr, "stratos cosearch: no data-parallel plan of {} fits on {}\n",
                 problem.model.name, problem.cluster.name);
      return kExitNoResult;
    }
    base_name = "data parallel over every device";
  } else {
    base = ReadPlanFile(args.base_plan);
    const Estimate estimate = Evaluate(problem, *base);
    if (!estimate.Fits())
      throw InputError(fmt::format("{}: the base plan does not fit in memory: {}", args.base_plan,
                                   estimate.MemoryViolation()));
  }
  const CompressionTimeSurrogate surrogate(problem, *base, compressions);
  fmt::print("target: {} on {} ({} devices), global batch {}\n", problem.model.name,
             problem.cluster.name, problem.cluster.NumDevices(),
             problem.training.global_batch_size);
  fmt::print("base plan ({}): {}\n", base_name, base->Summary());
  fmt::print("predicted iteration without compression: {:.4f} s\n", surrogate.BaseSeconds());
  for (int s = 0; s < surrogate.NumStages(); ++s) {
    std::string row = fmt::format("  stage {} predicted s/iteration by option:", s);
    for (int k = 0; k < surrogate.NumOptions(); ++k) {
      if (!surrogate.Allowed(s, k)) continue;
      std::vector<int> only(surrogate.NumStages(), 0);
      only[s] = k;
      row += fmt::format(" {} {:.4f}", surrogate.Options()[k].Label(),
                         surrogate.DiscreteSeconds(only));
    }
    fmt::print("{}\n", row);
  }

  // 2. The co-search.
  const auto start = Clock::now();
  CoSearcher search(options, surrogate);
  if (args.resume) fmt::print("resumed from step {}\n", search.StepCount());
  std::ostringstream alpha_csv;
  alpha_csv << "step,stage,option,alpha,probability\n";
  while (search.StepCount() < options.search_steps) {
    search.Step();
    const int step = search.StepCount();
    if (step % 10 == 0 || step == options.search_steps) {
      const auto p = search.Probabilities();
      const torch::Tensor alpha_tensor = search.Alpha();
      auto alpha = alpha_tensor.accessor<double, 2>();
      for (int s = 0; s < surrogate.NumStages(); ++s)
        for (int k = 0; k < surrogate.NumOptions(); ++k)
          alpha_csv << fmt::format("{},{},{},{:.6g},{:.6g}\n", step, s,
                                   surrogate.Options()[k].Label(), alpha[s][k], p[s][k]);
    }
    if (args.progress && (step % 50 == 0 || step == options.search_steps))
      fmt::print("  step {:4d}  train {:.4f}  val(look-ahead) {:.4f}  lambda {:.2e}  T {:.3f}  "
                 "argmax {}  ({:.0f} s)\n",
                 step, search.LastTrainLoss(), search.LastValidationLoss(), search.Lambda(),
                 search.Temperature(), ChoiceLabel(surrogate, search.Discretize()),
                 std::chrono::duration<double>(Clock::now() - start).count());
  }
  WriteFileAtomically(args.output_dir + "/alpha.csv", alpha_csv.str());
  const std::vector<int> cosearched = search.Discretize();
  const double search_seconds = std::chrono::duration<double>(Clock::now() - start).count();

  // 3. Retrain from scratch: co-searched and fixed plans.
  std::vector<FixedPlanResult> plans;
  for (const auto& [name, choice] : std::vector<std::pair<std::string, std::vector<int>>>{
           {"cosearch", cosearched},
           {"no-compression", std::vector<int>(surrogate.NumStages(), 0)},
           {"smallest-messages", surrogate.SmallestMessageChoice()},
           {"throughput-only", surrogate.FastestChoice()}}) {
    plans.emplace_back();
    plans.back().name = name;
    plans.back().choice = choice;
  }
  // Equal simulated-time budgets: the no-compression plan's eval_steps x its iteration time;
  // a faster plan gets proportionally more steps (at most 3x). Equal choices train once.
  std::map<std::vector<int>, std::vector<CurvePoint>> trained;
  for (FixedPlanResult& plan : plans) {
    plan.iteration_seconds = surrogate.DiscreteSeconds(plan.choice);
    const int steps = std::min(
        3 * args.eval_steps,
        static_cast<int>(std::lround(args.eval_steps * surrogate.BaseSeconds() /
                                     plan.iteration_seconds)));
    auto it = trained.find(plan.choice);
    if (it == trained.end()) {
      if (args.progress)
        fmt::print("retraining {} ({}) for {} steps ...\n", plan.name,
                   ChoiceLabel(surrogate, plan.choice), steps);
      std::fflush(stdout);
      it = trained.emplace(plan.choice, TrainFixedPlan(options, surrogate, plan.choice, steps,
                                                       args.eval_every, args.eval_windows))
               .first;
    }
    plan.curve = it->second;
    plan.final_loss = plan.curve.back().validation_loss;
  }
  double target = args.target_loss;
  if (target <= 0) {
    const int at = args.eval_steps * 3 / 4;
    for (const CurvePoint& point : plans[1].curve)
      if (point.step <= at) target = point.validation_loss;
  }
  std::ostringstream curves;
  curves << "plan,step,simulated_seconds,validation_loss\n";
  for (FixedPlanResult& plan : plans) {
    for (size_t i = 0; i < plan.curve.size(); ++i) {
      const CurvePoint& point = plan.curve[i];
      curves << fmt::format("{},{},{:.6g},{:.6g}\n", plan.name, point.step,
                            point.step * plan.iteration_seconds, point.validation_loss);
      if (plan.steps_to_target >= 0 || point.validation_loss > target) continue;
      // Linear interpolation between the evaluation before and this one.
      double steps = point.step;
      if (i > 0 && plan.curve[i - 1].validation_loss > point.validation_loss) {
        const CurvePoint& before = plan.curve[i - 1];
        steps = before.step + (point.step - before.step) *
                                  (before.validation_loss - target) /
                                  (before.validation_loss - point.validation_loss);
      }
      plan.steps_to_target = steps;
    }
    if (plan.steps_to_target >= 0)
      plan.seconds_to_target = plan.steps_to_target * plan.iteration_seconds;
  }
  WriteFileAtomically(args.output_dir + "/curves.csv", curves.str());

  // 4. The comparison.
  fmt::print("\nvalidation loss vs simulated time (time = steps x the predicted iteration time "
             "of the plan on the target cluster: simulated time, real loss; equal time budgets "
             "of {:.0f} s)\n", args.eval_steps * surrogate.BaseSeconds());
  fmt::print("target validation loss {:.4f}{}\n", target,
             args.target_loss > 0 ? "" : " (the no-compression plan's loss at 3/4 of its budget)");
  fmt::print("{:<18} {:>12} {:>10} {:>10} {:>14}  {}\n", "plan", "iteration s", "final loss",
             "steps", "time to target", "stages");
  nlohmann::json rows = nlohmann::json::array();
  double best_fixed = 0;
  for (size_t i = 1; i < plans.size(); ++i)
    if (plans[i].steps_to_target >= 0 &&
        (best_fixed == 0 || plans[i].seconds_to_target < best_fixed))
      best_fixed = plans[i].seconds_to_target;
  for (const FixedPlanResult& plan : plans) {
    fmt::print("{:<18} {:>12.4f} {:>10.4f} {:>10} {:>14}  {}\n", plan.name,
               plan.iteration_seconds, plan.final_loss,
               plan.steps_to_target >= 0 ? fmt::format("{:.0f}", plan.steps_to_target) : "-",
               plan.steps_to_target >= 0 ? fmt::format("{:.1f} s", plan.seconds_to_target)
                                         : "not reached",
               ChoiceLabel(surrogate, plan.choice));
    nlohmann::json stages = nlohmann::json::array();
    for (int k : plan.choice) stages.push_back(surrogate.Options()[k].Label());
    rows.push_back({{"plan", plan.name},
                    {"stages", stages},
                    {"predicted_iteration_seconds", plan.iteration_seconds},
                    {"final_validation_loss", plan.final_loss},
                    {"steps_to_target", plan.steps_to_target},
                    {"simulated_seconds_to_target",
                     plan.steps_to_target >= 0 ? nlohmann::json(plan.seconds_to_target)
                                               : nlohmann::json()}});
  }
  const FixedPlanResult& co = plans[0];
  std::string verdict;
  if (co.steps_to_target < 0)
    verdict = "the co-searched plan did not reach the target loss";
  else if (best_fixed == 0)
    verdict = "no fixed plan reached the target loss; the co-searched plan did";
  else
    verdict = fmt::format("the co-searched plan reaches the target in {:.1f} s, {:.1f}% {} than the "
                          "best fixed plan ({:.1f} s)",
                          co.seconds_to_target,
                          std::abs(100.0 * (co.seconds_to_target - best_fixed) / best_fixed),
                          co.seconds_to_target <= best_fixed ? "less" : "more", best_fixed);
  fmt::print("{}\nco-search: {} steps in {:.1f} s\n", verdict, options.search_steps,
             search_seconds);
  nlohmann::json summary = {
      {"schema", "stratos.cosearch/1"},
      {"target_problem",
       {{"model", problem.model.name},
        {"cluster", problem.cluster.name},
        {"devices", problem.cluster.NumDevices()},
        {"global_batch_size", problem.training.global_batch_size}}},
      {"base_plan", PlanToJson(*base)},
      {"base_plan_source", base_name},
      {"cosearched_plan", PlanToJson(surrogate.PlanFor(cosearched))},
      {"time_axis", "simulated: steps x predicted iteration seconds on the target cluster"},
      {"target_validation_loss", target},
      {"plans", rows},
      {"verdict", verdict},
      {"search_seconds", search_seconds},
      {"options",
       {{"proxy_model", args.proxy_model},
        {"search_steps", args.search_steps},
        {"warmup_steps", args.warmup_steps},
        {"eval_steps", args.eval_steps},
        {"lambda", args.lambda},
        {"second_order", !args.first_order},
        {"dp_replicas", args.dp_replicas},
        {"seed", args.seed}}}};
  WriteJsonAtomically(args.output_dir + "/summary.json", summary);
  const bool plotted = RunPlotScript(
      fmt::format("cosearch '{0}/curves.csv' --target {1} -o '{0}/loss_vs_time.png'",
                  args.output_dir, target),
      args.output_dir + "/plot.log");
  fmt::print("wrote {0}/summary.json, {0}/curves.csv, {0}/alpha.csv{1}\n", args.output_dir,
             plotted ? fmt::format(", {}/loss_vs_time.png", args.output_dir)
                     : " (no plot: see plot.log)");
  return kExitSuccess;
}

}  // namespace stratos
