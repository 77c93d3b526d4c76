// `stratos init-search` (experiments/init_search_command.h).
#include "experiments/init_search_command.h"

#include <fmt/format.h>
#include <nlohmann/json.hpp>
#include <torch/torch.h>

#include <algorithm>
#include <atomic>
#include <exception>
#include <mutex>
#include <chrono>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <limits>
#include <map>
#include <optional>
#include <sstream>
#include <thread>

#include "cosearch/init_search.h"
#include "costmodel/error.h"
#include "experiments/commands.h"
#include "experiments/output.h"
#include "search/relax_searcher.h"

namespace stratos {

namespace {

using Clock = std::chrono::steady_clock;
namespace fs = std::filesystem;

std::vector<InitScheme> ParseSchemes(const std::string& list) {
  std::vector<InitScheme> schemes;
  std::stringstream in(list);
  std::string name;
  while (std::getline(in, name, ',')) schemes.push_back(ParseInitScheme(name, "command line", "--schemes"));
  if (schemes.empty())
    ThrowInputError("command line", "--schemes", "\"\"", "must name at least one scheme");
  return schemes;
}

// Steps over all runs of a halving of k runs whose first rung is at `first_rung` (an estimate
// for the ETA: later rungs at twice the step, eta as given).
double ProjectedSearchSteps(int k, int eta, int first_rung, int budget) {
  double steps = 0;
  int live = k, from = 0, to = std::min(first_rung, budget);
  while (live > 1 && from < budget) {
    steps += static_cast<double>(live) * (to - from);
    live = (live + eta - 1) / eta;
    from = to;
    to = std::min(2 * to, budget);
  }
  return steps + std::max(0, budget - from);
}

// One outer seed's outcome.
struct SeedOutcome {
  int seed = 0;
  std::vector<InitCandidate> candidates;
  HalvingResult search;
  InitCandidate baseline;
  std::vector<double> baseline_curve;  // after evaluation_steps, 2 x, ...
};

nlohmann::json OutcomeToJson(const SeedOutcome& o) {
  nlohmann::json candidates = nlohmann::json::array();
  for (const InitCandidate& c : o.candidates)
    candidates.push_back({{"scheme", InitSchemeName(c.scheme)}, {"seed", c.seed}});
  return {{"seed", o.seed},
          {"candidates", candidates},
          {"survivor", o.search.survivor},
          {"curves", o.search.curves},
          {"stopped_at_step", o.search.stopped_at_step},
          {"rung_steps", o.search.rung_steps},
          {"total_steps", o.search.total_steps},
          {"baseline", {{"scheme", InitSchemeName(o.baseline.scheme)}, {"seed", o.baseline.seed}}},
          {"baseline_curve", o.baseline_curve}};
}

SeedOutcome OutcomeFromJson(const nlohmann::json& j, const std::string& where) {
  try {
    SeedOutcome o;
    o.seed = j.at("seed").get<int>();
    for (const auto& c : j.at("candidates"))
      o.candidates.push_back({ParseInitScheme(c.at("scheme").get<std::string>(), where, "scheme"),
                              c.at("seed").get<uint64_t>()});
    o.search.survivor = j.at("survivor").get<int>();
    o.search.curves = j.at("curves").get<std::vector<std::vector<double>>>();
    o.search.stopped_at_step = j.at("stopped_at_step").get<std::vector<int>>();
    o.search.rung_steps = j.at("rung_steps").get<std::vector<int>>();
    o.search.total_steps = j.at("total_steps").get<long>();
    o.baseline = {ParseInitScheme(j.at("baseline").at("scheme").get<std::string>(), where,
                                  "baseline.scheme"),
                  j.at("baseline").at("seed").get<uint64_t>()};
    o.baseline_curve = j.at("baseline_curve").get<std::vector<double>>();
    return o;
  } catch (const nlohmann::json::exception& e) {
    throw InputError(fmt::format("{}: not a seed result of init-search ({})", where, e.what()));
  }
}

// The cluster a run gets when n runs share `cluster` evenly; nullopt if its devices do not split
// into n equal meshes of whole nodes or of equal parts of one node.
std::optional<ClusterSpec> ShareOfCluster(const ClusterSpec& cluster, int n) {
  if (cluster.node_groups.size() != 1) return std::nullopt;
  const NodeGroup& group = cluster.node_groups[0];
  if (group.count % n == 0) return cluster.WithNodes(group.count / n);
  const int devices = cluster.NumDevices() / n;
  if (devices < 1 || cluster.NumDevices() % n != 0 || group.gpus_per_node % devices != 0)
    return std::nullopt;
  ClusterSpec share = cluster.WithNodes(1);
  share.node_groups[0].gpus_per_node = devices;
  return share;
}

std::string Mean(const std::vector<double>& x, int digits) {
  double mean = 0, var = 0;
  for (double v : x) mean += v / x.size();
  for (double v : x) var += (v - mean) * (v - mean) / std::max<size_t>(1, x.size() - 1);
  return fmt::format("{:.{}f} +- {:.{}f}", mean, digits, std::sqrt(var), digits);
}

// Progress lines with an ETA, shared by the seeds' threads.
struct Progress {
  Progress(const InitSearchArgs& a, Clock::time_point t) : args(a), start(t) {}
  const InitSearchArgs& args;
  Clock::time_point start;
  double projected_per_seed = 0;  // steps: the search's estimate and as many for the default
  std::mutex mutex;
  double done = 0, projected = 0;  // steps over all seeds

  // Replaces `estimate` steps of the projection by `actual`.
  void Correct(double estimate, double actual) {
    std::lock_guard<std::mutex> lock(mutex);
    projected += actual - estimate;
  }

  HalvingRoundCallback Callback(int seed, int index, const char* arm, int budget) {
    return [this, seed, index, arm, budget](int step, const std::vector<int>& live,
                                            const HalvingResult& so_far) {
      std::lock_guard<std::mutex> lock(mutex);
      done += static_cast<double>(live.size()) * args.evaluation_steps;
      if (!args.progress || (step / args.evaluation_steps % 20 != 0 && step != budget)) return;
      double best = std::numeric_limits<double>::infinity();
      for (int run : live) best = std::min(best, so_far.curves[run].back());
      const double elapsed = std::chrono::duration<double>(Clock::now() - start).count();
      const double eta = elapsed / std::max(1.0, done) * std::max(0.0, projected - done);
      fmt::print("seed {} ({}/{}) {}: step {}/{}, {} live, best validation loss {:.4f}; "
                 "{:.0f} s, ETA {:.0f} s\n",
                 seed, index + 1, args.outer_seeds, arm, step, budget, live.size(), best, elapsed,
                 eta);
      std::fflush(stdout);
    };
  }
};

// One outer seed: the search over the candidates, then the default initialization trained
// alone for as many steps as the search spent; kept in DIR/seed_<s>/result.json (read back on
// --resume).
SeedOutcome RunSeed(const InitSearchArgs& args, const InitSearchOptions& base,
                    const std::vector<InitScheme>& schemes, int index, Progress& progress) {
  const int seed = args.seed + index;
  const std::string dir = fmt::format("{}/seed_{}", args.output_dir, seed);
  const std::string result_file = dir + "/result.json";
  if (args.resume && fs::exists(result_file)) {
    std::ifstream in(result_file);
    nlohmann::json j;
    try {
      j = nlohmann::json::parse(in);
    } catch (const nlohmann::json::exception& e) {
      throw InputError(fmt::format("{}: not JSON ({})", result_file,
                                   std::string(e.what()).substr(0, 80)));
    }
    progress.Correct(progress.projected_per_seed, 0);
    if (args.progress) {
      std::lock_guard<std::mutex> lock(progress.mutex);
      fmt::print("seed {} ({}/{}): kept from {}\n", seed, index + 1, args.outer_seeds,
                 result_file);
    }
    return OutcomeFromJson(j, result_file);
  }
  SeedOutcome outcome;
  outcome.seed = seed;
  outcome.candidates = MakeInitCandidates(args.candidates, schemes, seed);
  InitSearchOptions options = base;
  options.data_seed = seed;
  options.candidates = outcome.candidates;
  options.checkpoint_dir = dir + "/search";
  const InitSearchResult search =
      RunInitSearch(options, progress.Callback(seed, index, "search", args.step_budget));
  outcome.search = search.halving;
  if (search.resumed_from_step > 0 && args.progress) {
    std::lock_guard<std::mutex> lock(progress.mutex);
    fmt::print("seed {}: the search resumed from its checkpoint at step {}\n", seed,
               search.resumed_from_step);
  }
  progress.Correct(progress.projected_per_seed / 2,
                   static_cast<double>(outcome.search.total_steps));

  // The default initialization (the first candidate's seed) alone, at equal compute.
  outcome.baseline = {InitScheme::kGpt2, outcome.candidates[0].seed};
  InitSearchOptions alone = options;
  alone.candidates = {outcome.baseline};
  alone.checkpoint_dir = dir + "/baseline";
  const int e = args.evaluation_steps;
  alone.halving.step_budget = static_cast<int>((outcome.search.total_steps + e - 1) / e * e);
  alone.halving.max_first_rung_steps = e;
  progress.Correct(progress.projected_per_seed / 2, alone.halving.step_budget);
  const InitSearchResult single = RunInitSearch(
      alone, progress.Callback(seed, index, "default init", alone.halving.step_budget));
  outcome.baseline_curve = single.halving.curves[0];
  WriteJsonAtomically(result_file, OutcomeToJson(outcome));
  return outcome;
}

}  // namespace

int RunInitSearchCommand(const InitSearchArgs& args) {
  torch::set_num_threads(args.threads);
  const std::vector<InitScheme> schemes = ParseSchemes(args.schemes);
  if (args.max_first_rung_steps < args.evaluation_steps)
    ThrowInputError("command line", "--max-first-rung", args.max_first_rung_steps,
                    fmt::format("must be >= --evaluation-steps = {}", args.evaluation_steps));
  if (args.step_budget < args.max_first_rung_steps)
    ThrowInputError("command line", "--step-budget", args.step_budget,
                    fmt::format("must be >= --max-first-rung = {}", args.max_first_rung_steps));
  InitSearchOptions base;
  base.model = args.model;
  base.batch_size = args.batch_size;
  base.learning_rate = args.learning_rate;
  base.validation_windows = args.validation_windows;
  base.halving.eta = args.eta;
  base.halving.evaluation_steps = args.evaluation_steps;
  base.halving.plateau_window = args.plateau_window;
  base.halving.plateau_drop = args.plateau_drop;
  base.halving.max_first_rung_steps = args.max_first_rung_steps;
  base.halving.step_budget = args.step_budget;
  base.checkpoint_every = args.checkpoint_every;
  base.resume = args.resume;
  EnsureDirectory(args.output_dir);

  // The cluster view's problem, loaded first so that a bad flag fails before any training.
  std::optional<Problem> problem;
  if (args.cluster_view) problem = LoadProblem(args.cluster_target);

  // 1. Per outer seed: the search, then the default initialization at equal compute; seeds run
  // concurrently on --jobs threads (each trains with --threads intra-op threads).
  const auto start = Clock::now();
  Progress progress{args, start};
  progress.projected_per_seed = 2 * ProjectedSearchSteps(args.candidates, args.eta,
                                                         args.max_first_rung_steps,
                                                         args.step_budget);
  progress.projected = progress.projected_per_seed * args.outer_seeds;
  std::vector<SeedOutcome> outcomes(args.outer_seeds);
  std::vector<std::exception_ptr> errors(args.outer_seeds);
  std::atomic<int> next{0};
  auto worker = [&] {
    for (int i = next++; i < args.outer_seeds; i = next++) {
      try {
        outcomes[i] = RunSeed(args, base, schemes, i, progress);
      } catch (...) {
        errors[i] = std::current_exception();
      }
    }
  };
  std::vector<std::thread> threads;
  const int jobs = args.jobs > 0 ? args.jobs
                                 : static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  for (int j = 0; j < std::min(jobs, args.outer_seeds); ++j) threads.emplace_back(worker);
  for (std::thread& t : threads) t.join();
  for (const std::exception_ptr& error : errors)
    if (error) std::rethrow_exception(error);
  const double train_seconds = std::chrono::duration<double>(Clock::now() - start).count();

  // 2. The target loss and compute to it.
  double target = args.target_loss;
  if (target <= 0)
    for (const SeedOutcome& o : outcomes)
      target = std::max({target, o.search.curves[o.search.survivor].back(),
                         o.baseline_curve.back()});
  const int e = args.evaluation_steps;
  fmt::print("\ninit-search: {} candidates ({}), eta {}, survivor budget {} steps; default "
             "initialization (gpt2) trained alone at equal total compute\n",
             args.candidates, args.schemes, args.eta, args.step_budget);
  fmt::print("target validation loss {:.4f}{}\n", target,
             args.target_loss > 0 ? "" : " (the highest final loss of all compared runs)");
  fmt::print("{:>5} {:>22} {:>10} {:>9} {:>11} {:>11} {:>13} {:>13} {:>7}\n", "seed", "survivor",
             "first rung", "compute", "final loss", "default at", "compute to", "default to",
             "ratio");
  fmt::print("{:>5} {:>22} {:>10} {:>9} {:>11} {:>11} {:>13} {:>13} {:>7}\n", "", "", "step",
             "steps", "(survivor)", "equal comp.", "target", "target", "");
  std::vector<double> search_to, default_to, ratios, search_final, default_final;
  nlohmann::json rows = nlohmann::json::array();
  std::map<std::string, int> survivor_schemes;
  for (const SeedOutcome& o : outcomes) {
    const std::vector<double>& curve = o.search.curves[o.search.survivor];
    const double survivor_steps = StepsToTarget(curve, e, target);
    const double search_compute =
        survivor_steps < 0 ? -1 : ComputeSteps(o.search, survivor_steps);
    const double default_compute = StepsToTarget(o.baseline_curve, e, target);
    const InitCandidate& s = o.candidates[o.search.survivor];
    ++survivor_schemes[InitSchemeName(s.scheme)];
    const double ratio =
        search_compute > 0 && default_compute > 0 ? search_compute / default_compute : 0;
    if (ratio > 0) {
      search_to.push_back(search_compute);
      default_to.push_back(default_compute);
      ratios.push_back(ratio);
    }
    search_final.push_back(curve.back());
    default_final.push_back(o.baseline_curve.back());
    auto reached = [](double x) { return x < 0 ? std::string("-") : fmt::format("{:.0f}", x); };
    fmt::print("{:>5} {:>22} {:>10} {:>9} {:>11.4f} {:>11.4f} {:>13} {:>13} {:>7}\n", o.seed,
               s.Label(), o.search.rung_steps.empty() ? 0 : o.search.rung_steps[0],
               o.search.total_steps, curve.back(), o.baseline_curve.back(),
               reached(search_compute), reached(default_compute),
               ratio > 0 ? fmt::format("{:.2f}", ratio) : "-");
    rows.push_back({{"seed", o.seed},
                    {"survivor", s.Label()},
                    {"first_rung_step", o.search.rung_steps.empty() ? 0 : o.search.rung_steps[0]},
                    {"search_compute_steps", o.search.total_steps},
                    {"survivor_final_validation_loss", curve.back()},
                    {"default_validation_loss_at_equal_compute", o.baseline_curve.back()},
                    {"search_compute_steps_to_target", search_compute},
                    {"default_steps_to_target", default_compute}});
  }
  std::string verdict;
  if (!ratios.empty()) {
    double mean_ratio = 0;
    int wins = 0;
    for (double r : ratios) {
      mean_ratio += r / ratios.size();
      wins += r < 1;
    }
    fmt::print("compute to target: search {} steps, default {} steps; search / default {} "
               "(search less in {} of {} seeds)\n",
               Mean(search_to, 0), Mean(default_to, 0), Mean(ratios, 2), wins, ratios.size());
    verdict = mean_ratio < 1
                  ? fmt::format("init-search reaches the target with {:.0f}% less compute than "
                                "the default initialization (mean over {} seeds)",
                                100 * (1 - mean_ratio), ratios.size())
                  : fmt::format("init-search does not pay: it needs {:.0f}% more compute to "
                                "reach the target than the default initialization (mean over "
                                "{} seeds)",
                                100 * (mean_ratio - 1), ratios.size());
  } else {
    verdict = "the target loss was not reached by both arms in any seed";
  }
  fmt::print("final validation loss at equal compute: survivor {}, default {}\n",
             Mean(search_final, 4), Mean(default_final, 4));
  // Why: what the selection gains per step, what the probes cost, and how far apart the
  // candidates are when they are judged.
  std::vector<double> per_step_gain, overhead, spread;
  std::map<std::string, std::vector<double>> scheme_at_rung;
  for (const SeedOutcome& o : outcomes) {
    const std::vector<double>& curve = o.search.curves[o.search.survivor];
    const size_t at_budget = curve.size() - 1;
    if (at_budget < o.baseline_curve.size())
      per_step_gain.push_back(100 * (o.baseline_curve[at_budget] - curve.back()) /
                              o.baseline_curve[at_budget]);
    overhead.push_back(100.0 * (o.search.total_steps - (at_budget + 1) * e) /
                       ((at_budget + 1) * e));
    if (o.search.rung_steps.empty()) continue;
    const size_t k = static_cast<size_t>(o.search.rung_steps[0] / e - 1);
    double low = std::numeric_limits<double>::infinity(), high = 0;
    for (size_t r = 0; r < o.candidates.size(); ++r) {
      low = std::min(low, o.search.curves[r][k]);
      high = std::max(high, o.search.curves[r][k]);
      scheme_at_rung[InitSchemeName(o.candidates[r].scheme)].push_back(o.search.curves[r][k]);
    }
    spread.push_back(100 * (high - low) / low);
  }
  if (!per_step_gain.empty())
    fmt::print("survivor vs default after the same {} steps: {}% lower validation loss "
               "(negative: higher)\n",
               args.step_budget, Mean(per_step_gain, 2));
  fmt::print("the probes' compute: {}% of the survivor's steps\n", Mean(overhead, 0));
  std::string scheme_rung;
  for (const auto& [name, losses] : scheme_at_rung)
    scheme_rung += fmt::format("{}{} {}", scheme_rung.empty() ? "" : "; ", name, Mean(losses, 3));
  if (!spread.empty())
    fmt::print("at the first rung the candidates' losses span {}% (max - min over min); mean "
               "loss there by scheme: {}\n",
               Mean(spread, 1), scheme_rung);
  std::string scheme_text;
  for (const auto& [name, count] : survivor_schemes)
    scheme_text += fmt::format("{}{} {}", scheme_text.empty() ? "" : ", ", name, count);
  fmt::print("survivors by scheme: {}\n{}\n", scheme_text, verdict);

  // 3. The cluster view: n runs on 1/n of the target cluster each, priced by the cost model.
  nlohmann::json cluster_json;
  if (problem) {
    std::map<int, double> seconds_per_step;  // live runs -> predicted iteration seconds
    std::vector<int> counts = {1};
    for (int n = args.candidates; n > 1; n = (n + args.eta - 1) / args.eta) counts.push_back(n);
    fmt::print("\ncluster view: {} on {} ({} devices, global batch {}); n live runs each train "
               "on 1/n of the devices (same global batch), plans by relax\n",
               problem->model.name, problem->cluster.name, problem->cluster.NumDevices(),
               problem->training.global_batch_size);
    fmt::print("{:>9} {:>12} {:>14}  {}\n", "live runs", "devices each", "iteration s", "plan");
    nlohmann::json shares = nlohmann::json::array();
    for (int n : counts) {
      const std::optional<ClusterSpec> share = ShareOfCluster(problem->cluster, n);
      double seconds = std::numeric_limits<double>::infinity();
      std::string plan_text = "the devices do not split evenly";
      if (share) {
        Problem share_problem = *problem;
        share_problem.cluster = *share;
        SearchOptions search_options;
        search_options.time_limit_seconds = 30;
        const SearchResult found = RelaxSearcher().Search(share_problem, search_options);
        if (found.plan) {
          seconds = found.summary.best_iteration_seconds;
          plan_text = found.plan->Summary();
        } else {
          plan_text = "no feasible plan: " + found.summary.message;
        }
      }
      seconds_per_step[n] = seconds;
      fmt::print("{:>9} {:>12} {:>14}  {}\n", n, share ? share->NumDevices() : 0,
                 std::isfinite(seconds) ? fmt::format("{:.4f}", seconds) : "-", plan_text);
      shares.push_back({{"live_runs", n},
                        {"devices_each", share ? share->NumDevices() : 0},
                        {"iteration_seconds",
                         std::isfinite(seconds) ? nlohmann::json(seconds) : nlohmann::json()},
                        {"plan", plan_text}});
    }
    const auto price = [&](int live) {
      auto it = seconds_per_step.find(live);
      return it == seconds_per_step.end() ? std::numeric_limits<double>::infinity() : it->second;
    };
    std::vector<double> search_seconds, default_seconds;
    for (const SeedOutcome& o : outcomes) {
      const double steps = StepsToTarget(o.search.curves[o.search.survivor], e, target);
      const double base = StepsToTarget(o.baseline_curve, e, target);
      if (steps < 0 || base < 0) continue;
      search_seconds.push_back(PricedSeconds(o.search, steps, price));
      default_seconds.push_back(base * price(1));
    }
    if (!search_seconds.empty() && std::isfinite(search_seconds[0])) {
      fmt::print("simulated time to target on {}: search {} s, default {} s\n",
                 problem->cluster.name, Mean(search_seconds, 0), Mean(default_seconds, 0));
    } else {
      fmt::print("simulated time to target: not priced (a share of the cluster has no plan)\n");
    }
    cluster_json = {{"model", problem->model.name},
                    {"cluster", problem->cluster.name},
                    {"devices", problem->cluster.NumDevices()},
                    {"shares", shares},
                    {"search_seconds_to_target", search_seconds},
                    {"default_seconds_to_target", default_seconds}};
  }

  // 4. Outputs.
  std::string csv =
      "outer_seed,arm,run,scheme,init_seed,survivor,step,compute_steps,validation_loss\n";
  for (const SeedOutcome& o : outcomes) {
    for (size_t r = 0; r < o.candidates.size(); ++r)
      for (size_t k = 0; k < o.search.curves[r].size(); ++k) {
        const double step = static_cast<double>((k + 1) * e);
        csv += fmt::format("{},search,{},{},{},{},{},{},{:.6g}\n", o.seed, r,
                           InitSchemeName(o.candidates[r].scheme), o.candidates[r].seed,
                           static_cast<int>(r) == o.search.survivor ? 1 : 0, step,
                           ComputeSteps(o.search, step), o.search.curves[r][k]);
      }
    for (size_t k = 0; k < o.baseline_curve.size(); ++k)
      csv += fmt::format("{},default,0,{},{},1,{},{},{:.6g}\n", o.seed,
                         InitSchemeName(o.baseline.scheme), o.baseline.seed, (k + 1) * e,
                         (k + 1) * e, o.baseline_curve[k]);
  }
  WriteFileAtomically(args.output_dir + "/curves.csv", csv);
  WriteJsonAtomically(args.output_dir + "/summary.json",
                      {{"schema", "stratos.init_search/1"},
                       {"options",
                        {{"model", args.model},
                         {"candidates", args.candidates},
                         {"schemes", args.schemes},
                         {"outer_seeds", args.outer_seeds},
                         {"seed", args.seed},
                         {"step_budget", args.step_budget},
                         {"eta", args.eta},
                         {"evaluation_steps", args.evaluation_steps},
                         {"plateau_window", args.plateau_window},
                         {"plateau_drop", args.plateau_drop},
                         {"max_first_rung_steps", args.max_first_rung_steps},
                         {"batch_size", args.batch_size},
                         {"learning_rate", args.learning_rate}}},
                       {"compute_unit", "training steps summed over all runs"},
                       {"target_validation_loss", target},
                       {"seeds", rows},
                       {"cluster_view", cluster_json},
                       {"verdict", verdict},
                       {"train_seconds", train_seconds}});
  const bool plotted = RunPlotScript(
      fmt::format("init-search '{0}/curves.csv' --target {1} -o '{0}/loss_vs_compute.png'",
                  args.output_dir, target),
      args.output_dir + "/plot.log");
  fmt::print("wrote {}/summary.json, curves.csv{}\n", args.output_dir,
             plotted ? ", loss_vs_compute.png" : " (no plot: see plot.log)");
  return kExitSuccess;
}

}  // namespace stratos
