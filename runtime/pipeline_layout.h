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

// One message of a microbatch's activations (or their gradients) between this rank's replica and
// a replica of pipeline rank `other` whose DP x TP may differ: samples [offset, offset + count)
// of this replica's share of the microbatch, to or from global rank `peer`.
struct Piece {
  int peer;
  int64_t offset, count;
};

// The resharding of a microbatch of `samples` sequences at a stage boundary (cf. Alpa's
// cross-mesh resharding, Zheng et al. OSDI'22 §5): replica d of a stage with dp replicas holds
// samples [d samples / dp, (d + 1) samples / dp), every TP rank of a replica the whole
// activation. A message goes from TP rank t of the sending stage to TP rank u of the receiving
// one when the replicas' samples overlap and t = u mod tp_sender: each receiving rank gets every
// sample once, each sending rank sends to the receiving TP ranks paired with it. `receive`: the
// pieces this rank receives from pipeline rank `other` (one per overlapping replica), else those
// it sends to it (to every paired TP rank of each overlapping replica). With equal DP x TP: one
// piece, the whole microbatch share, between equal (d, t). `samples` must split evenly over both
// stages' DP.
std::vector<Piece> ReshardPieces(const PipelineLayout& layout, int other, int samples,
                                 bool receive);

}  // namespace stratos
