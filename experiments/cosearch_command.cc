// `stratos cosearch` (experiments/cosearch_command.h).
#include "experiments/cosearch_command.h"

#include <fmt/format.h>
#include <nlohmann/json.hpp>
#include <torch/torch.h>

#include <algorithm>
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

// One global batch option of the target: its base plan and time surrogate.
struct TargetAtBatch {
  int proxy_batch_size = 0;
  Plan plan;
  std::unique_ptr<CompressionTimeSurrogate> surrogate;

  int GlobalBatch() const { return plan.global_batch_size; }
};

// `plan` with the number of microbatches that makes it fastest among those that split the batch
// over every stage's DP and fit in memory; nullopt if none does.
std::optional<Plan> WithFastestMicrobatches(const Problem& problem, Plan plan) {
  const int batch = plan.global_batch_size;
  std::optional<Plan> best;
  double best_seconds = 0;
  for (int m = 1; m <= batch; ++m) {
    bool splits = batch % m == 0;
    for (const StagePlan& stage : plan.stages)
      splits = splits && batch / m % stage.config.data_parallel == 0;
    if (!splits) continue;
    plan.num_microbatches = m;
    try {
      ValidatePlan(problem, plan);
    } catch (const InputError&) {
      continue;
    }
    const Estimate estimate = Evaluate(problem, plan);
    if (estimate.Fits() && (!best || estimate.iteration_seconds < best_seconds))
      best = plan, best_seconds = estimate.iteration_seconds;
  }
  return best;
}

// `plan` (the base plan at the reference batch) at global batch `batch`: the same layout with the
// fastest number of microbatches that fits. Throws InputError naming --batch-sizes and the
// option `proxy_batch` if no number of microbatches splits the batch and fits.
Plan PlanAtGlobalBatch(const Problem& problem, Plan plan, int batch, int proxy_batch) {
  plan.global_batch_size = batch;
  const std::optional<Plan> scaled = WithFastestMicrobatches(problem, plan);
  if (!scaled)
    ThrowInputError("command line", "--batch-sizes", proxy_batch,
                    fmt::format("no number of microbatches splits global batch {} over the base "
                                "plan's data parallelism and fits in memory", batch));
  return *scaled;
}

struct FixedPlanResult {
  std::string name;
  int batch = 0;  // index into the batch options
  std::vector<int> choice;
  double iteration_seconds = 0;
  std::vector<CurvePoint> curve;
  double final_loss = 0;
  double steps_to_target = -1;  // interpolated between evaluations; -1: not reached
  double seconds_to_target = 0;
};

// Data parallelism without tensor parallelism or ZeRO (DDP as most jobs run it): one stage over
// every device of a homogeneous cluster; on several node groups (sites), one pipeline stage per
// group in the file's order, data parallel over the group's devices, with Megatron's placement of
// the layers (the layout Yuan et al., NeurIPS'22, give geo-distributed training: data
// parallelism inside a site, the pipeline over the slow links). The fastest number of
// microbatches that fits; nullopt if the batch does not split or nothing fits.
std::optional<Plan> DataParallelPlan(const Problem& problem) {
  const ClusterSpec& cluster = problem.cluster;
  const int batch = problem.training.global_batch_size;
  const int groups = cluster.NumGroups();
  if (groups > problem.model.NumLayers()) return std::nullopt;
  Plan plan;
  plan.global_batch_size = batch;
  const std::vector<std::pair<int, int>> layers =
      groups == 1 ? std::vector<std::pair<int, int>>{{0, problem.model.NumLayers()}}
                  : MegatronStageLayers(problem.model, groups);
  for (int g = 0; g < groups; ++g) {
    StageConfig config;
    config.node_group = g;
    config.data_parallel = cluster.GroupDevices(g);
    if (batch % config.data_parallel != 0 ||
        !SetMeshForDevices(config, config.data_parallel, cluster.Group(g).gpus_per_node))
      return std::nullopt;
    plan.stages.push_back({layers[g].first, layers[g].second, config});
  }
  return WithFastestMicrobatches(problem, plan);
}

}  // namespace

int RunCoSearch(const CoSearchArgs& args) {
  torch::set_num_threads(args.threads > 0 ? args.threads
                                          : std::max(1u, std::thread::hardware_concurrency()));
  CoSearchOptions options;
  options.model = args.proxy_model;
  options.batch_size = args.batch_size;
  options.dp_replicas = args.dp_replicas;
  // Rules over two flags name both.
  for (size_t i = 0; i < args.batch_sizes.size(); ++i) {
    const int b = args.batch_sizes[i];
    if (b % args.dp_replicas != 0)
      ThrowInputError("command line", "--batch-sizes", b,
                      fmt::format("must be divisible by --dp-replicas = {}", args.dp_replicas));
    if (std::find(args.batch_sizes.begin(), args.batch_sizes.begin() + i, b) !=
        args.batch_sizes.begin() + i)
      ThrowInputError("command line", "--batch-sizes", b, "is listed twice");
  }
  if (std::find(args.batch_sizes.begin(), args.batch_sizes.end(), args.batch_size) ==
      args.batch_sizes.end())
    ThrowInputError("command line", "--batch-size", args.batch_size,
                    "must be one of --batch-sizes");
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
  for (int b : args.batch_sizes)
    if (static_cast<long long>(problem.training.global_batch_size) * b % args.batch_size != 0)
      ThrowInputError("command line", "--batch-sizes", b,
                      fmt::format("must make a whole target batch: --global-batch {} x {} / "
                                  "--batch-size {}", problem.training.global_batch_size, b,
                                  args.batch_size));
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
    base_name = problem.cluster.NumGroups() == 1
                    ? "data parallel over every device"
                    : "data parallel inside each node group, one pipeline stage per group";
  } else {
    base = ReadPlanFile(args.base_plan);
    const Estimate estimate = Evaluate(problem, *base);
    if (!estimate.Fits())
      throw InputError(fmt::format("{}: the base plan does not fit in memory: {}", args.base_plan,
                                   estimate.MemoryViolation()));
  }
  // The base plan at every global batch option (the reference one is the base plan itself).
  std::vector<TargetAtBatch> targets;
  int reference = 0;
  for (int b : args.batch_sizes) {
    Problem at_batch = problem;
    at_batch.training.global_batch_size = static_cast<int>(
        static_cast<long long>(problem.training.global_batch_size) * b / args.batch_size);
    TargetAtBatch target;
    target.proxy_batch_size = b;
    target.plan = b == args.batch_size
                      ? *base
                      : PlanAtGlobalBatch(at_batch, *base,
                                          at_batch.training.global_batch_size, b);
    target.surrogate =
        std::make_unique<CompressionTimeSurrogate>(at_batch, target.plan, compressions);
    if (b == args.batch_size) reference = static_cast<int>(targets.size());
    targets.push_back(std::move(target));
  }
  const CompressionTimeSurrogate& surrogate = *targets[reference].surrogate;
  fmt::print("target: {} on {} ({} devices), global batch {}\n", problem.model.name,
             problem.cluster.name, problem.cluster.NumDevices(),
             problem.training.global_batch_size);
  fmt::print("base plan ({}): {}\n", base_name, base->Summary());
  for (const TargetAtBatch& t : targets) {
    const CompressionTimeSurrogate& s = *t.surrogate;
    fmt::print("global batch {} (proxy {} sequences, {} microbatches): predicted s/iteration "
               "without compression {:.4f}\n",
               t.GlobalBatch(), t.proxy_batch_size, t.plan.num_microbatches, s.BaseSeconds());
    for (int st = 0; st < s.NumStages(); ++st) {
      std::string row = fmt::format("  stage {} by option:", st);
      for (int k = 0; k < s.NumOptions(); ++k) {
        if (!s.Allowed(st, k)) continue;
        std::vector<int> only(s.NumStages(), 0);
        only[st] = k;
        row += fmt::format(" {} {:.4f}", s.Options()[k].Label(), s.DiscreteSeconds(only));
      }
      fmt::print("{}\n", row);
    }
  }

  // 2. The co-search.
  const auto start = Clock::now();
  std::vector<BatchOption> batch_options;
  for (const TargetAtBatch& t : targets)
    batch_options.push_back({t.proxy_batch_size, t.surrogate.get()});
  CoSearcher search(options, batch_options);
  if (args.resume) fmt::print("resumed from step {}\n", search.StepCount());
  auto label = [&](int batch, const std::vector<int>& choice) {
    return fmt::format("batch {}: {}", targets[batch].GlobalBatch(),
                       ChoiceLabel(surrogate, choice));
  };
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
      const std::vector<double> q = search.BatchProbabilities();
      for (size_t b = 0; b < targets.size(); ++b)  // the batch logits as stage "batch"
        alpha_csv << fmt::format("{},batch,{},{:.6g},{:.6g}\n", step, targets[b].GlobalBatch(),
                                 search.BatchLogits()[b].item<double>(), q[b]);
    }
    if (args.progress && (step % 50 == 0 || step == options.search_steps))
      fmt::print("  step {:4d}  train {:.4f}  val(look-ahead) {:.4f}  lambda {:.2e}  T {:.3f}  "
                 "argmax {}  ({:.0f} s)\n",
                 step, search.LastTrainLoss(), search.LastValidationLoss(), search.Lambda(),
                 search.Temperature(), label(search.DiscretizeBatch(), search.Discretize()),
                 std::chrono::duration<double>(Clock::now() - start).count());
  }
  WriteFileAtomically(args.output_dir + "/alpha.csv", alpha_csv.str());
  const std::vector<int> cosearched = search.Discretize();
  const int cosearched_batch = search.DiscretizeBatch();
  const double search_seconds = std::chrono::duration<double>(Clock::now() - start).count();

  // 3. Retrain from scratch: co-searched and fixed plans. The throughput-only plan has the fewest
  // predicted seconds per sample over every batch and compression.
  int fastest_batch = 0;
  std::vector<int> fastest_choice;
  double fastest_per_sample = 0;
  for (size_t b = 0; b < targets.size(); ++b) {
    const std::vector<int> choice = targets[b].surrogate->FastestChoice();
    const double per_sample =
        targets[b].surrogate->DiscreteSeconds(choice) / targets[b].GlobalBatch();
    if (b == 0 || per_sample < fastest_per_sample * (1 - 1e-12))
      fastest_batch = static_cast<int>(b), fastest_choice = choice, fastest_per_sample = per_sample;
  }
  const std::vector<int> none(surrogate.NumStages(), 0);
  std::vector<FixedPlanResult> plans;
  auto add_plan = [&](const std::string& name, int batch, const std::vector<int>& choice) {
    plans.emplace_back();
    plans.back().name = name;
    plans.back().batch = batch;
    plans.back().choice = choice;
  };
  add_plan("cosearch", cosearched_batch, cosearched);
  add_plan("no-compression", reference, none);
  add_plan("smallest-messages", reference, surrogate.SmallestMessageChoice());
  add_plan("throughput-only", fastest_batch, fastest_choice);
  const size_t num_fixed = plans.size();
  if (cosearched_batch != reference) {  // which part did the work: each choice alone
    add_plan("cosearch-batch-only", cosearched_batch, none);
    add_plan("cosearch-compression-only", reference, cosearched);
  }
  // Equal simulated-time budgets: the no-compression plan's eval_steps x its iteration time;
  // a faster plan gets proportionally more steps (at most 3x). Equal plans train once.
  std::map<std::pair<int, std::vector<int>>, std::vector<CurvePoint>> trained;
  for (FixedPlanResult& plan : plans) {
    const CompressionTimeSurrogate& s = *targets[plan.batch].surrogate;
    plan.iteration_seconds = s.DiscreteSeconds(plan.choice);
    const int steps = std::min(
        3 * args.eval_steps,
        static_cast<int>(std::lround(args.eval_steps * surrogate.BaseSeconds() /
                                     plan.iteration_seconds)));
    auto it = trained.find({plan.batch, plan.choice});
    if (it == trained.end()) {
      if (args.progress)
        fmt::print("retraining {} ({}) for {} steps ...\n", plan.name,
                   label(plan.batch, plan.choice), steps);
      std::fflush(stdout);
      CoSearchOptions at_batch = options;
      at_batch.batch_size = targets[plan.batch].proxy_batch_size;
      it = trained.emplace(std::make_pair(plan.batch, plan.choice),
                           TrainFixedPlan(at_batch, s, plan.choice, steps, args.eval_every,
                                          args.eval_windows))
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
  curves << "plan,step,simulated_seconds,validation_loss,global_batch\n";
  for (FixedPlanResult& plan : plans) {
    for (size_t i = 0; i < plan.curve.size(); ++i) {
      const CurvePoint& point = plan.curve[i];
      curves << fmt::format("{},{},{:.6g},{:.6g},{}\n", plan.name, point.step,
                            point.step * plan.iteration_seconds, point.validation_loss,
                            targets[plan.batch].GlobalBatch());
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
  fmt::print("{:<26} {:>6} {:>12} {:>10} {:>10} {:>14}  {}\n", "plan", "batch", "iteration s",
             "final loss", "steps", "time to target", "stages");
  nlohmann::json rows = nlohmann::json::array();
  double best_fixed = 0;  // over the fixed plans (not the co-search's parts alone)
  for (size_t i = 1; i < num_fixed; ++i)
    if (plans[i].steps_to_target >= 0 &&
        (best_fixed == 0 || plans[i].seconds_to_target < best_fixed))
      best_fixed = plans[i].seconds_to_target;
  for (size_t i = 0; i < plans.size(); ++i) {
    const FixedPlanResult& plan = plans[i];
    if (i == num_fixed) fmt::print("which part did the work (each co-searched choice alone):\n");
    fmt::print("{:<26} {:>6} {:>12.4f} {:>10.4f} {:>10} {:>14}  {}\n", plan.name,
               targets[plan.batch].GlobalBatch(), plan.iteration_seconds, plan.final_loss,
               plan.steps_to_target >= 0 ? fmt::format("{:.0f}", plan.steps_to_target) : "-",
               plan.steps_to_target >= 0 ? fmt::format("{:.1f} s", plan.seconds_to_target)
                                         : "not reached",
               ChoiceLabel(surrogate, plan.choice));
    nlohmann::json stages = nlohmann::json::array();
    for (int k : plan.choice) stages.push_back(surrogate.Options()[k].Label());
    rows.push_back({{"plan", plan.name},
                    {"global_batch", targets[plan.batch].GlobalBatch()},
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
      {"cosearched_plan", PlanToJson(targets[cosearched_batch].surrogate->PlanFor(cosearched))},
      {"global_batch_options",
       [&] {
         nlohmann::json list = nlohmann::json::array();
         for (const TargetAtBatch& t : targets)
           list.push_back({{"global_batch", t.GlobalBatch()},
                           {"proxy_batch_size", t.proxy_batch_size},
                           {"predicted_iteration_seconds_without_compression",
                            t.surrogate->BaseSeconds()}});
         return list;
       }()},
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
        {"batch_sizes", args.batch_sizes},
        {"batch_size", args.batch_size},
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
