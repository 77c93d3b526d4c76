// GridSearcher: the Megatron-style uniform reference, never better than the exact DP.
#include <doctest/doctest.h>

#include <string>
#include <vector>

#include "baselines/dp_searcher.h"
#include "baselines/grid_searcher.h"
#include "costmodel/evaluate.h"
#include "costmodel/synthetic.h"

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
