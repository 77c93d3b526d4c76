// Searching heterogeneous clusters: the DP (an outer enumeration of node-group orders) equals the
// exhaustive search, which visits the groups in runs within each group's device budget; the
// searchers that do not take such clusters yet decline them (the ILP's own checks are in
// test_ilp.cc).
#include <doctest/doctest.h>

#include <algorithm>
#include <string>
#include <vector>

#include "baselines/dp_searcher.h"
#include "baselines/exhaustive_searcher.h"
#include "baselines/grid_searcher.h"
#include "baselines/local_searcher.h"
#include "baselines/mcmc_searcher.h"
#include "costmodel/error.h"
#include "costmodel/evaluate.h"
#include "costmodel/synthetic.h"
#include "search/relax_searcher.h"
#include "tests/search/search_test_util.h"

namespace stratos {
namespace {

// The space the exhaustive search can cover on the random heterogeneous problems.
SearchOptions SmallSpace() { return testing::SmallHeterogeneousSpace(); }

// Checks a heuristic's plan in `result` on `problem` against the DP's: it fits, Evaluate() gives
// the reported time, its groups form runs, and it is never better than the DP optimum. Returns
// whether it is optimal.
bool CheckHeuristicPlan(const Problem& problem, const SearchResult& result,
                        const SearchResult& dp) {
  const Estimate estimate = Evaluate(problem, *result.plan);  // validates the group budgets
  CHECK(estimate.Fits());
  CHECK(estimate.iteration_seconds == result.summary.best_iteration_seconds);
  CHECK(SearchSpace::GroupsInRuns(testing::StageGroups(*result.plan)));
  CHECK(estimate.iteration_seconds >= dp.summary.best_iteration_seconds * (1 - 1e-9));
  return testing::RelativeGap(estimate.iteration_seconds, dp.summary.best_iteration_seconds) <=
         1e-9;
}
using testing::StageGroups;
using testing::ZooProblem;

}  // namespace

TEST_CASE("the runs rule: each group's stages are consecutive, each group at most one run") {
  CHECK(SearchSpace::GroupsInRuns({}));
  CHECK(SearchSpace::GroupsInRuns({0, 0, 1, 1, 2}));
  CHECK(SearchSpace::GroupsInRuns({2, 0}));
  CHECK_FALSE(SearchSpace::GroupsInRuns({0, 1, 0}));
  CHECK_FALSE(SearchSpace::GroupsInRuns({1, 1, 2, 1}));
}

TEST_CASE("the search space of a heterogeneous cluster has each group's meshes and budget") {
  const Problem problem = MakeRandomSmallHeterogeneousProblem(3);
  const SearchSpace space = SearchSpace::Build(problem, SmallSpace().space);
  REQUIRE(space.Heterogeneous());
  REQUIRE(space.group_devices.size() == problem.cluster.node_groups.size());
  int devices = 0;
  for (size_t g = 0; g < space.group_devices.size(); ++g) {
    CHECK(space.group_devices[g] == problem.cluster.GroupDevices(static_cast<int>(g)));
    devices += space.group_devices[g];
    bool has_config = false;
    for (const StageConfig& config : space.configs)
      if (config.node_group == static_cast<int>(g)) {
        has_config = true;
        CHECK(config.mesh_gpus_per_node <= problem.cluster.Group(static_cast<int>(g)).gpus_per_node);
      }
    CHECK(has_config);
  }
  CHECK(space.num_devices == devices);
}

TEST_CASE("DP equals exhaustive on 24 random small heterogeneous problems") {
  DpSearcher dp;
  ExhaustiveSearcher exhaustive;
  int feasible = 0, crossing = 0, three_groups = 0;
  for (std::uint64_t seed = 1; seed <= 24; ++seed) {
    const Problem problem = MakeRandomSmallHeterogeneousProblem(seed);
    CAPTURE(seed);
    three_groups += problem.cluster.NumGroups() == 3;
    const SearchOptions options = SmallSpace();
    const SearchResult truth = exhaustive.Search(problem, options);
    REQUIRE_MESSAGE(truth.summary.termination != TerminationType::kDeclined,
                    truth.summary.message);
    const SearchResult result = dp.Search(problem, options);
    INFO("exhaustive: ", truth.summary.BriefReport(), " ", truth.summary.message);
    INFO("dp: ", result.summary.BriefReport(), " ", result.summary.message);
    REQUIRE(truth.plan.has_value() == result.plan.has_value());
    if (!truth.plan) {
      CHECK(truth.summary.termination == TerminationType::kInfeasible);
      CHECK(result.summary.termination == TerminationType::kInfeasible);
      continue;
    }
    ++feasible;
    CHECK(result.summary.termination == TerminationType::kOptimal);
    const Estimate estimate = Evaluate(problem, *result.plan);
    CHECK(estimate.Fits());
    CHECK(estimate.iteration_seconds == result.summary.best_iteration_seconds);
    CHECK(testing::RelativeGap(estimate.iteration_seconds, truth.summary.best_iteration_seconds) <=
          1e-9);
    CHECK(SearchSpace::GroupsInRuns(StageGroups(*result.plan)));
    CHECK(SearchSpace::GroupsInRuns(StageGroups(*truth.plan)));
    std::vector<int> groups = StageGroups(*result.plan);
    crossing += groups.front() != groups.back();
  }
  MESSAGE(feasible, " of 24 feasible, ", crossing, " optima span two groups or more, ",
          three_groups, " problems of 3 groups");
  CHECK(feasible >= 12);
  CHECK(crossing >= 3);  // the optimum does use several groups, so the links are exercised
  CHECK(three_groups >= 6);
}

TEST_CASE("space.node_groups keeps the stages in the groups it names") {
  const Problem problem = MakeRandomSmallHeterogeneousProblem(5);
  SearchOptions options = SmallSpace();
  options.space.node_groups = {"g1"};
  const SearchSpace space = SearchSpace::Build(problem, options.space);
  CHECK(space.group_devices[0] == 0);
  CHECK(space.group_devices[1] == problem.cluster.GroupDevices(1));
  CHECK(space.num_devices == problem.cluster.GroupDevices(1));
  for (const StageConfig& config : space.configs) CHECK(config.node_group == 1);
  DpSearcher dp;
  CHECK(testing::CheckNodeGroupRestriction(dp) >= 4);
  options.space.node_groups = {"g7"};
  CHECK_THROWS_WITH_AS(SearchSpace::Build(problem, options.space),
                       doctest::Contains("space.node_groups = g7: names no node group of cluster "),
                       InputError);
}

TEST_CASE("a homogeneous cluster split into two identical groups: DP finds the same optimum, "
          "relax the same within 1%") {
  for (std::uint64_t seed = 1; seed <= 8; ++seed) {
    CAPTURE(seed);
    const auto [whole, split] = testing::WholeAndSplitProblems(seed);
    SearchOptions options;
    options.space.min_stages = 2;  // no mesh spans both nodes (the split cannot have one)
    const SearchResult a = DpSearcher().Search(whole, options);
    const SearchResult b = DpSearcher().Search(split, options);
    REQUIRE(a.plan.has_value() == b.plan.has_value());
    if (!a.plan) continue;
    CHECK(b.summary.best_iteration_seconds == a.summary.best_iteration_seconds);
    const SearchResult relax = RelaxSearcher().Search(split, options);
    INFO("relax: ", relax.summary.message);
    REQUIRE(relax.plan.has_value());
    CHECK(relax.summary.best_iteration_seconds >= a.summary.best_iteration_seconds * (1 - 1e-9));
    CHECK(relax.summary.best_iteration_seconds <= a.summary.best_iteration_seconds * 1.01);
  }
}

TEST_CASE("grid: uniform plans in one group or across the groups, never better than the DP") {
  int spanning = 0, plans = 0;
  for (std::uint64_t seed = 1; seed <= 12; ++seed) {
    CAPTURE(seed);
    const Problem problem = MakeRandomSmallHeterogeneousProblem(seed);
    const SearchOptions options = SmallSpace();
    const SearchResult grid = GridSearcher().Search(problem, options);
    const SearchResult dp = DpSearcher().Search(problem, options);
    if (!grid.plan) continue;
    ++plans;
    REQUIRE(dp.plan.has_value());
    CHECK(grid.summary.best_iteration_seconds >= dp.summary.best_iteration_seconds);
    const std::vector<int> groups = StageGroups(*grid.plan);
    CHECK(SearchSpace::GroupsInRuns(groups));
    for (const StagePlan& stage : grid.plan->stages) {
      StageConfig shape = stage.config;
      shape.node_group = grid.plan->stages[0].config.node_group;
      CHECK(shape == grid.plan->stages[0].config);  // one configuration in every stage
    }
    spanning += groups.front() != groups.back();
  }
  MESSAGE(plans, " grid plans, ", spanning, " across groups");
  CHECK(plans >= 8);
  CHECK(spanning >= 1);
}

TEST_CASE("mcmc: plans within each group's budget and in runs, mostly the DP's optimum") {
  int optimal = 0, plans = 0;
  for (std::uint64_t seed = 1; seed <= 12; ++seed) {
    CAPTURE(seed);
    const Problem problem = MakeRandomSmallHeterogeneousProblem(seed);
    SearchOptions options = SmallSpace();
    options.max_evaluations = 60000;
    options.seed = static_cast<int>(seed);
    const SearchResult mcmc = McmcSearcher().Search(problem, options);
    const SearchResult dp = DpSearcher().Search(problem, SmallSpace());
    if (!dp.plan) CHECK_FALSE(mcmc.plan.has_value());
    if (!mcmc.plan) continue;  // a heuristic may miss a plan the DP finds (counted below)
    ++plans;
    optimal += CheckHeuristicPlan(problem, mcmc, dp);
  }
  MESSAGE(optimal, " of ", plans, " mcmc plans optimal (of 12 problems)");
  CHECK(plans >= 8);
  CHECK(optimal * 2 >= plans);
}

TEST_CASE("relax with the cut relaxation declines heterogeneous clusters") {
  const Problem problem = MakeRandomSmallHeterogeneousProblem(2);
  RelaxOptions cuts;
  cuts.relaxation = RelaxOptions::Relaxation::kCuts;
  const SearchResult result = RelaxSearcher(cuts).Search(problem, SmallSpace());
  CHECK(result.summary.termination == TerminationType::kDeclined);
  CHECK(result.summary.message ==
        "relax takes heterogeneous clusters of at most 6 node groups with relax.relaxation = "
        "smoothed-dp (2 groups, cuts); dp, exhaustive, grid, ilp and mcmc take any");
}

TEST_CASE("local: random starts on the group orders, polished within the groups, never better "
          "than the DP") {
  int plans = 0, optimal = 0;
  for (std::uint64_t seed = 1; seed <= 12; ++seed) {
    CAPTURE(seed);
    const Problem problem = MakeRandomSmallHeterogeneousProblem(seed);
    const SearchOptions options = SmallSpace();
    const SearchResult local = LocalSearcher().Search(problem, options);
    const SearchResult dp = DpSearcher().Search(problem, options);
    INFO("local: ", local.summary.message);
    REQUIRE(local.summary.termination != TerminationType::kDeclined);
    if (!local.plan) continue;
    ++plans;
    REQUIRE(dp.plan.has_value());
    optimal += CheckHeuristicPlan(problem, local, dp);
  }
  // Six random starts over up to 15 group orders: a baseline, weaker than relax here (4 of 9).
  MESSAGE(optimal, " of ", plans, " local plans optimal (of 12 problems)");
  CHECK(plans >= 8);
  CHECK(optimal * 3 >= plans);
}

TEST_CASE("relax (smoothed DP over the group orders) is within 1% of the DP optimum on 24 random "
          "small heterogeneous problems") {
  DpSearcher dp;
  int feasible = 0, exact = 0, crossing = 0;
  double worst = 0;
  for (std::uint64_t seed = 1; seed <= 24; ++seed) {
    const Problem problem = MakeRandomSmallHeterogeneousProblem(seed);
    CAPTURE(seed);
    const SearchOptions options = SmallSpace();
    const SearchResult truth = dp.Search(problem, options);
    const SearchResult result = RelaxSearcher().Search(problem, options);
    INFO("dp: ", truth.summary.BriefReport(), " ", truth.summary.message);
    INFO("relax: ", result.summary.BriefReport(), " ", result.summary.message);
    REQUIRE(truth.plan.has_value() == result.plan.has_value());
    if (!truth.plan) {
      CHECK(result.summary.termination == TerminationType::kInfeasible);
      continue;
    }
    ++feasible;
    CHECK(result.summary.termination == TerminationType::kConverged);
    const Estimate estimate = Evaluate(problem, *result.plan);
    CHECK(estimate.Fits());
    CHECK(estimate.iteration_seconds == result.summary.best_iteration_seconds);
    CHECK(SearchSpace::GroupsInRuns(StageGroups(*result.plan)));
    const double gap =
        (estimate.iteration_seconds - truth.summary.best_iteration_seconds) /
        truth.summary.best_iteration_seconds;
    CHECK(gap >= -1e-9);
    CHECK(gap <= 0.01);
    worst = std::max(worst, gap);
    exact += gap <= 1e-9;
    const std::vector<int> groups = StageGroups(*result.plan);
    crossing += groups.front() != groups.back();
  }
  MESSAGE("relax: ", exact, " of ", feasible, " at the optimum, worst gap ", 100 * worst, "%, ",
          crossing, " plans span two groups or more");
  CHECK(feasible >= 12);
  CHECK(crossing >= 3);
}

// GPT-3 175B at global batch 1536 on the zoo's DGX H100 + DGX A100 + p3.16xlarge (datasheet
// devices, as the heterogeneous ladder of README prices it) with `nodes`
// ("h100=8,a100=8,v100=16").
static Problem Gpt3On3Types(const std::string& nodes) {
  return ZooProblem("gpt3-175b", "dgx-h100-a100-v100-datasheet", nodes, 1536);
}

TEST_CASE("relax's group extension adds the node group that its coarse cuts hid (GPT-3 175B on "
          "H100 + A100 + V100, h100=8,a100=8,v100=16)") {
  const Problem problem = Gpt3On3Types("h100=8,a100=8,v100=16");
  const int v100 = 2;
  REQUIRE(problem.cluster.node_groups[v100].device == "V100-SXM2-16GB");
  RelaxOptions without_extension;
  without_extension.extend_groups = false;
  const SearchResult without = RelaxSearcher(without_extension).Search(problem, SearchOptions{});
  const SearchResult with = RelaxSearcher().Search(problem, SearchOptions{});
  INFO("without: ", without.summary.BriefReport(), " ", without.summary.message);
  INFO("with: ", with.summary.BriefReport(), " ", with.summary.message);
  REQUIRE(without.plan.has_value());
  REQUIRE(with.plan.has_value());
  // The V100s hold a layer or two per stage: the coarse cuts (every 7th layer) cannot place a
  // stage there, and the polish keeps each stage in its group.
  const std::vector<int> before = StageGroups(*without.plan), after = StageGroups(*with.plan);
  CHECK(std::count(before.begin(), before.end(), v100) == 0);
  CHECK(std::count(after.begin(), after.end(), v100) > 0);
  CHECK(with.summary.best_iteration_seconds < 0.99 * without.summary.best_iteration_seconds);
  CHECK(with.summary.message.find("the group extension found") != std::string::npos);
  CHECK(Evaluate(problem, *with.plan).iteration_seconds == with.summary.best_iteration_seconds);
}

TEST_CASE("relax's group extension tries other microbatch counts: GPT-3 13B on h100=2,a100=2,"
          "v100=4 reaches the DP's optimum, whose V100 stages need 4x the microbatches of the "
          "best plan without them") {
  const Problem problem =
      ZooProblem("gpt3-13b", "dgx-h100-a100-v100-datasheet", "h100=2,a100=2,v100=4", 512);
  const int v100 = 2;
  REQUIRE(problem.cluster.node_groups[v100].device == "V100-SXM2-16GB");
  const SearchResult dp = DpSearcher().Search(problem, SearchOptions{});
  // The extension's work bound (72 decodes) reaches 128 microbatches, the 5th count it tries,
  // and the optimum there by its 64th decode, on a loaded machine as on an idle one; 58 decodes
  // stop before that count.
  const SearchResult relax = RelaxSearcher().Search(problem, SearchOptions{});
  RelaxOptions short_extension;
  short_extension.extend_max_decodes = 58;
  const SearchResult short_relax = RelaxSearcher(short_extension).Search(problem, SearchOptions{});
  INFO("short: ", short_relax.summary.BriefReport());
  CHECK(short_relax.summary.best_iteration_seconds >
        dp.summary.best_iteration_seconds * (1 + 1e-3));
  INFO("dp: ", dp.summary.BriefReport(), " | relax: ", relax.summary.BriefReport(), " ",
       relax.summary.message);
  REQUIRE(dp.plan.has_value());
  REQUIRE(relax.plan.has_value());
  // With the extension on the best plan's own microbatch count (32) only, relax ended 0.52% above
  // at two stages on the H100s and A100s; the optimum has 12 stages, 5 on the V100s, at 128.
  CHECK(relax.summary.best_iteration_seconds <= dp.summary.best_iteration_seconds * (1 + 1e-6));
  const std::vector<int> groups = StageGroups(*relax.plan);
  CHECK(std::count(groups.begin(), groups.end(), v100) > 0);
}

TEST_CASE("relax with coarse cuts that leave room for the most stages "
          "(relax.coarse_room_for_max_stages): GPT-3 175B on h100=8,a100=16 reaches the DP's "
          "optimum of 16 stages of 5-8 layers, which the default's 14 coarse gaps miss") {
  const Problem problem =
      ZooProblem("gpt3-175b", "dgx-h100-a100-datasheet", "h100=8,a100=16", 1536);
  const SearchResult dp = DpSearcher().Search(problem, SearchOptions{});
  RelaxOptions room;
  room.coarse_room_for_max_stages = true;
  const SearchResult relax = RelaxSearcher(room).Search(problem, SearchOptions{});
  const SearchResult by_default = RelaxSearcher().Search(problem, SearchOptions{});
  INFO("dp: ", dp.summary.BriefReport(), " | relax: ", relax.summary.BriefReport(),
       " | by default: ", by_default.summary.BriefReport());
  REQUIRE(dp.plan.has_value());
  REQUIRE(relax.plan.has_value());
  REQUIRE(by_default.plan.has_value());
  REQUIRE(dp.plan->stages.size() == 16);
  CHECK(relax.summary.best_iteration_seconds <= dp.summary.best_iteration_seconds * (1 + 1e-6));
  // Coarse cuts every ceil(98 / 16) = 7th layer (14 coarse gaps): 3.26% above.
  CHECK(by_default.summary.best_iteration_seconds > dp.summary.best_iteration_seconds * 1.01);
}

TEST_CASE("relax reaches the DP's optimum of GPT-3 175B on H100 + A100 + V100 (h100=32,a100=32,"
          "v100=64): two A100 stages at TP 8, then eight H100 stages at TP 2") {
  const Problem problem = Gpt3On3Types("h100=32,a100=32,v100=64");
  const int a100 = 1;
  REQUIRE(problem.cluster.node_groups[a100].device.find("A100") != std::string::npos);
  // The DP's optimum (`stratos search --algo dp` on this problem, 2026-12-06): two A100 stages of
  // 16x8 at DP 16 x TP 8, then eight H100 stages of 4x8 at DP 16 x TP 2, the V100s idle. (Before
  // the gradient accumulation was priced it had four A100 stages of 8x8 at TP 4, which relax's
  // polish reached by splitting the gradient phase's two TP 8 stages on half their mesh.)
  Plan optimum;
  optimum.global_batch_size = 1536;
  optimum.num_microbatches = 96;
  const std::vector<int> layers{13, 12, 9, 9, 9, 9, 9, 9, 9, 10};
  int first = 0;
  for (size_t s = 0; s < layers.size(); ++s) {
    StagePlan stage;
    stage.first_layer = first;
    stage.last_layer = first += layers[s];
    StageConfig& c = stage.config;
    const bool on_a100 = s < 2;
    c.mesh_nodes = on_a100 ? 16 : 4;
    c.mesh_gpus_per_node = 8;
    c.data_parallel = 16;
    c.tensor_parallel = on_a100 ? 8 : 2;
    c.zero_stage = 1;
    c.recompute = s >= 2 && s <= 6 ? Recompute::kSelective : Recompute::kNone;
    c.node_group = on_a100 ? a100 : 0;
    optimum.stages.push_back(stage);
  }
  REQUIRE(first == static_cast<int>(problem.model.layers.size()));
  const Estimate target = Evaluate(problem, optimum);
  REQUIRE(target.Fits());
  CHECK(target.iteration_seconds == doctest::Approx(17.0561).epsilon(1e-5));
  const SearchResult result = RelaxSearcher().Search(problem, SearchOptions{});
  INFO("relax: ", result.summary.BriefReport(), " ", result.summary.message);
  REQUIRE(result.plan.has_value());
  CHECK(result.summary.best_iteration_seconds <= target.iteration_seconds * (1 + 1e-9));
  int a100_stages = 0;
  for (const StagePlan& stage : result.plan->stages) a100_stages += stage.config.node_group == a100;
  CHECK(a100_stages == 2);
}

}  // namespace stratos
