// DpSearcher (Alpa's inter-operator DP) and the Searcher interface (options, summary).
#include <doctest/doctest.h>
#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "baselines/dp_searcher.h"
#include "baselines/exhaustive_searcher.h"
#include "baselines/grid_searcher.h"
#include "costmodel/cluster_io.h"
#include "costmodel/error.h"
#include "costmodel/evaluate.h"
#include "costmodel/model_io.h"
#include "costmodel/search_space.h"
#include "costmodel/synthetic.h"
#include "costmodel/zoo.h"
#include "search_test_util.h"

namespace stratos {
namespace {


// 4 explicit layers of 1, 2, 3, 4 FLOPs per sample on 2 devices of 1 FLOP/s with 1 byte of
// activations per layer and sample, a cut cost of 2 s, global batch 4, 1F1B, only 1x1 meshes.
Problem HandProblem(double memory_bytes) {
  Problem problem;
  ModelSpec& model = problem.model;
  model.name = "hand-4";
  model.family = "explicit";
  model.source = "test_dp.cc";
  model.cut_cost_seconds = 2.0;
  model.backward_to_forward_ratio = 0.0;
  for (int l = 0; l < 4; ++l) {
    LayerSpec layer;
    layer.name = fmt::format("layer.{}", l);
    layer.kind = LayerKind::kExplicit;
    layer.cost_class = l;
    layer.forward_flops = l + 1;
    layer.activation_sharded_bytes = 1.0;
    model.layers.push_back(layer);
  }
  ClusterSpec& cluster = problem.cluster;
  cluster.name = "hand-2";
  cluster.source = "test_dp.cc";
  cluster.devices.push_back({"unit", 1.0, memory_bytes, 1e18, 1.0, 0.0, "test"});
  cluster.node_groups.push_back({1, 2, "unit"});
  cluster.networks.push_back({"nvlink", 1e18, 0.0, 1.0, "test"});
  problem.training.global_batch_size = 4;
  problem.training.schedule = Schedule::kOneFOneB;
  return problem;
}

SearchOptions HandOptions() {
  SearchOptions options;
  options.space.max_data_parallel = 1;
  options.space.max_tensor_parallel = 1;
  options.space.allow_zero = false;
  options.space.recompute = {Recompute::kNone};
  return options;
}

std::vector<int> StageSizes(const Plan& plan) {
  std::vector<int> sizes;
  for (const StagePlan& stage : plan.stages) sizes.push_back(stage.NumLayers());
  return sizes;
}

}  // namespace

TEST_CASE("SearchOptions::Validate names the field, the value and the rule") {
  SearchOptions options;
  CHECK_NOTHROW(options.Validate());
  options.time_limit_seconds = -1;
  CHECK_THROWS_WITH_AS(options.Validate(),
                       doctest::Contains("search.time_limit_seconds = -1: must be > 0"),
                       InputError);
  options = SearchOptions{};
  options.max_evaluations = -5;
  CHECK_THROWS_WITH_AS(options.Validate(), doctest::Contains("max_evaluations = -5"), InputError);
  options = SearchOptions{};
  options.threads = 0;
  CHECK_THROWS_WITH_AS(options.Validate(), doctest::Contains("threads = 0: must be >= 1"),
                       InputError);
  options = SearchOptions{};
  options.space.min_stages = 0;
  CHECK_THROWS_AS(options.Validate(), InputError);
}

TEST_CASE("TerminationTypeName spells every termination type") {
  CHECK(std::string(TerminationTypeName(TerminationType::kOptimal)) == "optimal");
  CHECK(std::string(TerminationTypeName(TerminationType::kConverged)) == "converged");
  CHECK(std::string(TerminationTypeName(TerminationType::kTimeLimit)) == "time_limit");
  CHECK(std::string(TerminationTypeName(TerminationType::kEvaluationLimit)) == "evaluation_limit");
  CHECK(std::string(TerminationTypeName(TerminationType::kInfeasible)) == "infeasible");
}

TEST_CASE("DP finds the hand-computed optimum of a 4-layer, 2-device problem") {
  // m = 4 (b = 1) beats m = 1, 2. One stage: t = 10, T = 10 + 3 * 10 = 40. Two stages, cut
  // after layer k: T = 10 + 3 * max(t0, t1) + 2 (cut): [1|2,3,4] 39, [1,2|3,4] 33,
  // [1,2,3|4] 30. The first of two 1F1B stages holds 2 microbatches, so with 5 bytes of
  // memory [1,2,3|4] (2 x 3 bytes) does not fit and the optimum is [1,2|3,4] = 33.
  DpSearcher dp;
  {
    const Problem problem = HandProblem(100.0);
    const SearchResult result = dp.Search(problem, HandOptions());
    REQUIRE(result.plan.has_value());
    CHECK(result.summary.termination == TerminationType::kOptimal);
    CHECK(result.summary.best_iteration_seconds == doctest::Approx(30.0).epsilon(1e-12));
    CHECK(result.plan->num_microbatches == 4);
    CHECK(StageSizes(*result.plan) == std::vector<int>{3, 1});
    REQUIRE(result.summary.lower_bound_seconds.has_value());
    CHECK(*result.summary.lower_bound_seconds == result.summary.best_iteration_seconds);
  }
  {
    const Problem problem = HandProblem(5.0);
    const SearchResult result = dp.Search(problem, HandOptions());
    REQUIRE(result.plan.has_value());
    CHECK(result.summary.best_iteration_seconds == doctest::Approx(33.0).epsilon(1e-12));
    CHECK(result.plan->num_microbatches == 4);
    CHECK(StageSizes(*result.plan) == std::vector<int>{2, 2});
    const Estimate estimate = Evaluate(problem, *result.plan);
    CHECK(estimate.Fits());
    CHECK(estimate.iteration_seconds == doctest::Approx(33.0).epsilon(1e-12));
  }
}

TEST_CASE("DP reaches the seed optimum on every seed pipeline-partition case") {
  DpSearcher dp;
  for (const SeedCaseRow& row : ReadSeedPartitionCases()) {
    const std::string label =
        fmt::format("L={} k={} B={} layer={} cut={}", row.num_layers, row.num_stages,
                    row.num_microbatches, row.layer_cost, row.cut_cost);
    CAPTURE(label);
    const SeedCase seed = MakeSeedPartitionCase(row.num_layers, row.num_stages,
                                                row.num_microbatches, row.layer_cost, row.cut_cost);
    SearchOptions options;
    options.space = seed.space;
    const SearchResult result = dp.Search(seed.problem, options);
    REQUIRE(result.plan.has_value());
    CHECK(result.summary.termination == TerminationType::kOptimal);
    CHECK(result.plan->NumStages() == row.num_stages);
    const Estimate estimate = Evaluate(seed.problem, *result.plan);
    CHECK(std::abs(estimate.steady_seconds + estimate.tail_seconds - row.optimal_cost) <= 1e-9);
    CHECK(estimate.iteration_seconds == doctest::Approx(result.summary.best_iteration_seconds));
    // The seed's own split is a plan of the same space and is no better.
    Plan seed_plan = *result.plan;
    int first = 0;
    for (int s = 0; s < row.num_stages; ++s) {
      seed_plan.stages[s].first_layer = first;
      first += row.optimal_split[s];
      seed_plan.stages[s].last_layer = first;
    }
    const Estimate seed_estimate = Evaluate(seed.problem, seed_plan);
    CHECK(std::abs(seed_estimate.steady_seconds + seed_estimate.tail_seconds - row.optimal_cost) <=
          1e-9);
  }
}

TEST_CASE("DP summary records the search: algorithm, evaluations, anytime trace, reports") {
  const Problem problem = MakeRandomSmallProblem(7);
  DpSearcher dp;
  std::vector<double> improvements;
  SearchOptions options;
  options.on_improvement = [&](double, double best) { improvements.push_back(best); };
  const SearchResult result = dp.Search(problem, options);
  const SearchSummary& summary = result.summary;
  CHECK(summary.algorithm == "dp");
  if (!result.plan) {
    CHECK(summary.termination == TerminationType::kInfeasible);
    return;
  }
  CHECK(summary.termination == TerminationType::kOptimal);
  CHECK(summary.evaluations > 0);
  CHECK(summary.wall_seconds > 0);
  REQUIRE(!summary.anytime.empty());
  CHECK(summary.anytime.back().best_iteration_seconds == summary.best_iteration_seconds);
  CHECK(improvements.size() == summary.anytime.size());
  for (size_t k = 1; k < summary.anytime.size(); ++k)
    CHECK(summary.anytime[k].best_iteration_seconds <
          summary.anytime[k - 1].best_iteration_seconds);
  CHECK(summary.initial_iteration_seconds >= summary.best_iteration_seconds);
  CHECK(result.plan->global_batch_size == problem.training.global_batch_size);
  CHECK(result.plan->schedule == problem.training.schedule);
  CHECK(Evaluate(problem, *result.plan).iteration_seconds == summary.best_iteration_seconds);
  const std::string brief = summary.BriefReport();
  CHECK(brief.find("dp: optimal") == 0);
  CHECK(brief.find('\n') == std::string::npos);
  const std::string full = summary.FullReport();
  CHECK(full.find("Lower bound") != std::string::npos);
  CHECK(full.find("optimal") != std::string::npos);
}

TEST_CASE("DP honours a tiny time limit") {
  const Problem problem = MakeRandomSmallProblem(3);
  DpSearcher dp;
  SearchOptions options;
  options.time_limit_seconds = 1e-9;
  const SearchResult result = dp.Search(problem, options);
  const TerminationType t = result.summary.termination;
  CHECK((t == TerminationType::kTimeLimit || t == TerminationType::kOptimal ||
         t == TerminationType::kInfeasible));
  if (t == TerminationType::kTimeLimit) {
    CHECK(result.summary.message.find("time limit") != std::string::npos);
    if (result.summary.lower_bound_seconds && result.plan)
      CHECK(*result.summary.lower_bound_seconds <= result.summary.best_iteration_seconds);
  }
  // A budget of one G evaluation stops at the evaluation limit, with the plan it found.
  options = SearchOptions{};
  options.max_evaluations = 1;
  const SearchResult limited = dp.Search(HandProblem(100.0), [] {
    SearchOptions o = HandOptions();
    o.max_evaluations = 1;
    return o;
  }());
  CHECK((limited.summary.termination == TerminationType::kEvaluationLimit ||
         limited.summary.termination == TerminationType::kOptimal));
  CHECK(limited.plan.has_value());
}

TEST_CASE("DP stopped by its time limit returns its best plan and a valid lower bound") {
  Problem problem;
  problem.model = ReadModelFile(ResolveModelPath("gpt3-6.7b"));
  problem.cluster = ReadClusterFile(ResolveClusterPath("p3.16xlarge-datasheet")).WithNodes(8);
  problem.training.global_batch_size = 512;
  SearchOptions options;
  const SearchResult full = DpSearcher().Search(problem, options);
  REQUIRE(full.summary.termination == TerminationType::kOptimal);
  for (double fraction : {0.2, 0.5, 0.8}) {
    CAPTURE(fraction);
    options.time_limit_seconds = std::max(1e-4, fraction * full.summary.wall_seconds);
    const SearchResult limited = DpSearcher().Search(problem, options);
    INFO(limited.summary.FullReport());
    if (limited.summary.termination == TerminationType::kOptimal) {
      CHECK(limited.summary.best_iteration_seconds == full.summary.best_iteration_seconds);
      continue;  // timing noise: it finished in time
    }
    CHECK(limited.summary.termination == TerminationType::kTimeLimit);
    if (limited.plan) {
      CHECK(limited.summary.best_iteration_seconds >= full.summary.best_iteration_seconds);
      CHECK(Evaluate(problem, *limited.plan).Fits());
    }
    if (limited.summary.lower_bound_seconds) {
      CHECK(*limited.summary.lower_bound_seconds <=
            full.summary.best_iteration_seconds * (1 + 1e-12));
      CHECK(*limited.summary.lower_bound_seconds <= limited.summary.best_iteration_seconds);
    }
  }
}

TEST_CASE("DP reports an infeasible problem with a memory message") {
  const Problem problem = HandProblem(0.5);  // one layer of one sample needs 1 byte
  DpSearcher dp;
  const SearchResult result = dp.Search(problem, HandOptions());
  CHECK_FALSE(result.plan.has_value());
  CHECK(result.summary.termination == TerminationType::kInfeasible);
  CHECK_FALSE(result.summary.HasPlan());
  CHECK(result.summary.message.find("memory") != std::string::npos);
  CHECK(result.summary.message.find("layer 0") != std::string::npos);
  CHECK(result.summary.message.find("needs at least 1 B per device") != std::string::npos);
  CHECK(result.summary.BriefReport().find("infeasible") != std::string::npos);

  // A real model that cannot fit: GPT-3 175B on one 80 GB GPU.
  Problem big;
  big.model = ReadModelFile(ResolveModelPath("gpt3-175b"));
  big.cluster = ReadClusterFile(ResolveClusterPath("dgx-a100-80gb"));
  big.cluster.node_groups[0].gpus_per_node = 1;
  big.training.global_batch_size = 8;
  const SearchResult none = dp.Search(big, SearchOptions{});
  CHECK(none.summary.termination == TerminationType::kInfeasible);
  CHECK(none.summary.message.find("memory") != std::string::npos);
}

// Run explicitly: search_test --no-skip -tc='DP benchmark*'
TEST_CASE("DP benchmark on GPT ladders" * doctest::skip()) {
  struct Case {
    const char* model;
    const char* cluster;
    int nodes;
    int global_batch;
    int num_layers;  // 0: the model's own
  };
  const Case cases[] = {
      {"gpt3-1.3b", "dgx-a100-80gb", 1, 512, 0},
      {"gpt3-6.7b", "dgx-a100-80gb", 2, 512, 0},
      {"gpt3-6.7b", "dgx-a100-80gb", 8, 512, 0},
      {"gpt3-13b", "p3.16xlarge-datasheet", 8, 1024, 0},
      {"gpt3-13b", "dgx-a100-80gb", 16, 1024, 0},
      {"llama2-70b", "g4dn.12xlarge-datasheet", 64, 1024, 0},
      {"gpt3-175b", "dgx-a100-80gb", 64, 1536, 0},
      {"gpt3-175b", "dgx-a100-80gb", 128, 1536, 0},
      {"gpt3-175b", "p3.16xlarge-datasheet", 128, 1536, 126}};
  for (const Case& c : cases) {
    Problem problem;
    problem.model = ReadModelFile(ResolveModelPath(c.model));
    if (c.num_layers > 0) {
      problem.model.num_layers = c.num_layers;
      problem.model.layers.clear();
      BuildTransformerLayers(problem.model);
    }
    problem.cluster = ReadClusterFile(ResolveClusterPath(c.cluster)).WithNodes(c.nodes);
    problem.training.global_batch_size = c.global_batch;
    SearchOptions options;
    options.time_limit_seconds = 600;
    options.progress = true;
    const auto start = std::chrono::steady_clock::now();
    const SearchResult result = DpSearcher().Search(problem, options);
    const double seconds =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    const SearchSpace space = SearchSpace::Build(problem, options.space);
    options.progress = false;
    const SearchResult grid = GridSearcher().Search(problem, options);
    MESSAGE(grid.summary.BriefReport());
    if (grid.plan && result.plan)
      CHECK(result.summary.best_iteration_seconds <= grid.summary.best_iteration_seconds);
    MESSAGE(fmt::format(
        "{} on {} x {} GPUs (B={}, {} layers, {} configs, {} microbatch "
        "counts): {:.2f} s; {}\n  {}",
        c.model, c.cluster, problem.NumDevices(), c.global_batch, problem.NumLayers(),
        space.configs.size(), space.num_microbatches.size(), seconds, result.summary.BriefReport(),
        result.plan ? result.plan->Summary() : std::string("no plan")));
  }
}

TEST_CASE("the search space's microbatch counts are the batch's divisors, up to a batch of "
          "INT_MAX") {
  Problem problem = testing::ZooProblem("gpt3-1.3b", "dgx-a100-80gb", 1);
  problem.training.global_batch_size = 36;
  CHECK(SearchSpace::Build(problem).num_microbatches == std::vector<int>{1, 2, 3, 4, 6, 9, 12, 18, 36});
  SpaceOptions capped;
  capped.max_num_microbatches = 10;
  CHECK(SearchSpace::Build(problem, capped).num_microbatches == std::vector<int>{1, 2, 3, 4, 6, 9});
  // 2^31 - 1 is prime; counting to it overflowed an int and divided by zero.
  problem.training.global_batch_size = 2147483647;
  CHECK(SearchSpace::Build(problem).num_microbatches == std::vector<int>{1, 2147483647});
}

TEST_CASE("max_tensor_parallel above the node adds TP groups of whole nodes to the space, and "
          "the DP searches them") {
  const Problem problem = testing::ZooProblem("gpt3-1.3b", "dgx-a100-80gb", 2);
  auto max_tp = [](const SearchSpace& space, int mesh_nodes) {
    int most = 0;
    for (const StageConfig& c : space.configs)
      if (c.mesh_nodes == mesh_nodes) most = std::max(most, c.tensor_parallel);
    return most;
  };
  const SearchSpace inside = SearchSpace::Build(problem);
  CHECK(max_tp(inside, 2) == 8);
  SpaceOptions wide;
  wide.max_tensor_parallel = 16;
  const SearchSpace across = SearchSpace::Build(problem, wide);
  CHECK(max_tp(across, 1) == 8);
  CHECK(max_tp(across, 2) == 16);
  CHECK(across.configs.size() > inside.configs.size());
  // A larger space: the DP's proven optimum can only improve, and its plan evaluates to it.
  DpSearcher dp;
  SearchOptions options;
  const SearchResult plain = dp.Search(problem, options);
  options.space = wide;
  const SearchResult widened = dp.Search(problem, options);
  REQUIRE(plain.plan.has_value());
  REQUIRE(widened.plan.has_value());
  CHECK(widened.summary.termination == TerminationType::kOptimal);
  CHECK(widened.summary.best_iteration_seconds <= plain.summary.best_iteration_seconds);
  CHECK(Evaluate(problem, *widened.plan).iteration_seconds ==
        doctest::Approx(widened.summary.best_iteration_seconds).epsilon(1e-9));
}

}  // namespace stratos
