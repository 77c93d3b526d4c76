#pragma once
// Helpers shared by the searcher tests.
#include <algorithm>
#include <cmath>
#include <string>

#include "costmodel/cluster_io.h"
#include "costmodel/model_io.h"
#include "costmodel/problem.h"
#include "costmodel/zoo.h"

namespace stratos::testing {

// |x - y| / |y|: how far a searcher's objective x is from the reference y.
inline double RelativeGap(double x, double y) {
  return std::abs(x - y) / std::max(1e-300, std::abs(y));
}

// A zoo model on `nodes` nodes of a zoo cluster, with the default training options.
inline Problem ZooProblem(const std::string& model, const std::string& cluster, int nodes) {
  Problem problem;
  problem.model = ReadModelFile(ResolveModelPath(model));
  problem.cluster = ReadClusterFile(ResolveClusterPath(cluster)).WithNodes(nodes);
  return problem;
}

}  // namespace stratos::testing
