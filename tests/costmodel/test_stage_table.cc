// StageTable, the one table of stage terms the searchers price from: a stage priced from it is
// bit-identical to the same stage in Evaluate(), its neighbours' node groups included.
#include <doctest/doctest.h>

#include "costmodel/error.h"
#include "costmodel/evaluate.h"
#include "costmodel/search_space.h"
#include "costmodel/stage_table.h"
#include "costmodel/synthetic.h"

namespace stratos {

TEST_CASE("StageTable prices a two-stage plan's stages exactly as Evaluate() does") {
  int checked = 0;
  for (std::uint64_t seed = 1; seed <= 8; ++seed) {
    CAPTURE(seed);
    for (const Problem& problem :
         {MakeRandomSmallProblem(seed), MakeRandomSmallHeterogeneousProblem(seed)}) {
      const CostModel cost_model(problem);
      const SearchSpace space = SearchSpace::Build(problem);
      const int L = problem.NumLayers();
      const int cut = L / 2;
      for (int m : space.num_microbatches) {
        for (size_t a = 0; a < space.configs.size(); a += 3) {
          for (size_t b = 1; b < space.configs.size(); b += 5) {
            const StageConfig& first = space.configs[a];
            const StageConfig& second = space.configs[b];
            if (!cost_model.CheckConfig(first, m).empty() ||
                !cost_model.CheckConfig(second, m).empty())
              continue;
            if (first.node_group == second.node_group &&
                first.NumDevices() + second.NumDevices() >
                    problem.cluster.GroupDevices(first.node_group))
              continue;
            if (first.NumDevices() > problem.cluster.GroupDevices(first.node_group) ||
                second.NumDevices() > problem.cluster.GroupDevices(second.node_group))
              continue;
            Plan plan;
            plan.global_batch_size = problem.training.global_batch_size;
            plan.num_microbatches = m;
            plan.schedule = problem.training.schedule;
            plan.stages = {{0, cut, first}, {cut, L, second}};
            const Estimate estimate = Evaluate(cost_model, plan);
            const StageTable to_next(cost_model, {first}, m, -1, second.node_group);
            const StageTable from_previous(cost_model, {second}, m, first.node_group, -1);
            const StageTerms t0 = to_next.Terms(0, cut, 0);
            const StageTerms t1 = from_previous.Terms(cut, L, 0);
            CHECK(t0.MicrobatchSeconds() == estimate.stages[0].microbatch_seconds);
            CHECK(t1.MicrobatchSeconds() == estimate.stages[1].microbatch_seconds);
            CHECK(t0.ExposedTailSeconds() == estimate.stages[0].tail_seconds);
            CHECK(t1.PeakMemoryBytes(estimate.stages[1].microbatches_in_flight) ==
                  estimate.stages[1].peak_memory_bytes);
            ++checked;
          }
        }
      }
    }
  }
  MESSAGE(checked, " two-stage plans checked");
  CHECK(checked >= 100);
}

TEST_CASE("StageTable with every neighbour group: each overhead is StageOverhead's for them") {
  int checked = 0;
  for (std::uint64_t seed = 1; seed <= 6; ++seed) {
    CAPTURE(seed);
    const Problem problem = MakeRandomSmallHeterogeneousProblem(seed);
    const CostModel cost_model(problem);
    const SearchSpace space = SearchSpace::Build(problem);
    const int groups = static_cast<int>(problem.cluster.node_groups.size());
    REQUIRE(groups > 1);
    const int m = space.num_microbatches.front();
    const StageTable table(cost_model, space.configs, m, -1, -1, true);
    const StageTable own_only(cost_model, space.configs, m);
    for (int c : table.ValidConfigs()) {
      const StageConfig& config = space.configs[c];
      for (int first = 0; first < 2; ++first)
        for (int last = 0; last < 2; ++last) {
          for (int previous = -1; previous < groups; ++previous)
            for (int next = -1; next < groups; ++next) {
              const StageTerms expected =
                  cost_model.StageOverhead(config, m, first, last, previous, next);
              const StageTerms& got = table.OverheadBetween(c, first, last, previous, next);
              CHECK(got.MicrobatchSeconds() == expected.MicrobatchSeconds());
              CHECK(got.p2p_seconds == expected.p2p_seconds);
              CHECK(got.OneTimeSeconds() == expected.OneTimeSeconds());
              ++checked;
            }
          // A table of its own group only answers for its own neighbours, and refuses others.
          CHECK(own_only.OverheadBetween(c, first, last, config.node_group, -1)
                    .MicrobatchSeconds() == own_only.Overhead(c, first, last).MicrobatchSeconds());
          const int other = (config.node_group + 1) % groups;
          CHECK_THROWS_AS(own_only.OverheadBetween(c, first, last, other, -1), InternalError);
        }
    }
  }
  CHECK(checked > 100);
}

TEST_CASE("StageTable lists the configurations CheckConfig refuses as invalid") {
  const Problem problem = MakeRandomSmallProblem(4);
  const CostModel cost_model(problem);
  const SearchSpace space = SearchSpace::Build(problem);
  const int m = space.num_microbatches.back();
  const StageTable table(cost_model, space.configs, m);
  int valid = 0;
  for (int c = 0; c < table.NumConfigs(); ++c) {
    CHECK(table.Valid(c) == cost_model.CheckConfig(space.configs[c], m).empty());
    valid += table.Valid(c);
  }
  CHECK(static_cast<int>(table.ValidConfigs().size()) == valid);
}

}  // namespace stratos
