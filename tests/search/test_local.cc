// LocalSearcher (random-restart iterated local search) and RelaxOptions::polish: the parts an
// ablation separates.
#include <doctest/doctest.h>

#include "baselines/dp_searcher.h"
#include "baselines/exhaustive_searcher.h"
#include "baselines/local_searcher.h"
#include "costmodel/error.h"
#include "costmodel/evaluate.h"
#include "costmodel/synthetic.h"
#include "search/relax_searcher.h"
#include "search_test_util.h"

namespace stratos {

TEST_CASE("local: reaches the exhaustive optimum (within 1e-9) on most random small problems and "
          "always returns a valid plan that fits") {
  ExhaustiveSearcher exhaustive;
  LocalSearcher local;
  int feasible = 0, optimal = 0;
  for (std::uint64_t seed = 1; seed <= 12; ++seed) {
    const Problem problem = MakeRandomSmallProblem(seed);
    CAPTURE(seed);
    const SearchResult truth = exhaustive.Search(problem, SearchOptions{});
    const SearchResult result = local.Search(problem, SearchOptions{});
    REQUIRE(truth.plan.has_value() == result.plan.has_value());
    if (!truth.plan) {
      CHECK(result.summary.termination == TerminationType::kInfeasible);
      continue;
    }
    ++feasible;
    ValidatePlan(problem, *result.plan);
    const Estimate estimate = Evaluate(problem, *result.plan);
    CHECK(estimate.Fits());
    CHECK(estimate.iteration_seconds == result.summary.best_iteration_seconds);
    CHECK(result.summary.termination == TerminationType::kConverged);
    CHECK(result.summary.iterations == LocalOptions{}.starts);
    if (testing::RelativeGap(estimate.iteration_seconds, truth.summary.best_iteration_seconds) <= 1e-9)
      ++optimal;
    CHECK(estimate.iteration_seconds <= truth.summary.best_iteration_seconds * 1.02);
  }
  MESSAGE(optimal, " of ", feasible, " feasible problems solved to optimality by local");
  CHECK(feasible >= 4);
  CHECK(optimal * 4 >= feasible * 3);
}

TEST_CASE("local: deterministic for a seed, different starts for another seed") {
  const Problem problem = testing::ZooProblem("gpt3-13b", "p3.16xlarge-datasheet", 2);
  SearchOptions options;
  options.seed = 3;
  const SearchResult a = LocalSearcher().Search(problem, options);
  const SearchResult b = LocalSearcher().Search(problem, options);
  REQUIRE(a.plan);
  REQUIRE(b.plan);
  CHECK(a.summary.best_iteration_seconds == b.summary.best_iteration_seconds);
  CHECK(a.summary.evaluations == b.summary.evaluations);
  CHECK(a.plan->Summary() == b.plan->Summary());
}

TEST_CASE("local: starts = 0 runs until the time limit and reports it") {
  const Problem problem = testing::ZooProblem("gpt3-13b", "p3.16xlarge-datasheet", 2);
  SearchOptions options;
  options.time_limit_seconds = 0.3;
  LocalOptions local;
  local.starts = 0;
  const SearchResult result = LocalSearcher(local).Search(problem, options);
  REQUIRE(result.plan);
  CHECK(result.summary.termination == TerminationType::kTimeLimit);
  CHECK(result.summary.iterations >= 1);
}

TEST_CASE("local: LocalOptions::Validate names the field and the rule") {
  LocalOptions bad;
  bad.kicks = -1;
  CHECK_THROWS_WITH_AS(bad.Validate(), "local.kicks = -1: must be >= 0", InputError);
  bad = LocalOptions{};
  bad.starts = -2;
  CHECK_THROWS_AS(bad.Validate(), InputError);
}

TEST_CASE("relax: polish = none returns the repaired argmax plan; descent and iterated never do "
          "worse; the DP optimum bounds all three") {
  const Problem problem = testing::ZooProblem("gpt3-13b", "p3.16xlarge-datasheet", 8);
  SearchOptions options;
  options.seed = 1;
  double previous = 0;
  const double optimum = DpSearcher().Search(problem, options).summary.best_iteration_seconds;
  for (RelaxOptions::Polish polish : {RelaxOptions::Polish::kNone, RelaxOptions::Polish::kDescent,
                                      RelaxOptions::Polish::kIterated}) {
    CAPTURE(RelaxPolishName(polish));
    RelaxOptions relax;
    relax.polish = polish;
    const SearchResult result = RelaxSearcher(relax).Search(problem, options);
    REQUIRE(result.plan);
    ValidatePlan(problem, *result.plan);
    const double seconds = Evaluate(problem, *result.plan).iteration_seconds;
    CHECK(seconds >= optimum * (1 - 1e-9));
    if (previous > 0) CHECK(seconds <= previous * (1 + 1e-12));
    previous = seconds;
    CHECK(result.summary.message.find(RelaxPolishName(polish)) != std::string::npos);
  }
  CHECK(ParseRelaxPolish("descent", "x") == RelaxOptions::Polish::kDescent);
  CHECK_THROWS_WITH_AS(ParseRelaxPolish("full", "relax.polish"),
                       "relax.polish = \"full\": must be none, descent or iterated", InputError);
}

}  // namespace stratos
