// IlpSearcher (exact MILP with COIN-OR CBC): ILP = exhaustive = DP on the seed cases and on
// random small problems, homogeneous and heterogeneous (several node groups), time and
// evaluation limits, infeasibility, warm starts.
#include <doctest/doctest.h>
#include <fmt/format.h>

#include <cmath>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "tests/search/search_test_util.h"
#include "baselines/dp_searcher.h"
#include "baselines/exhaustive_searcher.h"
#include "baselines/ilp_searcher.h"
#include "baselines/mcmc_searcher.h"
#include "costmodel/cluster_io.h"
#include "costmodel/error.h"
#include "costmodel/evaluate.h"
#include "costmodel/model_io.h"
#include "costmodel/synthetic.h"
#include "costmodel/zoo.h"

namespace stratos {
namespace {

// GPT-3 6.7B (34 layers) on 8 DGX A100 nodes (64 GPUs), batch 512, only m = 256: its optimum
// is an 8-stage pipeline that the best uniform plan misses, so CBC has to branch (seconds).
Problem Gpt67bOn64Gpus() { return testing::ZooProblem("gpt3-6.7b", "dgx-a100-80gb", 8); }

// Without CBC every search reports why; the other tests then have nothing to check.
bool RequireCbc(const Problem& problem, const SearchOptions& options) {
  if (IlpSearcher::Available()) return true;
  const SearchResult result = IlpSearcher().Search(problem, options);
  CHECK(result.summary.termination == TerminationType::kDeclined);
  CHECK(result.summary.message.find("built without COIN-OR CBC") == 0);
  CHECK_FALSE(result.plan.has_value());
  return false;
}

}  // namespace

TEST_CASE("ILP = DP = exhaustive optimum on every seed pipeline-partition case") {
  if (!RequireCbc(MakeRandomSmallProblem(1), SearchOptions{})) return;
  IlpSearcher ilp;
  DpSearcher dp;
  ExhaustiveSearcher exhaustive;
  int cross_checked = 0;
  for (const SeedCaseRow& row : ReadSeedPartitionCases()) {
    const SeedCase seed = MakeSeedPartitionCase(row.num_layers, row.num_stages,
                                                row.num_microbatches, row.layer_cost,
                                                row.cut_cost);
    CAPTURE(seed.problem.model.name);
    SearchOptions options;
    options.space = seed.space;
    const SearchResult result = ilp.Search(seed.problem, options);
    INFO("ilp: ", result.summary.message);
    REQUIRE(result.plan.has_value());
    CHECK(result.summary.termination == TerminationType::kOptimal);
    CHECK(result.plan->NumStages() == row.num_stages);
    const Estimate estimate = Evaluate(seed.problem, *result.plan);
    CHECK(std::abs(estimate.steady_seconds + estimate.tail_seconds - row.optimal_cost) <= 1e-9);
    CHECK(estimate.iteration_seconds == result.summary.best_iteration_seconds);
    REQUIRE(result.summary.lower_bound_seconds.has_value());
    CHECK(*result.summary.lower_bound_seconds == result.summary.best_iteration_seconds);

    const SearchResult by_dp = dp.Search(seed.problem, options);
    REQUIRE(by_dp.plan.has_value());
    CHECK(testing::RelativeGap(result.summary.best_iteration_seconds,
                         by_dp.summary.best_iteration_seconds) <= 1e-9);
    options.max_evaluations = 100000;  // exhaustive where it takes well under a second
    const SearchResult truth = exhaustive.Search(seed.problem, options);
    if (truth.plan) {
      ++cross_checked;
      CHECK(testing::RelativeGap(result.summary.best_iteration_seconds,
                           truth.summary.best_iteration_seconds) <= 1e-9);
    }
  }
  CHECK(cross_checked >= 6);
}

namespace {

// Checks the ILP's `result` on `problem` against the exhaustive search (`truth`) and the DP:
// the same feasibility; when feasible, a proven optimum equal to both whose Evaluate() estimate
// fits and matches the reported time. Returns whether the problem is feasible.
bool CheckIlpAgainstExact(const Problem& problem, const SearchResult& truth,
                          const SearchResult& by_dp, const SearchResult& result) {
  INFO("exhaustive: ", truth.summary.BriefReport(), " ", truth.summary.message);
  INFO("ilp: ", result.summary.BriefReport(), " ", result.summary.message);
  REQUIRE(truth.plan.has_value() == result.plan.has_value());
  REQUIRE(by_dp.plan.has_value() == result.plan.has_value());
  if (!truth.plan) {
    CHECK(result.summary.termination == TerminationType::kInfeasible);
    CHECK(result.summary.message.find("no feasible plan") == 0);
    return false;
  }
  CHECK(result.summary.termination == TerminationType::kOptimal);
  const Estimate estimate = Evaluate(problem, *result.plan);  // validates the group budgets
  CHECK(estimate.Fits());
  CHECK(estimate.iteration_seconds == result.summary.best_iteration_seconds);
  CHECK(testing::RelativeGap(estimate.iteration_seconds, truth.summary.best_iteration_seconds) <=
        1e-9);
  CHECK(testing::RelativeGap(estimate.iteration_seconds, by_dp.summary.best_iteration_seconds) <=
        1e-9);
  REQUIRE(result.summary.lower_bound_seconds.has_value());
  CHECK(*result.summary.lower_bound_seconds == result.summary.best_iteration_seconds);
  return true;
}

}  // namespace

TEST_CASE("ILP = DP = exhaustive optimum on 12 random small problems, without and with DP "
          "gradient buckets") {
  if (!RequireCbc(MakeRandomSmallProblem(1), SearchOptions{})) return;
  IlpSearcher ilp;
  DpSearcher dp;
  ExhaustiveSearcher exhaustive;
  int feasible = 0;
  for (std::uint64_t draw_seed = 1; draw_seed <= 24; ++draw_seed) {
    // Seeds 13-24: the problems of 1-12 with buckets (a stage tail not additive over layers).
    const std::uint64_t seed = (draw_seed - 1) % 12 + 1;
    const Problem problem = draw_seed > 12
                                ? testing::WithDpBuckets(MakeRandomSmallProblem(seed), seed)
                                : MakeRandomSmallProblem(seed);
    CAPTURE(draw_seed);
    const SearchResult truth = exhaustive.Search(problem, SearchOptions{});
    REQUIRE_MESSAGE(truth.summary.message.find("too large") == std::string::npos,
                    truth.summary.message);
    const SearchResult by_dp = dp.Search(problem, SearchOptions{});
    const SearchResult result = ilp.Search(problem, SearchOptions{});
    if (!CheckIlpAgainstExact(problem, truth, by_dp, result)) continue;
    ++feasible;
    CHECK(result.summary.message.find("optimal: objective") == 0);
    CHECK_FALSE(result.summary.anytime.empty());
  }
  CHECK(feasible >= 10);
}

TEST_CASE("ILP summary records the search: algorithm, bound, MILPs, anytime trace, reports") {
  const Problem problem = MakeRandomSmallProblem(7);
  if (!RequireCbc(problem, SearchOptions{})) return;
  int calls = 0;
  double last = INFINITY;
  SearchOptions options;
  options.on_improvement = [&](double, double best) {
    CHECK(best < last);
    last = best;
    ++calls;
  };
  const SearchResult result = IlpSearcher().Search(problem, options);
  const SearchSummary& summary = result.summary;
  CHECK(summary.algorithm == "ilp");
  CHECK(IlpSearcher().Name() == "ilp");
  REQUIRE(result.plan.has_value());
  CHECK(calls == static_cast<int>(summary.anytime.size()));
  CHECK(summary.anytime.back().best_iteration_seconds == summary.best_iteration_seconds);
  CHECK(summary.initial_iteration_seconds >= summary.best_iteration_seconds);
  CHECK(summary.time_limit_seconds_given == options.time_limit_seconds);
  CHECK(summary.message.find("bound") != std::string::npos);
  CHECK(summary.message.find("gap 0 %") != std::string::npos);
  CHECK(summary.FullReport().find("Lower bound") != std::string::npos);
  CHECK(summary.BriefReport().find("ilp: optimal") == 0);
}

TEST_CASE("ILP honours its time and evaluation limits and says why it stopped") {
  Problem problem = Gpt67bOn64Gpus();
  SearchOptions options;
  options.space.num_microbatches = {256};
  if (!RequireCbc(problem, options)) return;

  // A limit hit before any MILP: stopped by the time limit, with the uniform plan or none.
  options.time_limit_seconds = 1e-9;
  const SearchResult instant = IlpSearcher().Search(problem, options);
  CHECK(instant.summary.termination == TerminationType::kTimeLimit);
  CHECK(instant.summary.message.find("stopped by the time limit") == 0);
  CHECK(instant.summary.wall_seconds < 5.0);

  // One second of CBC on a MILP that needs more (on a loaded machine): a feasible plan, a lower
  // bound below it and the gap, or the optimum if this machine is fast.
  options.time_limit_seconds = 1.0;
  const SearchResult limited = IlpSearcher().Search(problem, options);
  INFO(limited.summary.message);
  CHECK(limited.summary.wall_seconds < 8.0);
  REQUIRE(limited.plan.has_value());
  CHECK(Evaluate(problem, *limited.plan).Fits());
  REQUIRE(limited.summary.lower_bound_seconds.has_value());
  CHECK(*limited.summary.lower_bound_seconds <= limited.summary.best_iteration_seconds);
  if (limited.summary.termination == TerminationType::kTimeLimit) {
    CHECK(limited.summary.message.find("gap") != std::string::npos);
    CHECK(limited.summary.message.find("bound") != std::string::npos);
  } else {
    CHECK(limited.summary.termination == TerminationType::kOptimal);
  }

  // A budget of one MILP over several microbatch counts.
  problem.training.global_batch_size = 64;
  SearchOptions one;
  one.max_evaluations = 1;
  one.space.num_microbatches = {4, 8, 16};
  const SearchResult budget = IlpSearcher().Search(problem, one);
  INFO(budget.summary.message);
  CHECK(budget.summary.evaluations <= 1);
  CHECK((budget.summary.termination == TerminationType::kEvaluationLimit ||
         budget.summary.termination == TerminationType::kOptimal));
  if (budget.summary.termination == TerminationType::kEvaluationLimit)
    CHECK(budget.summary.message.find("evaluation (MILP) limit") != std::string::npos);
}

TEST_CASE("ILP reports an infeasible problem: no feasible plan, with the reason") {
  Problem problem = MakeRandomSmallProblem(3);
  if (!RequireCbc(problem, SearchOptions{})) return;
  problem.cluster.devices[0].memory_bytes = 1e6;  // 1 MB per device
  const SearchResult result = IlpSearcher().Search(problem, SearchOptions{});
  CHECK_FALSE(result.plan.has_value());
  CHECK(result.summary.termination == TerminationType::kInfeasible);
  CHECK_FALSE(result.summary.HasPlan());
  CHECK(result.summary.message.find("no feasible plan") == 0);
  CHECK(result.summary.message.find("memory") != std::string::npos);
  CHECK(result.summary.message.find("layer") != std::string::npos);
  CHECK(std::isinf(result.summary.best_iteration_seconds));

  // Every layer fits alone but no chain does (seed 2: 0.75 GiB devices): still a reason.
  const Problem tight = MakeRandomSmallProblem(2);
  const SearchResult none = IlpSearcher().Search(tight, SearchOptions{});
  CHECK(none.summary.termination == TerminationType::kInfeasible);
  CHECK(none.summary.message.find("no feasible plan") == 0);
  CHECK(none.summary.message.find("memory") != std::string::npos);
}

TEST_CASE("ILP with a warm start returns a plan at least as good as the warm start") {
  for (std::uint64_t seed : {4, 5, 9, 19}) {
    const Problem problem = MakeRandomSmallProblem(seed);
    if (!RequireCbc(problem, SearchOptions{})) return;
    CAPTURE(seed);
    // A poor warm start: the shortest MCMC run that finds a plan that fits.
    SearchResult mcmc;
    for (long evaluations = 3; !mcmc.plan && evaluations < 100000; evaluations *= 4) {
      SearchOptions short_run;
      short_run.max_evaluations = evaluations;
      mcmc = McmcSearcher().Search(problem, short_run);
    }
    REQUIRE(mcmc.plan.has_value());
    const double warm_seconds = Evaluate(problem, *mcmc.plan).iteration_seconds;

    IlpOptions ilp_options;
    ilp_options.warm_start = mcmc.plan;
    const SearchResult result = IlpSearcher(ilp_options).Search(problem, SearchOptions{});
    INFO(result.summary.message);
    REQUIRE(result.plan.has_value());
    CHECK(result.summary.termination == TerminationType::kOptimal);
    CHECK(result.summary.best_iteration_seconds <= warm_seconds);
    CHECK(result.summary.initial_iteration_seconds == warm_seconds);
    CHECK(result.summary.message.find("warm start") != std::string::npos);
    const SearchResult cold = IlpSearcher().Search(problem, SearchOptions{});
    CHECK(testing::RelativeGap(result.summary.best_iteration_seconds,
                         cold.summary.best_iteration_seconds) <= 1e-9);

    // Out of time before any MILP, the warm start (or better) comes back.
    IlpSearcher warm(ilp_options);
    SearchOptions instant;
    instant.time_limit_seconds = 1e-9;
    const SearchResult quick = warm.Search(problem, instant);
    REQUIRE(quick.plan.has_value());
    CHECK(quick.summary.best_iteration_seconds <= warm_seconds);
  }

  // A warm start of another problem is ignored, with the reason.
  const Problem problem = MakeRandomSmallProblem(4);
  if (!IlpSearcher::Available()) return;
  Plan foreign = *IlpSearcher().Search(problem, SearchOptions{}).plan;
  foreign.global_batch_size += 1;
  IlpSearcher searcher;
  searcher.set_warm_start(foreign);
  const SearchResult result = searcher.Search(problem, SearchOptions{});
  CHECK(result.summary.termination == TerminationType::kOptimal);
  CHECK(result.summary.message.find("warm start ignored") != std::string::npos);
}

TEST_CASE("ILP = DP = exhaustive optimum on 24 random small heterogeneous problems") {
  if (!RequireCbc(MakeRandomSmallProblem(1), SearchOptions{})) return;
  IlpSearcher ilp;
  DpSearcher dp;
  ExhaustiveSearcher exhaustive;
  int feasible = 0, crossing = 0, three_groups = 0;
  for (std::uint64_t seed = 1; seed <= 24; ++seed) {
    const Problem problem = MakeRandomSmallHeterogeneousProblem(seed);
    CAPTURE(seed);
    three_groups += problem.cluster.NumGroups() == 3;
    const SearchOptions options = testing::SmallHeterogeneousSpace();
    const SearchResult truth = exhaustive.Search(problem, options);
    REQUIRE_MESSAGE(truth.summary.termination != TerminationType::kDeclined,
                    truth.summary.message);
    const SearchResult by_dp = dp.Search(problem, options);
    const SearchResult result = ilp.Search(problem, options);
    if (!CheckIlpAgainstExact(problem, truth, by_dp, result)) continue;
    ++feasible;
    const std::vector<int> groups = testing::StageGroups(*result.plan);
    CHECK(SearchSpace::GroupsInRuns(groups));
    const SearchSpace space = SearchSpace::Build(problem, options.space);
    std::vector<int> used(space.group_devices.size(), 0);
    for (const StagePlan& stage : result.plan->stages)
      used[stage.config.node_group] += stage.config.NumDevices();
    for (size_t g = 0; g < used.size(); ++g) CHECK(used[g] <= space.group_devices[g]);
    crossing += groups.front() != groups.back();
  }
  MESSAGE(feasible, " of 24 feasible, ", crossing, " optima span two groups or more, ",
          three_groups, " problems of 3 groups");
  CHECK(feasible >= 12);
  CHECK(crossing >= 3);  // the optimum does use several groups: the runs and links are exercised
  CHECK(three_groups >= 6);
}

TEST_CASE("ILP: space.node_groups keeps the stages in the groups it names") {
  if (!RequireCbc(MakeRandomSmallProblem(1), SearchOptions{})) return;
  IlpSearcher ilp;
  CHECK(testing::CheckNodeGroupRestriction(ilp) >= 4);
}

TEST_CASE("ILP: a homogeneous cluster split into two identical groups has the same optimum") {
  if (!RequireCbc(MakeRandomSmallProblem(1), SearchOptions{})) return;
  int compared = 0;
  for (std::uint64_t seed = 1; seed <= 8; ++seed) {
    CAPTURE(seed);
    const auto [whole, split] = testing::WholeAndSplitProblems(seed);
    SearchOptions options;
    options.space.min_stages = 2;  // no mesh spans both nodes (the split cannot have one)
    const SearchResult a = IlpSearcher().Search(whole, options);
    const SearchResult b = IlpSearcher().Search(split, options);
    INFO("whole: ", a.summary.message);
    INFO("split: ", b.summary.message);
    REQUIRE(a.plan.has_value() == b.plan.has_value());
    if (!a.plan) continue;
    CHECK(b.summary.termination == TerminationType::kOptimal);
    CHECK(testing::RelativeGap(b.summary.best_iteration_seconds,
                               a.summary.best_iteration_seconds) <= 1e-9);
    const SearchResult by_dp = DpSearcher().Search(split, options);
    CHECK(testing::RelativeGap(b.summary.best_iteration_seconds,
                               by_dp.summary.best_iteration_seconds) <= 1e-9);
    ++compared;
  }
  CHECK(compared >= 4);
}

TEST_CASE("ILP on heterogeneous clusters: warm starts, a time limit, units in the summary") {
  if (!RequireCbc(MakeRandomSmallProblem(1), SearchOptions{})) return;
  const SearchOptions options = testing::SmallHeterogeneousSpace();
  int warm_started = 0, out_of_runs = 0;
  for (std::uint64_t seed = 1; seed <= 12; ++seed) {
    CAPTURE(seed);
    const Problem problem = MakeRandomSmallHeterogeneousProblem(seed);
    const SearchResult dp = DpSearcher().Search(problem, options);
    if (!dp.plan) continue;
    // The DP's optimum as the warm start: used (not ignored), and nothing better exists.
    IlpOptions ilp_options;
    ilp_options.warm_start = dp.plan;
    const SearchResult warm = IlpSearcher(ilp_options).Search(problem, options);
    INFO("warm: ", warm.summary.message);
    CHECK(warm.summary.termination == TerminationType::kOptimal);
    CHECK(warm.summary.message.find("; warm start ") != std::string::npos);
    CHECK(warm.summary.message.find("warm start ignored") == std::string::npos);
    CHECK(warm.summary.initial_iteration_seconds == dp.summary.best_iteration_seconds);
    CHECK(testing::RelativeGap(warm.summary.best_iteration_seconds,
                               dp.summary.best_iteration_seconds) <= 1e-9);
    CHECK(warm.summary.message.find("(microbatch count, node-group order) pairs") !=
          std::string::npos);
    ++warm_started;

    // A warm start that leaves a group and comes back is outside the space: ignored, with why.
    const SearchSpace space = SearchSpace::Build(problem, options.space);
    Plan back_and_forth = *dp.plan;
    back_and_forth.stages.clear();
    const int L = problem.NumLayers();
    for (const StageConfig& first : space.configs) {
      if (first.NumDevices() * 2 > space.group_devices[first.node_group] || L < 3) continue;
      for (const StageConfig& middle : space.configs) {
        if (middle.node_group == first.node_group) continue;
        Plan plan = *dp.plan;
        plan.stages = {{0, 1, first}, {1, 2, middle}, {2, L, first}};
        try {
          if (!Evaluate(problem, plan).Fits()) continue;
        } catch (const InputError&) {
          continue;  // e.g. a configuration invalid for the plan's microbatch count
        }
        back_and_forth = plan;
        break;
      }
      if (!back_and_forth.stages.empty()) break;
    }
    if (back_and_forth.stages.empty()) continue;
    ilp_options.warm_start = back_and_forth;
    const SearchResult ignored = IlpSearcher(ilp_options).Search(problem, options);
    INFO("back and forth: ", ignored.summary.message);
    CHECK(ignored.summary.message.find("warm start ignored: its stages do not visit the node "
                                       "groups in runs") != std::string::npos);
    CHECK(testing::RelativeGap(ignored.summary.best_iteration_seconds,
                               dp.summary.best_iteration_seconds) <= 1e-9);
    ++out_of_runs;
  }
  CHECK(warm_started >= 8);
  MESSAGE(out_of_runs, " warm starts out of runs ignored");

  // Out of time before any MILP: stopped by the time limit, counted in units.
  SearchOptions instant = options;
  instant.time_limit_seconds = 1e-9;
  const SearchResult stopped =
      IlpSearcher().Search(MakeRandomSmallHeterogeneousProblem(3), instant);
  CHECK(stopped.summary.termination == TerminationType::kTimeLimit);
  CHECK(stopped.summary.message.find("stopped by the time limit") == 0);
  CHECK(stopped.summary.message.find("units settled") != std::string::npos);
}

// Run explicitly: search_test --no-skip -tc='ILP benchmark*'
TEST_CASE("ILP benchmark: time to prove optimality on GPT-3 6.7B, 64 GPUs" * doctest::skip()) {
  const Problem problem = Gpt67bOn64Gpus();
  SearchOptions options;
  options.time_limit_seconds = 600;
  options.progress = true;
  const SearchResult dp = DpSearcher().Search(problem, options);
  const SearchResult ilp = IlpSearcher().Search(problem, options);
  MESSAGE(fmt::format("dp: {}\nilp: {}\n{}", dp.summary.BriefReport(), ilp.summary.BriefReport(),
                      ilp.summary.message));
  options.space.num_microbatches = {256};
  const SearchResult ilp256 = IlpSearcher().Search(problem, options);
  MESSAGE(fmt::format("ilp (m = 256 only): {}\n{}", ilp256.summary.BriefReport(),
                      ilp256.summary.message));
}

}  // namespace stratos
