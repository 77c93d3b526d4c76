#pragma once
// Why a problem has no feasible plan, shared by the exact searchers (DP, ILP) for
// SearchSummary::message.
#include <string>

#include "costmodel/cost_model.h"
#include "costmodel/search_space.h"

namespace stratos {

// The most specific reason found, starting "no feasible plan": too few devices for min_stages,
// min_stages above max_stages, no valid stage configuration, a layer that fits on no mesh alone
// (named, with its least memory-hungry configuration and the overflow), or else the capacity and
// the tightest single-stage plan's overflow.
std::string ExplainNoFeasiblePlan(const CostModel& cost_model, const SearchSpace& space,
                                  int max_stages);

}  // namespace stratos
