// McmcSearcher (FlexFlow-style Metropolis-Hastings): reaches the optimum of small problems,
// is deterministic for a seed, honours its budgets and reports why it stopped.
#include <doctest/doctest.h>
#include <fmt/format.h>

#include <cmath>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "tests/search/search_test_util.h"
#include "baselines/dp_searcher.h"
#include "baselines/mcmc_searcher.h"
#include "costmodel/cluster_io.h"
#include "costmodel/error.h"
#include "costmodel/evaluate.h"
#include "costmodel/model_io.h"
#include "costmodel/synthetic.h"
#include "costmodel/zoo.h"

namespace stratos {
namespace {


}  // namespace

TEST_CASE("MCMC reaches the seed optimum on the seed cases with at most 24 layers") {
  McmcSearcher mcmc;
  int solved = 0;
  for (const SeedCaseRow& row : ReadSeedPartitionCases()) {
    if (row.num_layers > 24) continue;
    const SeedCase seed = MakeSeedPartitionCase(row.num_layers, row.num_stages,
                                                row.num_microbatches, row.layer_cost,
                                                row.cut_cost);
    CAPTURE(seed.problem.model.name);
    SearchOptions options;
    options.space = seed.space;
    options.max_evaluations = 20000;
    options.seed = 1;
    const SearchResult result = mcmc.Search(seed.problem, options);
    INFO(result.summary.message);
    REQUIRE(result.plan.has_value());
    CHECK(result.plan->NumStages() == row.num_stages);
    const Estimate estimate = Evaluate(seed.problem, *result.plan);
    CHECK(std::abs(estimate.steady_seconds + estimate.tail_seconds - row.optimal_cost) <= 1e-9);
    CHECK(estimate.iteration_seconds == result.summary.best_iteration_seconds);
    ++solved;
  }
  CHECK(solved >= 10);
}

TEST_CASE("MCMC reaches the DP optimum of 12 random small problems given 20000 evaluations") {
  McmcSearcher mcmc;
  DpSearcher dp;
  int feasible = 0;
  for (std::uint64_t seed = 1; seed <= 12; ++seed) {
    const Problem problem = MakeRandomSmallProblem(seed);
    CAPTURE(seed);
    const SearchResult truth = dp.Search(problem, SearchOptions{});
    SearchOptions options;
    options.max_evaluations = 20000;
    options.seed = static_cast<int>(seed);
    const SearchResult result = mcmc.Search(problem, options);
    INFO("dp: ", truth.summary.message);
    INFO("mcmc: ", result.summary.message);
    REQUIRE(truth.plan.has_value() == result.plan.has_value());
    if (!truth.plan) {
      CHECK(result.summary.termination == TerminationType::kInfeasible);
      continue;
    }
    ++feasible;
    const Estimate estimate = Evaluate(problem, *result.plan);
    CHECK(estimate.Fits());
    CHECK(estimate.iteration_seconds == result.summary.best_iteration_seconds);
    CHECK(testing::RelativeGap(estimate.iteration_seconds, truth.summary.best_iteration_seconds) <=
          1e-9);
    CHECK_FALSE(result.summary.lower_bound_seconds.has_value());
  }
  CHECK(feasible >= 5);
}

TEST_CASE("MCMC is deterministic for a seed, and its anytime trace only improves") {
  const Problem problem = MakeRandomSmallProblem(10);
  SearchOptions options;
  options.max_evaluations = 5000;
  options.seed = 42;
  std::vector<double> seen;
  options.on_improvement = [&](double, double best) { seen.push_back(best); };
  const SearchResult a = McmcSearcher().Search(problem, options);
  const std::vector<double> first = seen;
  seen.clear();
  const SearchResult b = McmcSearcher().Search(problem, options);
  REQUIRE(a.plan.has_value());
  REQUIRE(b.plan.has_value());
  CHECK(a.plan->Summary() == b.plan->Summary());
  CHECK(a.summary.best_iteration_seconds == b.summary.best_iteration_seconds);
  CHECK(a.summary.evaluations == b.summary.evaluations);
  CHECK(a.summary.iterations == b.summary.iterations);
  CHECK(first == seen);
  REQUIRE(a.summary.anytime.size() == first.size());
  for (size_t k = 1; k < a.summary.anytime.size(); ++k) {
    CHECK(a.summary.anytime[k].best_iteration_seconds <
          a.summary.anytime[k - 1].best_iteration_seconds);
    CHECK(a.summary.anytime[k].wall_seconds >= a.summary.anytime[k - 1].wall_seconds);
  }
  CHECK(a.summary.anytime.back().best_iteration_seconds == a.summary.best_iteration_seconds);
  CHECK(a.summary.initial_iteration_seconds == a.summary.anytime.front().best_iteration_seconds);
  CHECK(a.summary.algorithm == "mcmc");
}

TEST_CASE("MCMC honours its time and evaluation limits and says why it stopped") {
  const Problem problem = testing::ZooProblem("gpt3-6.7b", "dgx-a100-80gb", 8);
  McmcOptions never_converge;
  never_converge.convergence_patience = 0;

  SearchOptions timed;
  timed.time_limit_seconds = 0.3;
  const SearchResult by_time = McmcSearcher(never_converge).Search(problem, timed);
  INFO(by_time.summary.message);
  CHECK(by_time.summary.termination == TerminationType::kTimeLimit);
  CHECK(by_time.summary.message.find("stopped by the time limit") == 0);
  CHECK(by_time.summary.wall_seconds >= 0.3);
  CHECK(by_time.summary.wall_seconds < 2.0);
  REQUIRE(by_time.plan.has_value());
  CHECK(Evaluate(problem, *by_time.plan).Fits());

  SearchOptions counted;
  counted.max_evaluations = 700;
  const SearchResult by_count = McmcSearcher(never_converge).Search(problem, counted);
  CHECK(by_count.summary.termination == TerminationType::kEvaluationLimit);
  CHECK(by_count.summary.evaluations == 700);
  CHECK(by_count.summary.message.find("stopped by the evaluation limit (700)") == 0);

  McmcOptions impatient;
  impatient.convergence_patience = 500;
  const SearchResult converged = McmcSearcher(impatient).Search(problem, SearchOptions{});
  CHECK(converged.summary.termination == TerminationType::kConverged);
  CHECK(converged.summary.message.find("converged: no improvement in 500 proposals") == 0);
  REQUIRE(converged.plan.has_value());
  CHECK(converged.summary.FullReport().find("converged") != std::string::npos);
}

TEST_CASE("MCMC reports an infeasible problem: no feasible plan, with the reason") {
  Problem problem = MakeRandomSmallProblem(3);
  problem.cluster.devices[0].memory_bytes = 1e6;  // 1 MB per device
  SearchOptions options;
  options.max_evaluations = 3000;
  const SearchResult result = McmcSearcher().Search(problem, options);
  CHECK_FALSE(result.plan.has_value());
  CHECK(result.summary.termination == TerminationType::kInfeasible);
  CHECK_FALSE(result.summary.HasPlan());
  CHECK(result.summary.message.find("no feasible plan") == 0);
  CHECK(result.summary.message.find("least memory-hungry plan") != std::string::npos);
  CHECK(result.summary.message.find("GiB over") != std::string::npos);
  CHECK(std::isinf(result.summary.best_iteration_seconds));
}

TEST_CASE("McmcOptions::Validate names the field, the value and the rule") {
  McmcOptions options;
  options.beta = 0;
  CHECK_THROWS_WITH_AS(McmcSearcher(options).Search(MakeRandomSmallProblem(1), SearchOptions{}),
                       doctest::Contains("mcmc.beta = 0: must be > 0"), InputError);
  options = McmcOptions{};
  options.restart_patience = 0;
  CHECK_THROWS_WITH_AS(options.Validate(),
                       doctest::Contains("mcmc.restart_patience = 0: must be >= 1"),
                       InputError);
}

}  // namespace stratos
