// ExhaustiveSearcher: ground truth on tiny problems, and the DP = exhaustive cross-check.
#include <doctest/doctest.h>
#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "tests/search/search_test_util.h"
#include "baselines/dp_searcher.h"
#include "baselines/exhaustive_searcher.h"
#include "costmodel/evaluate.h"
#include "costmodel/synthetic.h"

namespace stratos {
namespace {


}  // namespace

TEST_CASE("Exhaustive reaches the seed optimum on every tractable seed case") {
  ExhaustiveSearcher exhaustive;
  int solved = 0;
  for (const SeedCaseRow& row : ReadSeedPartitionCases()) {
    CAPTURE(row.num_layers);
    CAPTURE(row.num_stages);
    const SeedCase seed = MakeSeedPartitionCase(row.num_layers, row.num_stages,
                                                row.num_microbatches, row.layer_cost, row.cut_cost);
    SearchOptions options;
    options.space = seed.space;
    options.max_evaluations = 200000;  // tractable in a unit test
    const SearchResult result = exhaustive.Search(seed.problem, options);
    if (!result.plan) {
      CHECK(result.summary.termination == TerminationType::kDeclined);
      CHECK(result.summary.message.find("problem too large for exhaustive search") == 0);
      continue;
    }
    ++solved;
    CHECK(result.summary.termination == TerminationType::kOptimal);
    CHECK(result.plan->NumStages() == row.num_stages);
    const Estimate estimate = Evaluate(seed.problem, *result.plan);
    CHECK(std::abs(estimate.steady_seconds + estimate.tail_seconds - row.optimal_cost) <= 1e-9);
  }
  CHECK(solved >= 10);
}

TEST_CASE("Exhaustive declines problems larger than its plan budget (not infeasible)") {
  const SeedCase seed = MakeSeedPartitionCase(36, 8, 3, 1, 2);  // C(35, 7) = 6,724,520 plans
  SearchOptions options;
  options.space = seed.space;
  CHECK(ExhaustiveSearcher::CountPlans(seed.problem,
                                       SearchSpace::Build(seed.problem, seed.space)) == 6724520.0);
  const SearchResult result = ExhaustiveSearcher().Search(seed.problem, options);
  CHECK(result.summary.termination == TerminationType::kDeclined);
  CHECK(std::string(TerminationTypeName(result.summary.termination)) == "declined");
  CHECK_FALSE(result.summary.HasPlan());
  CHECK(result.summary.message.find("problem too large for exhaustive search: 6724520 plans") == 0);
  CHECK(result.summary.evaluations == 0);
}

TEST_CASE("Exhaustive counts exactly the plans it evaluates") {
  const Problem problem = MakeRandomSmallProblem(5);
  const SearchSpace space = SearchSpace::Build(problem);
  const SearchResult result = ExhaustiveSearcher().Search(problem, SearchOptions{});
  CHECK(static_cast<double>(result.summary.evaluations) ==
        ExhaustiveSearcher::CountPlans(problem, space));
}

TEST_CASE("DP equals exhaustive on 20 random small problems") {
  DpSearcher dp;
  ExhaustiveSearcher exhaustive;
  int feasible = 0;
  for (std::uint64_t seed = 1; seed <= 20; ++seed) {
    const Problem problem = MakeRandomSmallProblem(seed);
    CAPTURE(seed);
    CAPTURE(problem.model.name);
    const SearchResult truth = exhaustive.Search(problem, SearchOptions{});
    REQUIRE_MESSAGE(truth.summary.message.find("too large") == std::string::npos,
                    truth.summary.message);
    const SearchResult result = dp.Search(problem, SearchOptions{});
    INFO("exhaustive: ", truth.summary.BriefReport(), " ", truth.summary.message);
    INFO("dp: ", result.summary.BriefReport(), " ", result.summary.message);
    REQUIRE(truth.plan.has_value() == result.plan.has_value());
    if (!truth.plan) {
      CHECK(truth.summary.termination == TerminationType::kInfeasible);
      CHECK(result.summary.termination == TerminationType::kInfeasible);
      CHECK(result.summary.message.find("memory") != std::string::npos);
      continue;
    }
    ++feasible;
    CHECK(truth.summary.termination == TerminationType::kOptimal);
    CHECK(result.summary.termination == TerminationType::kOptimal);
    const double dp_seconds = Evaluate(problem, *result.plan).iteration_seconds;
    CHECK(Evaluate(problem, *result.plan).Fits());
    CHECK(testing::RelativeGap(dp_seconds, truth.summary.best_iteration_seconds) <= 1e-9);
    CHECK(dp_seconds == result.summary.best_iteration_seconds);
  }
  MESSAGE(feasible, " of 20 random problems are feasible");
  CHECK(feasible >= 5);
}

TEST_CASE("with DP gradient buckets DP equals exhaustive on 20 random small problems, whose "
          "stage tails are not additive over layers") {
  DpSearcher dp;
  ExhaustiveSearcher exhaustive;
  int feasible = 0, moved = 0, comm_bound = 0, compute_bound = 0;
  for (std::uint64_t seed = 1; seed <= 20; ++seed) {
    const Problem plain = MakeRandomSmallProblem(seed);
    const Problem problem = testing::WithDpBuckets(plain, seed);
    CAPTURE(seed);
    const SearchResult truth = exhaustive.Search(problem, SearchOptions{});
    const SearchResult result = dp.Search(problem, SearchOptions{});
    INFO("exhaustive: ", truth.summary.BriefReport(), " dp: ", result.summary.BriefReport());
    REQUIRE(truth.plan.has_value() == result.plan.has_value());
    if (!truth.plan) continue;
    ++feasible;
    CHECK(result.summary.termination == TerminationType::kOptimal);
    CHECK(testing::RelativeGap(result.summary.best_iteration_seconds,
                               truth.summary.best_iteration_seconds) <= 1e-9);
    const Estimate estimate = Evaluate(problem, *result.plan);
    CHECK(estimate.iteration_seconds == result.summary.best_iteration_seconds);
    // Each stage's tail: its additive part plus max(S - W, min(b, S)) of its summed S, W, b.
    for (const StageEstimate& stage : estimate.stages) {
      const StageTerms& x = stage.terms;
      CHECK(stage.tail_seconds ==
            doctest::Approx(x.dp_sync_exposed_seconds + x.optimizer_seconds +
                            x.embedding_sync_seconds +
                            std::max(x.dp_bucketed_sync_seconds - x.dp_backward_window_seconds,
                                     std::min(x.dp_last_bucket_seconds,
                                              x.dp_bucketed_sync_seconds)))
                .epsilon(1e-12));
      if (x.dp_bucketed_sync_seconds > 0) {
        if (x.dp_bucketed_sync_seconds - x.dp_backward_window_seconds > x.dp_last_bucket_seconds)
          ++comm_bound;
        else
          ++compute_bound;
      }
    }
    const SearchResult without = dp.Search(plain, SearchOptions{});
    REQUIRE(without.plan.has_value());
    // Buckets hide at most what the plain problem (no overlap) exposes: never slower.
    CHECK(result.summary.best_iteration_seconds <=
          without.summary.best_iteration_seconds * (1 + 1e-12));
    if (result.plan->Summary() != without.plan->Summary()) ++moved;
  }
  MESSAGE(feasible, " feasible; the buckets moved the optimum on ", moved, "; bucketed stages ",
          comm_bound, " communication-bound, ", compute_bound, " hidden but the last bucket");
  CHECK(feasible >= 5);
  CHECK(moved >= 1);
  CHECK(comm_bound >= 1);
  CHECK(compute_bound >= 1);
}

TEST_CASE("DP pays the longest stage tail, not their sum, and pipelines where a sum would not") {
  // Stages' tails (exposed DP sync, optimizer step) run concurrently: the objective charges
  // max_s e_s. On these problems the optimum (exhaustive) has several stages whose tails differ,
  // and charged the sum of its tails instead it would lose to the best single-stage plan (whose
  // one tail is both the max and the sum): a sum-of-tails DP would choose another plan.
  DpSearcher dp;
  ExhaustiveSearcher exhaustive;
  SearchOptions single_stage;
  single_stage.space.max_stages = 1;
  int max_tail_matters = 0;
  for (std::uint64_t seed = 30; seed <= 40; ++seed) {
    const Problem problem = MakeRandomSmallProblem(seed);
    CAPTURE(seed);
    const SearchResult truth = exhaustive.Search(problem, SearchOptions{});
    const SearchResult result = dp.Search(problem, SearchOptions{});
    REQUIRE(truth.plan.has_value() == result.plan.has_value());
    if (!truth.plan) continue;
    CHECK(result.summary.termination == TerminationType::kOptimal);
    CHECK(testing::RelativeGap(result.summary.best_iteration_seconds,
                      truth.summary.best_iteration_seconds) <= 1e-9);
    const Estimate estimate = Evaluate(problem, *result.plan);
    double max_tail = 0, sum_tails = 0, one_time = 0;
    for (const StageEstimate& stage : estimate.stages) {
      max_tail = std::max(max_tail, stage.tail_seconds);
      sum_tails += stage.tail_seconds;
      one_time += stage.one_time_seconds;
    }
    CHECK(estimate.tail_seconds == doctest::Approx(max_tail + one_time).epsilon(1e-12));
    CHECK(estimate.iteration_seconds ==
          doctest::Approx(estimate.fill_seconds + estimate.steady_seconds + max_tail + one_time)
              .epsilon(1e-12));
    if (result.plan->NumStages() < 2) continue;
    const SearchResult one = exhaustive.Search(problem, single_stage);
    const SearchResult one_dp = dp.Search(problem, single_stage);
    REQUIRE(one.plan.has_value());
    REQUIRE(one_dp.plan.has_value());
    CHECK(testing::RelativeGap(one_dp.summary.best_iteration_seconds, one.summary.best_iteration_seconds) <=
          1e-9);
    CHECK(result.summary.best_iteration_seconds < one.summary.best_iteration_seconds);
    const double sum_objective =
        estimate.fill_seconds + estimate.steady_seconds + sum_tails + one_time;
    if (sum_tails > max_tail && sum_objective > one.summary.best_iteration_seconds) {
      ++max_tail_matters;
      MESSAGE("seed ", seed, ": ", result.plan->Summary(), " costs ", estimate.iteration_seconds,
              " s; with the sum of its tails ", sum_objective,
              " s, more than the best single stage ", one.summary.best_iteration_seconds, " s");
    }
  }
  CHECK(max_tail_matters >= 1);
}

}  // namespace stratos
