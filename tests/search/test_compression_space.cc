// Gradient compression as a per-stage choice of the search space (issue 5): only where it
// applies, never by default, and the searchers agree on it.
#include <doctest/doctest.h>

#include "baselines/dp_searcher.h"
#include "costmodel/error.h"
#include "costmodel/search_space.h"
#include "search/relax_searcher.h"
#include "search_test_util.h"

namespace stratos {

using testing::RelativeGap;
using testing::ZooProblem;

namespace {

SpaceOptions WithCompressions(std::initializer_list<GradCompression> kinds) {
  SpaceOptions options;
  options.grad_compressions.clear();
  for (GradCompression kind : kinds) {
    CompressionSpec spec;
    spec.kind = kind;
    options.grad_compressions.push_back(spec);
  }
  return options;
}

}  // namespace

TEST_CASE("compression enters the space only where asked and only where it applies") {
  Problem problem = ZooProblem("gpt3-1.3b", "p3.16xlarge-datasheet", 2);
  problem.training.global_batch_size = 64;
  const SearchSpace plain = SearchSpace::Build(problem);
  for (const StageConfig& c : plain.configs)
    CHECK(c.grad_compression.kind == GradCompression::kNone);

  const SearchSpace space = SearchSpace::Build(
      problem, WithCompressions({GradCompression::kNone, GradCompression::kPowerSgd}));
  int compressed = 0;
  for (const StageConfig& c : space.configs) {
    if (c.grad_compression.kind == GradCompression::kNone) continue;
    ++compressed;
    CHECK(c.data_parallel > 1);
    CHECK(c.zero_stage <= 1);
  }
  CHECK(compressed > 0);
  CHECK(space.configs.size() == plain.configs.size() + compressed);

  CHECK_THROWS_AS(SearchSpace::Build(problem, WithCompressions({GradCompression::kPowerSgd})),
                  InputError);
}

TEST_CASE("with PowerSGD allowed on a communication-bound problem, DP and relax agree") {
  // GPT-3 1.3B on 16 p3.16xlarge nodes: the DP gradient sync is a large share of the iteration.
  Problem problem = ZooProblem("gpt3-1.3b", "p3.16xlarge-datasheet", 16);
  problem.training.global_batch_size = 512;
  SearchOptions options;
  options.time_limit_seconds = 120;
  const SearchResult none = DpSearcher().Search(problem, options);
  options.space = WithCompressions({GradCompression::kNone, GradCompression::kPowerSgd});
  const SearchResult dp = DpSearcher().Search(problem, options);
  const SearchResult relax = RelaxSearcher().Search(problem, options);
  REQUIRE(none.plan.has_value());
  REQUIRE(dp.plan.has_value());
  REQUIRE(relax.plan.has_value());
  // A superset of the space can only help the exact search; here it does.
  CHECK(dp.summary.best_iteration_seconds < none.summary.best_iteration_seconds);
  bool uses_powersgd = false;
  for (const StagePlan& stage : dp.plan->stages)
    uses_powersgd |= stage.config.grad_compression.kind == GradCompression::kPowerSgd;
  CHECK(uses_powersgd);
  CHECK(RelativeGap(relax.summary.best_iteration_seconds, dp.summary.best_iteration_seconds) <
        0.02);
}

}  // namespace stratos
