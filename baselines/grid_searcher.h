#pragma once
// GridSearcher: the Megatron-LM style expert-manual reference (Narayanan et al. SC'21 §5.4):
// uniform pipeline stages, all with the SAME intra-stage configuration, over a grid of
// (PP, mesh, DP x TP, ZeRO, recompute, microbatch count) drawn from the shared SearchSpace.
//
// For each stage count PP in [min_stages, max_stages], each configuration c of space.configs
// with PP * c.NumDevices() <= space.num_devices, and each microbatch count m that c accepts
// (CostModel::CheckConfig), the layers are split into PP contiguous stages whose sizes differ by
// at most one (the larger stages first, and, when the split is uneven, also last), every stage
// uses c, and the plan is priced with Evaluate(). With space.virtual_stages offering v > 1, each
// such plan of PP >= 2 stages is priced in the interleaved 1F1B schedule too (InterleavePlan:
// each stage's layers in v chunks). The best plan that fits in memory wins.
//
// On a heterogeneous cluster each configuration belongs to a node group: its PP stages go in that
// group (within its devices), and the shape of each group-0 configuration is also tried on all
// the groups alike: for every order of the groups, the stages fill them in that order, as many
// as each group's devices hold and where the shape is valid (the plans that span two groups or
// more; a group that gets no stage is left out).
//
// SearchSummary: algorithm "grid"; evaluations = plans Evaluate()d; iterations = grid points
// (PP, c, m); termination kConverged (grid exhausted), kTimeLimit, kEvaluationLimit, or
// kInfeasible with the memory violation of the least memory-hungry grid plan. No lower bound.
#include "search/searcher.h"

namespace stratos {

class GridSearcher : public Searcher {
 public:
  std::string Name() const override { return "grid"; }
  // Throws InputError for invalid options (SearchOptions::Validate, SearchSpace::Build).
  SearchResult Search(const Problem& problem, const SearchOptions& options) override;
};

// Contiguous split of `num_layers` layers into `num_stages` stages whose sizes differ by at most
// one; the (num_layers % num_stages) larger stages come first, or last if `larger_last`.
// Returns the stage boundaries: (num_stages + 1) ascending indices from 0 to num_layers.
std::vector<int> UniformStageBoundaries(int num_layers, int num_stages, bool larger_last = false);

}  // namespace stratos
