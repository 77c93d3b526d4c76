#pragma once
// Helpers shared by the searcher tests.
#include <doctest/doctest.h>

#include <algorithm>
#include <cstdint>
#include <cmath>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "baselines/exhaustive_searcher.h"
#include "costmodel/cluster_io.h"
#include "costmodel/model_io.h"
#include "costmodel/plan.h"
#include "costmodel/problem.h"
#include "costmodel/synthetic.h"
#include "costmodel/zoo.h"
#include "search/searcher.h"

namespace stratos::testing {

// A zoo model on a zoo cluster (`nodes`: a count, or counts per node group as
// "h100=2,a100=2") at a global batch of `global_batch` sequences.
inline Problem ZooProblem(const std::string& model, const std::string& cluster,
                          const std::string& nodes, int global_batch) {
  Problem problem;
  problem.model = ReadModelFile(ResolveModelPath(model));
  problem.cluster = ReadClusterFile(ResolveClusterPath(cluster)).WithNodeCounts(nodes);
  problem.training.global_batch_size = global_batch;
  return problem;
}

// |x - y| / |y|: how far a searcher's objective x is from the reference y.
inline double RelativeGap(double x, double y) {
  return std::abs(x - y) / std::max(1e-300, std::abs(y));
}

// `problem` with its DP gradients reduced in buckets under the backward pass
// (TrainingSpec::dp_bucket_bytes) of a seed-drawn 5% to 200% of one transformer block's
// gradients, so that stages hold from one to many buckets, and a seed-drawn
// dp_overlap_fraction (what remains of it: ZeRO-1/2's parameter all-gather).
inline Problem WithDpBuckets(Problem problem, std::uint64_t seed) {
  std::mt19937_64 rng(seed * 104729 + 3);
  std::uniform_real_distribution<double> log_share(std::log(0.05), std::log(2.0));
  std::uniform_real_distribution<double> unit(0.0, 1.0);
  const double h = problem.model.hidden_size;
  problem.training.dp_bucket_bytes =
      std::exp(log_share(rng)) * 12.0 * h * h * problem.training.grad_dtype_bytes;
  problem.training.dp_overlap_fraction = unit(rng);
  return problem;
}

// A zoo model on `nodes` nodes of a zoo cluster, with the default training options.
inline Problem ZooProblem(const std::string& model, const std::string& cluster, int nodes) {
  Problem problem;
  problem.model = ReadModelFile(ResolveModelPath(model));
  problem.cluster = ReadClusterFile(ResolveClusterPath(cluster)).WithNodes(nodes);
  return problem;
}

// The space the exhaustive search can cover on MakeRandomSmallHeterogeneousProblem (synthetic.h):
// at most 3 stages, no ZeRO, recompute none or full.
inline SearchOptions SmallHeterogeneousSpace() {
  SearchOptions options;
  options.space.max_stages = 3;
  options.space.allow_zero = false;
  options.space.recompute = {Recompute::kNone, Recompute::kFull};
  return options;
}

// The node group of each stage of `plan`, in pipeline order.
inline std::vector<int> StageGroups(const Plan& plan) {
  std::vector<int> groups;
  for (const StagePlan& stage : plan.stages) groups.push_back(stage.config.node_group);
  return groups;
}

// MakeRandomSmallProblem(seed) on one node group of two single-GPU nodes (first), and the same
// nodes as two identical groups of one node, "left" and "right" (second): the split cluster's
// optimum must be the whole one's (with min_stages >= 2 no mesh spans both nodes).
inline std::pair<Problem, Problem> WholeAndSplitProblems(std::uint64_t seed) {
  Problem whole = MakeRandomSmallProblem(seed);
  whole.cluster.node_groups = {{2, 1, whole.cluster.devices[0].name}};
  Problem split = whole;
  split.cluster.node_groups = {{1, 1, whole.cluster.devices[0].name, "left"},
                               {1, 1, whole.cluster.devices[0].name, "right"}};
  return {whole, split};
}

// Over MakeRandomSmallHeterogeneousProblem(1 .. 8) in SmallHeterogeneousSpace(): `searcher` with
// space.node_groups = {"g1"} keeps every stage in group 1, proves the optimum the exhaustive
// search finds under the same restriction, and is never better than itself without it. Returns
// how many problems had a plan to compare.
inline int CheckNodeGroupRestriction(Searcher& searcher) {
  SearchOptions options = SmallHeterogeneousSpace();
  options.space.node_groups = {"g1"};
  int compared = 0;
  for (std::uint64_t seed = 1; seed <= 8; ++seed) {
    CAPTURE(seed);
    const Problem problem = MakeRandomSmallHeterogeneousProblem(seed);
    const SearchResult all = searcher.Search(problem, SmallHeterogeneousSpace());
    const SearchResult one = searcher.Search(problem, options);
    const SearchResult truth = ExhaustiveSearcher().Search(problem, options);
    INFO(searcher.Name(), ": ", one.summary.message);
    REQUIRE(one.plan.has_value() == truth.plan.has_value());
    if (!one.plan) continue;
    CHECK(one.summary.termination == TerminationType::kOptimal);
    for (const StagePlan& stage : one.plan->stages) CHECK(stage.config.node_group == 1);
    CHECK(RelativeGap(one.summary.best_iteration_seconds, truth.summary.best_iteration_seconds) <=
          1e-9);
    REQUIRE(all.plan.has_value());
    CHECK(all.summary.best_iteration_seconds <= one.summary.best_iteration_seconds);
    ++compared;
  }
  return compared;
}

}  // namespace stratos::testing
