// SearchRun: the run every searcher shares -- its budget, its anytime trace and incumbent, the
// least-overflow reason and the end of the run.
#include <doctest/doctest.h>

#include <string>
#include <thread>
#include <vector>

#include "baselines/dp_searcher.h"
#include "costmodel/evaluate.h"
#include "costmodel/synthetic.h"
#include "search/searcher.h"

namespace stratos {

TEST_CASE("a search run traces each improvement once, keeps the first plan's seconds and calls "
          "on_improvement") {
  SearchOptions options;
  std::vector<double> reported;
  options.on_improvement = [&](double, double best) { reported.push_back(best); };
  SearchRun run("test", options);
  CHECK(run.Summary().algorithm == "test");
  CHECK(run.Summary().time_limit_seconds_given == options.time_limit_seconds);
  CHECK(run.NoteImprovement(5.0));
  CHECK_FALSE(run.NoteImprovement(6.0));  // not better: no trace point
  CHECK_FALSE(run.NoteImprovement(5.0));
  CHECK(run.NoteImprovement(4.0));
  CHECK(reported == std::vector<double>{5.0, 4.0});
  REQUIRE(run.Summary().anytime.size() == 2);
  CHECK(run.Summary().anytime[1].best_iteration_seconds == 4.0);
  CHECK(run.Summary().anytime[0].wall_seconds <= run.Summary().anytime[1].wall_seconds);
  CHECK(run.Summary().initial_iteration_seconds == 5.0);
  const SearchResult result = run.Finish(TerminationType::kConverged, "done");
  CHECK(result.summary.termination == TerminationType::kConverged);
  CHECK(result.summary.message == "done");
  CHECK(result.summary.wall_seconds >= result.summary.anytime[1].wall_seconds);
}

TEST_CASE("a search run keeps the best fitting plan offered and names the least overflowing one") {
  const Problem problem = MakeRandomSmallProblem(3);
  const SearchResult dp = DpSearcher().Search(problem, SearchOptions{});
  REQUIRE(dp.plan.has_value());
  const Plan& plan = *dp.plan;
  const Estimate fits = Evaluate(problem, plan);
  Problem small = problem;  // the same plan on devices of 1 MB
  for (DeviceSpec& device : small.cluster.devices) device.memory_bytes = 1e6;
  const Estimate overflows = Evaluate(small, plan);
  REQUIRE(fits.Fits());
  REQUIRE_FALSE(overflows.Fits());

  SearchRun run("test", SearchOptions{});
  CHECK(run.LeastOverflowText().empty());
  CHECK_FALSE(run.Offer(plan, overflows));
  CHECK(run.LeastOverflowText().find(plan.Summary()) == 0);
  CHECK_FALSE(run.Result().plan.has_value());
  CHECK(run.Offer(plan, fits));
  CHECK(run.Result().plan.has_value());
  CHECK(run.Summary().best_iteration_seconds == fits.iteration_seconds);
  CHECK_FALSE(run.Offer(plan, fits));  // not better
  CHECK(run.Summary().anytime.size() == 1);
}

TEST_CASE("a search run's budget: the evaluation budget, then the time limit first") {
  SearchOptions options;
  options.max_evaluations = 10;
  SearchRun run("test", options);
  CHECK_FALSE(run.BudgetSpent().has_value());
  CHECK_FALSE(run.OutOfEvaluations(9));
  CHECK(run.OutOfEvaluations(10));
  run.Summary().evaluations = 10;
  CHECK(run.BudgetSpent() == TerminationType::kEvaluationLimit);
  options.time_limit_seconds = 1e-3;
  SearchRun short_run("test", options);
  short_run.Summary().evaluations = 10;
  std::this_thread::sleep_for(std::chrono::milliseconds(5));
  CHECK(short_run.OutOfTime());
  CHECK(short_run.BudgetSpent() == TerminationType::kTimeLimit);
  CHECK(short_run.Elapsed() >= 1e-3);
  options.max_evaluations = 0;  // unbounded
  SearchRun unbounded("test", options);
  CHECK_FALSE(unbounded.OutOfEvaluations(1000000));
}

}  // namespace stratos
