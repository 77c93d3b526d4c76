#pragma once
// Where the ranks of a run sit and what one rank exchanges with a neighbouring pipeline rank:
// the rank layout of a plan whose stages may differ in DP x TP, and the resharding of a
// microbatch's activations (and of their gradients) at a stage boundary. Split from
// runtime/trainer.cc; no LibTorch.
#include <cstdint>
#include <string>
#include <vector>

#include "costmodel/plan.h"

namespace stratos {

// Where a rank sits: pipeline rank `stage` of pp, each with its own DP x TP (dps, tps), ranks
// numbered stage by stage, TP innermost (Megatron-LM): rank = bases[stage] + dp_rank * tp +
// tp_rank. With interleaved 1F1B, plan.stages[k] runs on pipeline rank k mod pp.
struct PipelineLayout {
  int pp = 1;
  std::vector<int> dps, tps, bases;  // per pipeline rank: DP, TP, its first global rank
  int stage = 0, dp_rank = 0, tp_rank = 0;
  int dp = 1, tp = 1;  // this rank's pipeline rank's
  // The layout of `plan` seen from global rank `rank`. A plan without stages (refused later by
  // CheckRuntimePlan) gives a placeholder of one rank.
  PipelineLayout(const Plan& plan, int rank);
  // Global rank of (pipeline rank s, DP rank d, TP rank t).
  int RankOf(int s, int d, int t) const { return bases[s] + d * tps[s] + t; }
  // "rank R (stage S, dp D, tp T)", for error messages.
  std::string Describe(int rank) const;
};

// One message of a microbatch's activations (or their gradients) between this rank and global
// rank `peer` of a neighbouring pipeline rank whose DP x TP may differ: elements
// [offset, offset + count) of this rank's replica's share of the microbatch, flattened.
struct Piece {
  int peer;
  int64_t offset, count;
};

// Elements of each of the tp parts of a replica's share of `elements`: part u is
// [elements u / tp, elements (u + 1) / tp). The counts of the TP all-gather that follows a
// receive.
std::vector<int64_t> ScatterGatherCounts(int tp, int64_t elements);

// The resharding of a microbatch of `samples` sequences of `sample_elements` elements at a stage
// boundary, by Megatron-LM's scatter/gather (Narayanan et al. SC'21 §4.1) generalized to
// neighbours of different DP x TP (cf. Alpa's cross-mesh resharding, Zheng et al. OSDI'22 §5).
// Replica d of a stage with dp replicas holds samples [d samples / dp, (d + 1) samples / dp),
// every TP rank of it the whole activation, cut into tp parts (ScatterGatherCounts). TP rank t
// sends its part t, to the ranks of the neighbour whose part t' overlaps it, and receives its
// part, from the ranks whose part overlaps it; then the replica's TP ranks all-gather the parts.
// So every rank sends and receives 1/tp of its replica's share, whatever the neighbour's DP x
// TP (the cost model's pp_scatter_gather). The pieces are the same both ways: those this rank
// exchanges with pipeline rank `other`, in order of the other's (DP, TP) rank. With equal DP x
// TP, one piece between equal (d, t). `samples` must split evenly over both stages' DP.
std::vector<Piece> ReshardPieces(const PipelineLayout& layout, int other, int samples,
                                 int64_t sample_elements);

}  // namespace stratos
