// GridSearcher: the Megatron-style uniform reference, never better than the exact DP.
#include <doctest/doctest.h>

#include <cmath>
#include <memory>
#include <string>
#include <vector>

#include "baselines/dp_searcher.h"
#include "baselines/exhaustive_searcher.h"
#include "baselines/grid_searcher.h"
#include "baselines/ilp_searcher.h"
#include "baselines/local_searcher.h"
#include "baselines/mcmc_searcher.h"
#include "costmodel/evaluate.h"
#include "costmodel/synthetic.h"
#include "relax/polish.h"
#include "relax/tables.h"
#include "search/interleaving_searcher.h"
#include "search/relax_searcher.h"
#include "search_test_util.h"

namespace stratos {

TEST_CASE("UniformStageBoundaries splits layers into sizes differing by at most one") {
  CHECK(UniformStageBoundaries(10, 4) == std::vector<int>{0, 3, 6, 8, 10});
  CHECK(UniformStageBoundaries(10, 4, true) == std::vector<int>{0, 2, 4, 7, 10});
  CHECK(UniformStageBoundaries(8, 4) == std::vector<int>{0, 2, 4, 6, 8});
  CHECK(UniformStageBoundaries(5, 1) == std::vector<int>{0, 5});
}

TEST_CASE("Grid plans have uniform stages with one shared configuration") {
  const Problem problem = MakeRandomSmallProblem(11);
  const SearchResult result = GridSearcher().Search(problem, SearchOptions{});
  CHECK(result.summary.algorithm == "grid");
  if (!result.plan) {
    CHECK(result.summary.termination == TerminationType::kInfeasible);
    return;
  }
  CHECK(result.summary.termination == TerminationType::kConverged);
  const Plan& plan = *result.plan;
  int smallest = plan.stages[0].NumLayers(), largest = smallest;
  for (const StagePlan& stage : plan.stages) {
    CHECK(stage.config == plan.stages[0].config);
    smallest = std::min(smallest, stage.NumLayers());
    largest = std::max(largest, stage.NumLayers());
  }
  CHECK(largest - smallest <= 1);
  const Estimate estimate = Evaluate(problem, plan);
  CHECK(estimate.Fits());
  CHECK(estimate.iteration_seconds == result.summary.best_iteration_seconds);
}

TEST_CASE("Grid is never better than DP on random small problems") {
  int compared = 0;
  for (std::uint64_t seed = 1; seed <= 20; ++seed) {
    CAPTURE(seed);
    const Problem problem = MakeRandomSmallProblem(seed);
    const SearchResult grid = GridSearcher().Search(problem, SearchOptions{});
    const SearchResult dp = DpSearcher().Search(problem, SearchOptions{});
    if (grid.plan) {
      // A fitting grid plan is a plan of the DP's space: the DP must find one at least as good.
      REQUIRE(dp.plan.has_value());
      CHECK(dp.summary.best_iteration_seconds <= grid.summary.best_iteration_seconds * (1 + 1e-9));
      ++compared;
    } else {
      CHECK(grid.summary.termination == TerminationType::kInfeasible);
      CHECK(grid.summary.message.find("memory") != std::string::npos);
    }
  }
  CHECK(compared >= 5);
}

TEST_CASE("Grid finds the uniform seed optimum when the seed split is uniform") {
  // 24 layers, 4 stages, cut cost 2, 3 microbatches: the optimum 6|6|6|6 is uniform.
  const SeedCase seed = MakeSeedPartitionCase(24, 4, 3, 1, 2);
  SearchOptions options;
  options.space = seed.space;
  const SearchResult result = GridSearcher().Search(seed.problem, options);
  REQUIRE(result.plan.has_value());
  const Estimate estimate = Evaluate(seed.problem, *result.plan);
  CHECK(estimate.steady_seconds + estimate.tail_seconds == doctest::Approx(18.0).epsilon(1e-12));
}

}  // namespace stratos

namespace stratos {

// GPT-3 13B on 4 DGX A100 (datasheet), global batch 128: the bubble of plain 1F1B is worth
// shrinking. A small space: no recomputation, no ZeRO, at most 4 stages.
Problem InterleavingProblem() {
  Problem problem = testing::ZooProblem("gpt3-13b", "dgx-a100-80gb-datasheet", 4);
  problem.training.global_batch_size = 128;
  return problem;
}
SearchOptions InterleavingSpace() {
  SearchOptions options;
  options.space.recompute = {Recompute::kNone};
  options.space.allow_zero = false;
  options.space.max_stages = 4;
  return options;
}

TEST_CASE("space.virtual_stages: the grid prices every uniform plan interleaved too") {
  const Problem problem = InterleavingProblem();
  SearchOptions options = InterleavingSpace();
  const SearchResult plain = GridSearcher().Search(problem, options);
  options.space.virtual_stages = {1, 2, 4};
  const SearchResult interleaved = GridSearcher().Search(problem, options);
  REQUIRE(plain.plan);
  REQUIRE(interleaved.plan);
  CHECK(interleaved.summary.evaluations > plain.summary.evaluations);
  CHECK(interleaved.summary.best_iteration_seconds < plain.summary.best_iteration_seconds);
  CHECK(interleaved.plan->virtual_stages > 1);
  CHECK(Evaluate(problem, *interleaved.plan).iteration_seconds ==
        interleaved.summary.best_iteration_seconds);
  // Offering only v = 1 is the plain search.
  options.space.virtual_stages = {1};
  CHECK(GridSearcher().Search(problem, options).summary.evaluations ==
        plain.summary.evaluations);
}

TEST_CASE("InterleavingSearcher offers the wrapped searcher's best plan interleaved") {
  const Problem problem = InterleavingProblem();
  SearchOptions options = InterleavingSpace();
  options.space.min_stages = 2;
  const SearchResult dp = DpSearcher().Search(problem, options);
  REQUIRE(dp.plan);
  REQUIRE(dp.summary.termination == TerminationType::kOptimal);
  // Without v > 1 in the space the wrapper changes nothing (around the DP kept plain: the DP
  // searches the virtual stages itself otherwise).
  InterleavingSearcher wrapped(std::make_unique<DpSearcher>(/*plain_only=*/true));
  const SearchResult same = wrapped.Search(problem, options);
  CHECK(same.summary.termination == TerminationType::kOptimal);
  CHECK(same.summary.best_iteration_seconds == dp.summary.best_iteration_seconds);
  // With v = 2 or 4: the DP's optimum (2 ranks) split into chunks. Two chunks per rank hold
  // 5/2 microbatches' worth of activations on the first rank (plain 1F1B: 2) and overflow; four
  // hold 9/4, fit and are faster (a quarter of the bubble). No proof over the larger space.
  options.space.virtual_stages = {1, 2, 4};
  const SearchResult result = wrapped.Search(problem, options);
  REQUIRE(result.plan);
  CHECK(result.summary.termination == TerminationType::kConverged);
  CHECK_FALSE(result.summary.lower_bound_seconds.has_value());
  CHECK_FALSE(Evaluate(problem, *InterleavePlan(*dp.plan, 2)).Fits());
  const Estimate four = Evaluate(problem, *InterleavePlan(*dp.plan, 4));
  REQUIRE(four.Fits());
  REQUIRE(four.iteration_seconds < dp.summary.best_iteration_seconds);
  CHECK(result.plan->virtual_stages == 4);
  CHECK(result.summary.best_iteration_seconds == four.iteration_seconds);
  CHECK(result.summary.evaluations == dp.summary.evaluations + 2);
  CHECK(result.summary.message.find("interleaved (4 virtual stages per rank)") !=
        std::string::npos);
  // A searcher that searches the virtual stages itself returns its interleaved plan untouched,
  // with its proof.
  const SearchResult own = DpSearcher().Search(problem, options);
  REQUIRE(own.plan);
  REQUIRE(own.plan->virtual_stages > 1);
  const SearchResult kept = InterleavingSearcher(std::make_unique<DpSearcher>()).Search(problem,
                                                                                    options);
  CHECK(kept.summary.termination == TerminationType::kOptimal);
  CHECK(kept.summary.message == own.summary.message);
  CHECK(kept.summary.evaluations == own.summary.evaluations);
}

// GPT-3 1.3B's shape cut to 6 blocks (8 layers with the embedding and the head) on one DGX A100
// (datasheet), global batch 16, at most 3 stages, no recomputation or ZeRO: small enough for the
// exhaustive search over every plan and its interleaved forms.
Problem SmallInterleavingProblem() {
  Problem problem = testing::ZooProblem("gpt3-1.3b", "dgx-a100-80gb-datasheet", 1);
  problem.model.num_layers = 6;
  BuildTransformerLayers(problem.model);
  problem.training.global_batch_size = 16;
  return problem;
}

TEST_CASE("dp and ilp with virtual stages: the optimum over plain and interleaved pipelines, as "
          "the exhaustive search over every plan and its interleaved forms finds it") {
  // Batch 64 also on 8 GB devices, where memory decides among the plans (with v up to 3 the
  // optimum there is 3 ranks x 2 chunks, on 80 GB 2 ranks x 3).
  for (const auto& [batch, memory_gb] : {std::pair{8, 80}, std::pair{16, 80}, std::pair{64, 80},
                                         std::pair{64, 8}}) {
  for (const std::vector<int>& offered : {std::vector<int>{1, 2}, std::vector<int>{1, 2, 3}}) {
    CAPTURE(batch);
    CAPTURE(memory_gb);
    Problem problem = SmallInterleavingProblem();
    problem.training.global_batch_size = batch;
    problem.cluster.devices[0].memory_bytes = memory_gb * 1e9;
    REQUIRE(InterleavesExactly(problem));
    SearchOptions options;
    options.space.recompute = {Recompute::kNone, Recompute::kFull};
    options.space.allow_zero = false;
    options.space.min_stages = 2;  // a pipeline, where the bubble is worth shrinking
    options.space.max_stages = 3;
    const SearchResult plain = DpSearcher().Search(problem, options);
    REQUIRE(plain.plan);
    options.space.virtual_stages = offered;
    const SearchResult dp = DpSearcher().Search(problem, options);
    const SearchResult truth = ExhaustiveSearcher().Search(problem, options);
    REQUIRE(dp.plan);
    REQUIRE(truth.plan);
    INFO(dp.summary.message, " | ", truth.summary.message);
    CHECK(dp.summary.termination == TerminationType::kOptimal);
    CHECK(truth.summary.termination == TerminationType::kOptimal);
    CHECK(testing::RelativeGap(dp.summary.best_iteration_seconds,
                               truth.summary.best_iteration_seconds) < 1e-9);
    CHECK(Evaluate(problem, *dp.plan).iteration_seconds == dp.summary.best_iteration_seconds);
    // Interleaving wins here: the plain optimum is beaten.
    CHECK(dp.plan->virtual_stages > 1);
    CHECK(dp.summary.best_iteration_seconds < plain.summary.best_iteration_seconds);
    // The ILP's units of p ranks x v chunks prove the same optimum (CBC's tolerances: 1e-6).
    if (IlpSearcher::Available()) {
      const SearchResult ilp = IlpSearcher().Search(problem, options);
      REQUIRE(ilp.plan);
      INFO(ilp.summary.message);
      CHECK(ilp.summary.termination == TerminationType::kOptimal);
      CHECK(testing::RelativeGap(ilp.summary.best_iteration_seconds,
                                 truth.summary.best_iteration_seconds) < 1e-6);
      CHECK(Evaluate(problem, *ilp.plan).iteration_seconds ==
            ilp.summary.best_iteration_seconds);
      CHECK(ilp.plan->virtual_stages > 1);
    }
  }
  }
}

TEST_CASE("relax tables price a rank of v chunks as Evaluate prices the interleaved plan") {
  Problem problem = SmallInterleavingProblem();
  problem.training.global_batch_size = 64;
  problem.cluster.devices[0].memory_bytes = 8e9;  // memory in flight decides some plans
  const CostModel cost_model(problem);
  SpaceOptions space_options;
  space_options.max_stages = 4;
  const SearchSpace space = SearchSpace::Build(problem, space_options);
  const RelaxTables tables = BuildRelaxTables(cost_model, space, {1, 3, 2});
  REQUIRE(tables.virtual_stages == std::vector<int>{1, 2, 3});
  PlanPolisher polisher(tables);
  int checked = 0, interleaved_fit = 0, interleaved_overflow = 0, rejected = 0;
  for (int S = 1; S <= 4; ++S)
    for (int k = 0; k < tables.num_configs; ++k)
      for (int m = 0; m < tables.num_microbatch_options; ++m)
        for (int vi = 0; vi < 3; ++vi) {
          if (!tables.Valid(k, m) || S * tables.configs[k].NumDevices() > tables.num_devices)
            continue;
          DiscretePlan plan;
          plan.microbatch_option = m;
          plan.virtual_option = vi;
          plan.configs.assign(S, k);
          for (int s = 0; s <= S; ++s) plan.boundaries.push_back(s * tables.num_layers / S);
          const DiscreteCost cost = polisher.Cost(plan);
          // Interleaving needs two ranks and a layer per chunk (8 layers over 4 stages: 2 each).
          const int v = tables.virtual_stages[vi];
          if (v > 1 && (S < 2 || tables.num_layers / S < v)) {
            CHECK_FALSE(cost.valid);
            ++rejected;
            continue;
          }
          REQUIRE(cost.valid);
          const Plan priced = polisher.ToPlan(plan);
          CHECK(priced.virtual_stages == v);
          CHECK(polisher.FromPlan(priced) == plan);
          const Estimate estimate = Evaluate(cost_model, priced);
          INFO(priced.Summary());
          CHECK(std::abs(cost.iteration_seconds - estimate.iteration_seconds) <=
                1e-9 * estimate.iteration_seconds);
          CHECK(cost.Fits() == estimate.Fits());
          ++checked;
          if (v > 1) ++(estimate.Fits() ? interleaved_fit : interleaved_overflow);
        }
  CHECK(checked > 100);
  CHECK(interleaved_fit > 10);
  CHECK(interleaved_overflow > 10);
  CHECK(rejected > 10);
  // Where the tables could not price a rank of chunks exactly, they offer plain pipelines only.
  problem.model.layers[3].cost_class = 7;
  const CostModel other(problem);
  const RelaxTables plain_only =
      BuildRelaxTables(other, SearchSpace::Build(problem, space_options), {1, 2});
  CHECK(plain_only.virtual_stages == std::vector<int>{1});
}

TEST_CASE("relax, local and mcmc search the virtual stages: with interleaving offered relax "
          "reaches the exhaustive optimum over plain and interleaved pipelines, local and mcmc "
          "beat the plain optimum") {
  for (const auto& [batch, memory_gb] : {std::pair{16, 80}, std::pair{64, 80}, std::pair{64, 8}}) {
    CAPTURE(batch);
    CAPTURE(memory_gb);
    Problem problem = SmallInterleavingProblem();
    problem.training.global_batch_size = batch;
    problem.cluster.devices[0].memory_bytes = memory_gb * 1e9;
    SearchOptions options;
    options.space.recompute = {Recompute::kNone, Recompute::kFull};
    options.space.allow_zero = false;
    options.space.min_stages = 2;
    options.space.max_stages = 3;
    options.space.virtual_stages = {1, 2, 3};
    const SearchResult truth = ExhaustiveSearcher().Search(problem, options);
    REQUIRE(truth.plan);
    REQUIRE(truth.plan->virtual_stages > 1);  // interleaving wins on these problems
    options.space.virtual_stages = {1};
    const SearchResult plain = DpSearcher().Search(problem, options);
    REQUIRE(plain.plan);
    options.space.virtual_stages = {1, 2, 3};
    const SearchResult relax = RelaxSearcher().Search(problem, options);
    const SearchResult local = LocalSearcher().Search(problem, options);
    options.max_evaluations = 20000;
    const SearchResult mcmc = McmcSearcher().Search(problem, options);
    for (const SearchResult* result : {&relax, &local, &mcmc}) {
      REQUIRE(result->plan);
      INFO(result->summary.algorithm, ": ", result->summary.message);
      CHECK(result->plan->virtual_stages > 1);
      CHECK(result->summary.best_iteration_seconds <
            plain.summary.best_iteration_seconds * (1 - 1e-9));
      CHECK(Evaluate(problem, *result->plan).iteration_seconds ==
            result->summary.best_iteration_seconds);
    }
    CHECK(testing::RelativeGap(relax.summary.best_iteration_seconds,
                               truth.summary.best_iteration_seconds) < 1e-9);
  }
}

TEST_CASE("dp and ilp with virtual stages on a model they cannot price interleaved offer their "
          "plain optimum interleaved, claiming no optimum") {
  Problem problem = SmallInterleavingProblem();
  problem.model.layers[3].cost_class = 7;  // one block priced apart
  REQUIRE_FALSE(InterleavesExactly(problem));
  SearchOptions options;
  options.space.recompute = {Recompute::kNone};
  options.space.allow_zero = false;
  options.space.max_stages = 3;
  options.space.virtual_stages = {1, 2};
  const SearchResult dp = DpSearcher().Search(problem, options);
  REQUIRE(dp.plan);
  CHECK(dp.summary.termination == TerminationType::kConverged);
  CHECK_FALSE(dp.summary.lower_bound_seconds.has_value());
  if (IlpSearcher::Available()) {  // the ILP likewise
    const SearchResult ilp = IlpSearcher().Search(problem, options);
    REQUIRE(ilp.plan);
    CHECK(ilp.summary.termination == TerminationType::kConverged);
    CHECK_FALSE(ilp.summary.lower_bound_seconds.has_value());
    CHECK(ilp.summary.message.find("optimal over plain pipelines only") != std::string::npos);
  }
}

}  // namespace stratos
