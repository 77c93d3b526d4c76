#pragma once
// IlpSearcher: the stage / configuration choice as a mixed-integer linear program, solved exactly
// by COIN-OR CBC (DESIGN.md §8), over SearchSpace::Build(problem, options.space) and the
// closed-form objective of cost_model.h
//   T = sum_s t_s + (m - 1) * max_s t_s + sum_s e_s.
//
// One MILP per microbatch count m (a chain-covering / shortest-path formulation):
//   columns   x_{i,j,q,c} in {0, 1}: layers [i, j) form one stage with configuration c, and q
//             encodes the stages from this one to the end (1F1B holds min(m, q) microbatches in
//             flight, GPipe m): q < Q is exact, q = Q means ">= Q" where every count holds the same
//             microbatches (Q = min(m, max_stages) for 1F1B, 1 for GPipe);
//   flow      one unit from boundary 0 to boundary L; a column goes from node (i, q) to
//             (j, q - 1), or to (j, Q) when q = Q means ">= Q", and ends at L only with q = 1;
//   devices   sum_col n_c x_col <= num_devices;
//   stages    min_stages <= sum_col x_col <= max_stages;
//   T_max     u_l = sum over columns covering layer l of t_col x_col (telescoped: each column
//             enters the rows of its first and last layer only), T_max >= u_l for every layer l,
//             and the valid volume cut num_devices * T_max >= sum_col n_c t_col x_col;
//   objective min sum_col (t_col + e_col) x_col + (m - 1) T_max.
//
// Interleaved 1F1B (options.space.virtual_stages offers v > 1; Narayanan et al. SC'21 §2.2.2):
// where a rank of v chunks prices as its plain stage with v virtual stages (one node group,
// plan.h InterleavesExactly / ExactVirtualStages) every (m, v, p) with 2 <= p <= max_stages and
// p v <= L is a unit more, as in the DP: plans of exactly p pipeline ranks, each of at least v
// layers, its columns priced by the cost model with v virtual stages (v times the sends); the
// states count the ranks to the end exactly (rank p - q holds ChunkForwardsInFlight(p, p - q,
// m, v) / v microbatches' worth of activations), the flow leaves layer 0 only in state p, and
// the objective is sum_col (t_col / v + c_col) x_col + (m - 1/v) T_max + E_max. A unit's plan is
// InterleavePlan(plan, v). Its optimum is then proven over plain and interleaved pipelines; the
// uniform incumbent is the best uniform plan's fastest interleaved form. Elsewhere (other models,
// heterogeneous clusters) the ILP runs plain and offers its plan interleaved
// (search/interleaving_searcher.h), claiming no optimum.
//
// Heterogeneous clusters (several node groups; a group's stages run consecutively, each group at
// most one run, in any order, within its device budget SearchSpace::group_devices): an outer
// enumeration of the orders of every nonempty subset of the usable groups (SearchSpace::
// GroupOrders, as the DP and as Metis and AMP enumerate device-group orders), and one MILP per
// (m, order) -- a unit -- with the formulation above extended by the run:
//   columns   x_{i,j,q,r,f,l,c}: layers [i, j) form a stage of run r (group g_r of the order)
//             with configuration c of g_r, first of its run when f (it receives from g_{r-1}),
//             last of its run when l (it sends to g_{r+1}); its terms are priced with those
//             neighbours (StageTable's previous/next group), so the sends across the link
//             between two groups are exact constants;
//   flow      nodes (i, q, r, f): a column goes to (j, q - 1, r + l, l), or to the sink when
//             j = L, which only the last run reaches; every run is visited, so an order's plans
//             use all of its groups (the subsets cover the rest);
//   devices   one row per run: sum over run r's columns of n_c x_col <= devices D_r of g_r;
//   memory    a column fits in its group's device memory (CostModel::DeviceMemoryCapacityBytes);
//   volume    one row per run: D_r T_max >= sum over run r's columns of n_c t_col x_col, and
//             T_max's floor is the best multiplier combination of these rows over the
//             fractional assignments of layers to runs (weak duality; RunsVolumeBound in the .cc),
//             far above the one-group volume bound when the groups' devices differ in speed.
// Fixing the order outside the MILP keeps every coefficient a constant (group-order variables
// inside one MILP would make the neighbour-dependent send costs and the budgets bilinear) and
// the LP as tight as the homogeneous one; an order of k groups multiplies the columns of its
// groups by at most 4 (f, l), and there are sum_k C(G, k) k! orders (4 for 2 groups, 15 for 3,
// 64 for 4; orders of more than max_stages groups are skipped). Most units are settled by their
// cheap bound against the incumbent without a MILP. A homogeneous cluster is the single order
// {0}: the same columns, rows and MILPs as before the extension.
// Stage terms are summed as Evaluate() sums them (overhead, then the layers in order), so memory
// feasibility and costs are bit-identical to Evaluate(). Columns are pruned before the MILP:
// configurations invalid for m (CostModel::CheckConfig), stages that do not fit in memory with
// the microbatches they hold in flight, configurations dominated within the same (i, j, q)
// (another one with no larger mesh, t and t + e), columns on no source-to-sink chain, and, once
// an incumbent exists, columns on no chain that could beat it (cheapest chain by t + e through
// the column plus (m - 1) max(t_col, T_max floor)). T_max's floor is the volume bound
// sum_l min_c n_c t(l, c) / num_devices and the largest per-layer least t. Time coefficients are
// scaled to O(1) for the solver's tolerances; the returned plan is re-Evaluate()d and must match
// the MILP objective within 1e-6 relative (an InternalError otherwise).
//
// The best uniform plan (equal stages sharing one configuration, every m; on a heterogeneous
// cluster within each group alone) is the first incumbent (with the warm start, if better): with
// it as CBC's cutoff most units are settled at the root. On a heterogeneous cluster the best plan
// in one group is often 30 % off, so each order of several groups also gets a balanced plan
// (BalancedRuns in the .cc: equal stages of one configuration per run, layers in proportion to
// the runs' speeds, then a local search over stage boundaries and configurations), which on the
// zoo's GPT shapes over H100 + A100 finds the optimum itself. A unit's columns are pruned by the
// incumbent as soon as they are built, so the units hold only what could beat it. Units are
// then solved in order of their cheap lower bound (shortest chain by t + c plus (m - 1) times
// the T_max floor plus the E_max floor); a unit whose bound reaches the incumbent is settled
// without a MILP. The remaining time is shared among the open units (a second pass gives the
// unfinished ones what is left) and passed to CBC, which checks it only between its phases and
// nodes: a root LP of hundreds of thousands of columns (e.g. GPT-3 175B on 512 GPUs) can overrun
// it, so each MILP runs in a child process that is killed half a second past its share (the unit
// then keeps its cheap bound and the incumbent stands).
//
// Measured (2-core shared machine): GPT-3 6.7B (34 layers) on 64 A100s, 10 microbatch counts,
// proven optimal in about 1 s (7 MILPs, 0 branch-and-bound nodes; DP: 0.1-0.5 s); with m = 256
// only, where the uniform plan is 4 % off, in 6-11 s (114 nodes). Heterogeneous
// (dgx-h100-a100-datasheet, batch 512): GPT-3 1.3B on h100=1,a100=1 proven optimal in 8 s (40
// units, 13 MILPs; DP 0.07 s), 6.7B on h100=2,a100=2 in 32 s (DP 0.16 s); 13B on h100=4,a100=4
// returns the optimum within the default 60 s but cannot prove it (root LPs of 90k-220k columns
// take 15-35 s each; DP 0.3 s).
//
// SearchSummary: algorithm "ilp"; evaluations = MILPs solved; iterations = branch-and-bound nodes;
// termination kOptimal (every unit proven; lower_bound_seconds = best), kTimeLimit (best plan so
// far with lower_bound_seconds = min over units of their bounds, and the gap in the message),
// kEvaluationLimit (SearchOptions::max_evaluations MILPs), or kInfeasible with the reason (the
// layer that fits on no configuration, by how much); kDeclined with "built without COIN-OR CBC"
// when stratos was compiled without it.
#include <optional>
#include <utility>

#include "search/searcher.h"

namespace stratos {

struct IlpOptions {
  // A plan to start from (CBC's MIP start, and the first incumbent). It must be a plan of the
  // same problem; one that does not validate, fit in memory or lie in the search space is
  // ignored, and the summary message says why. The returned plan is never worse than it.
  std::optional<Plan> warm_start;
  // Print CBC's own log (level 1) to stdout; SearchOptions::progress prints one line per MILP.
  bool solver_log = false;
};

class IlpSearcher : public Searcher {
 public:
  // plain_only: plain pipelines whatever options.space.virtual_stages offers (the form the
  // InterleavingSearcher wraps where the virtual stages are not priced exactly).
  explicit IlpSearcher(IlpOptions ilp_options = {}, bool plain_only = false)
      : ilp_options_(std::move(ilp_options)), plain_only_(plain_only) {}

  std::string Name() const override { return "ilp"; }
  // Throws InputError for invalid options (SearchOptions::Validate, SearchSpace::Build).
  SearchResult Search(const Problem& problem, const SearchOptions& options) override;

  void set_warm_start(std::optional<Plan> plan) { ilp_options_.warm_start = std::move(plan); }
  const IlpOptions& ilp_options() const { return ilp_options_; }

  // Whether this build links COIN-OR CBC (otherwise Search() reports kDeclined).
  static bool Available();

 private:
  IlpOptions ilp_options_;
  bool plain_only_;
};

}  // namespace stratos
