#pragma once
// The smoothed stage dynamic program: the relaxation that RelaxSearcher optimizes by default
// (DESIGN.md §6). No LibTorch here.
//
// For one microbatch option m (count M_m), every plan p (stage count r in [min_stages,
// max_stages], contiguous stages [b_s, b_s+1), a config k_s per stage that is valid for m and
// fits in memory with its in-flight microbatches) costs (costmodel/cost_model.h)
//   iteration(p) = sum_s t_s + (M_m - 1) max_s t_s + max_s e_s + sum_s c_s.
// The maxima are not additive over stages, so a DP cannot minimize them directly; their
// variational forms are (for any reals x_s, the minimum is at theta = max_s x_s):
//   max_s x_s = min_theta [theta + sum_s relu(x_s - theta)],
// so with a bottleneck level theta, a tail level phi and a device price lambda (a Lagrange
// multiplier of sum_s devices_s <= D),
//   f_p(theta, phi, lambda) = sum_s [t_s + c_s + (M_m - 1) relu(t_s - theta) + relu(e_s - phi)
//                                    + lambda devices_s] + (M_m - 1) theta + phi - lambda D
// is additive over stages, and
//   min_{theta, phi} f_p(theta, phi, 0) = iteration(p)            (exact),
//   V(theta, phi, lambda) = min_p f_p  is solved by a DP over (stages left, first layer).
// The smoothed DP (Mensch and Blondel, "Differentiable Dynamic Programming for Structured
// Prediction and Attention", ICML 2018) replaces each min by the soft-min
// -tau log sum exp(-x / tau) and relu by softplus_tau; V^tau is then smooth, its gradient is the
// expectation of df_p under the Gibbs distribution exp(-f_p / tau) over plans (configs,
// partitions and stage counts together), and V^0 = V. RelaxSearcher descends in theta and phi
// and ascends in lambda (the dual), annealing tau; every evaluation also decodes the Gibbs
// distribution's most likely plan (argmin at every soft-min), which is exact at tau = 0.
//
// Heterogeneous clusters (RelaxTables::num_groups > 1): the stages visit the node groups in runs
// (SearchSpace::GroupsInRuns) along an `order` of groups, given to Evaluate and
// DecodeWithinDevices (one call per order, as the exact DP enumerates them; at most
// kMaxRelaxGroups groups). The state adds the position j in the order and whether the stage
// opens its run (then it receives over the link from group order[j - 1]); a stage may close its
// run (then it sends over the link to order[j + 1], whose first stage comes next), and the last
// stage closes the last group's. Each group g has its own price lambda_g:
//   f_p = ... + sum_s lambda_{g_s} devices_s - sum_g lambda_g D_g,
// and the device decodes keep the budget D_g of the run's group as the DP dimension, restarted
// at every run. Configs of a group are those with StageConfig::node_group = g; each stage's
// memory is checked against its group's device (RelaxTables::group_capacity_bytes).
//
// Cost per evaluation: O(L^2 / 2 * K) edge terms (one pass over the configs that fit each layer
// range; the terms and memory fits of every (range, config) are computed once per object when
// there are at most 8e6 of them, 32 bytes each) + O(S L^2 / 2) DP cells; memory
// O(levels * (L + 1)^2) per evaluation. L counts cut positions (cut_positions) where given.
#include <array>
#include <unordered_map>
#include <vector>

#include "relax/polish.h"
#include "relax/tables.h"

namespace stratos {

// Node groups the relaxation takes (RelaxSearcher declines clusters of more).
constexpr int kMaxRelaxGroups = 6;
using GroupArray = std::array<double, kMaxRelaxGroups>;

struct SmoothedDpPoint {
  double theta_seconds = 0;   // bottleneck level (microbatch seconds)
  double phi_seconds = 0;     // exposed-tail level (seconds)
  // Device price of each node group (iteration seconds per device), >= 0; a homogeneous
  // cluster has only lambda_seconds[0].
  GroupArray lambda_seconds{};
};

struct SmoothedDpValue {
  double value = 0;    // V^tau (seconds); +inf if no plan fits
  double d_theta = 0;  // dV/dtheta
  double d_phi = 0;    // dV/dphi
  // dV/dlambda_g = E_Gibbs[devices in group g] - D_g for the groups of the order (else 0).
  GroupArray d_lambda{};
  GroupArray expected_devices{};
  // EvaluateOrders: each order's V^tau (seconds; +inf where no plan of it fits), in the
  // orders' order; empty for EvaluateMany on a homogeneous cluster.
  std::vector<double> order_values;
  // The Gibbs distribution's mode as decoded (argmin at every soft-min); empty configs if none.
  DiscretePlan decoded;
};

// The cut positions of the coarse phase for a model of more than coarse_layers layers (empty: at
// most that many, every boundary): where the model repeats a block of layers -- the layers of
// the most frequent cost class that occurs at most coarse_layers - 1 times, earliest first on
// ties (the first sublayer of every transformer block at operator granularity) -- when there
// are at least coarse_layers / 8 of them, spread evenly (no gap above twice their mean
// spacing); else every stride-th boundary, stride = min(ceil(L / coarse_layers),
// max(2, floor(L / max_stages))): so that a plan of max_stages stages has a coarse gap per stage
// where a stride of 2 allows it (0: no such bound; GPT-3 175B, 98 layers, on h100=8,a100=16 of
// dgx-h100-a100-datasheet: the optimum has 16 stages of 5-8 layers, which a stride of
// ceil(98 / 16) = 7 cannot express, and relax ended 3.26% above it). A stride of 1 would leave
// no coarse phase (GPT-3 1.3B, 24 layers, on h100=1,a100=1 with relax.heterogeneous_coarse_layers
// = 0: 2.6 s against 0.44 s, the same plan).
// Always starts at 0 and ends at L. Throws InternalError for coarse_layers < 2 (but 0) or
// max_stages < 0.
std::vector<int> CoarseCutPositions(const RelaxTables& tables, int coarse_layers,
                                    int max_stages = 0);

class SmoothedStageDp {
 public:
  // `configs`: indices into tables.configs that the DP may use (e.g. undominated_configs);
  // those invalid for `microbatch_option` are dropped. Keeps a reference to `tables`.
  // Throws InternalError if microbatch_option is out of range.
  // `cut_positions`: the layer boundaries where stages may start, ascending from 0 to L (empty:
  // every boundary); fewer positions make a coarser, cheaper DP (RelaxOptions::coarse_layers).
  SmoothedStageDp(const RelaxTables& tables, int microbatch_option,
                  const std::vector<int>& configs, const std::vector<int>& cut_positions = {});

  // V^tau at `point` (tau_seconds = 0: the exact min). Gradients are exact for tau > 0
  // (softplus and soft-min), subgradients at tau = 0.
  // `order`: the node groups along the pipeline, each once (empty on a homogeneous cluster);
  // throws InternalError for an order on a homogeneous cluster, or none on a heterogeneous one.
  SmoothedDpValue Evaluate(const SmoothedDpPoint& point, double tau_seconds,
                           const std::vector<int>& order = {});
  // Evaluate at several points (each with its tau) in one pass over the layer ranges' terms:
  // the same values, for the memory traffic of one evaluation (the terms of a long model's
  // ranges are tens of MB). Throws InternalError if the sizes differ.
  std::vector<SmoothedDpValue> EvaluateMany(const std::vector<SmoothedDpPoint>& points,
                                            const std::vector<double>& taus_seconds,
                                            const std::vector<int>& order = {});
  // Heterogeneous clusters: the soft-min over several orders of V^tau at each point (the Gibbs
  // distribution over the plans of every order: its value, gradient and mode), the edge sets
  // that orders share (a group with the same neighbour groups) computed once. The orders must be
  // distinct. Empty `orders`: EvaluateMany on a homogeneous cluster.
  std::vector<SmoothedDpValue> EvaluateOrders(const std::vector<SmoothedDpPoint>& points,
                                              const std::vector<double>& taus_seconds,
                                              const std::vector<std::vector<int>>& orders);

  // The exact (tau = 0) minimizer of f_p(theta, phi, 0) over the plans whose stage meshes sum to
  // at most D devices: the device budget as a DP dimension (free devices, in units of the gcd of
  // the mesh sizes), as in Alpa's DP (Zheng et al., OSDI'22, Eq. 4), instead of the price lambda,
  // so the decode has no duality gap. min over (theta, phi) of its value is the optimum for m.
  // Cost O(S L^2 / 2 * F * W) min-plus steps (F: the meshes on the strictly decreasing frontier
  // of a layer range, W: free-device units + 1); memory (S + 1)(L + 1) W doubles. `known`, a
  // plan that fits within D devices with its boundaries on this DP's cut positions (else
  // ignored), bounds the optimum: the frontier entries that alone cost more are dropped before
  // the device unit is taken, the result unchanged (mostly the smallest meshes of long ranges;
  // cheap stages such as an embedding alone on one device stay, so the unit rarely grows, but
  // the min-plus steps fall: relax on GPT-3 175B / 1,024 GPUs at block level, polish none, 15.8
  // s -> 7.9 s). Returns an empty plan when nothing fits, or when the work S x (L^2 / 2) x W
  // exceeds max_work.
  // On a heterogeneous cluster the plans follow `order`, each run within its group's budget
  // (the free devices of the run's group as the DP dimension); `known` counts only if its runs
  // follow `order`.
  DiscretePlan DecodeWithinDevices(const SmoothedDpPoint& point, double max_work,
                                   const DiscretePlan* known = nullptr,
                                   const std::vector<int>& order = {}) const;

  // DecodeWithinDevices restricted to the plans near `around`: as many stages, the s-th inner
  // boundary within `radius` layers of around's (any layer boundary there, whatever this DP's
  // cut positions), every stage's config and the device split free. The refinement of a coarse
  // plan at full resolution (RelaxOptions::coarse_layers): cost O(S (2 radius + 1)^2 (K + F W))
  // instead of O(S L^2 / 2 F W), with W counted in the gcd of the meshes on the windows'
  // frontiers. When `around` itself fits within D devices, its cost bounds the optimum, and the
  // frontier entries that cannot beat it (an entry's cost plus every other stage's least
  // exceeds it; mostly the smallest, slowest meshes) are dropped before the gcd is taken: on
  // operator-granularity GPT-3 175B / 16,384 GPUs the windows' frontiers reach down to 8-device
  // meshes (W = 2,049), the pruned ones to 64 to 4,096 (W = 5 to 257, mostly 33 or less; relax's
  // refinement there 2.9 s -> 1.1 s). On a heterogeneous cluster each stage keeps around's
  // group (its config free within the group) and each run its group's budget. Returns an empty
  // plan when nothing
  // there fits within D devices, or when the work S (2 radius + 1)^2 W exceeds max_work. Throws
  // InternalError for a plan that is not a partition of the layers, or radius < 0.
  DiscretePlan DecodeNearPlan(const SmoothedDpPoint& point, const DiscretePlan& around,
                              int radius, double max_work) const;

  // The plan's own levels: theta = max_s t_s, phi = max_s e_s (lambda = 0), where f_p equals its
  // iteration time. Throws InternalError for a plan of another microbatch option or config set.
  SmoothedDpPoint PlanLevels(const DiscretePlan& plan) const;

  // f_p(theta, phi, lambda) of a plan with tau = 0 (+inf if a stage does not fit or a config is
  // invalid for m); for tests.
  double PlanValue(const DiscretePlan& plan, const SmoothedDpPoint& point) const;

  // Scale hints for initialization: the smallest (microbatch seconds x devices) of the whole
  // model over the configs (ignoring memory), divided by the device count -- the bottleneck of
  // a perfectly balanced plan that uses every device at that efficiency.
  double BalancedStageSeconds() const;
  int num_microbatches() const { return microbatch_count_; }
  int microbatch_option() const { return m_; }
  int num_configs() const { return static_cast<int>(configs_.size()); }
  long edge_terms() const { return edge_terms_; }

 private:
  struct Terms {
    double t, e, c, fixed_bytes, activation_bytes;
  };
  // previous_group / next_group: the neighbours' groups (-1: none or the stage's own).
  Terms StageTerms(int config_slot, int first_layer, int last_layer, int previous_group = -1,
                   int next_group = -1) const;
  // Number of in-flight levels (levels_[0..n)) that a stage of this config with these terms fits.
  int FittingLevels(const Terms& x, int config_slot) const;
  // The t, e, c of a config's overhead with neighbours in other groups minus its own-group one.
  struct Delta {
    double t, e, c;
  };
  Delta CrossDelta(int config_slot, bool first, bool last, int previous_group,
                   int next_group) const;
  // The plan's stage groups and, per stage, its neighbours' groups where they differ (else -1).
  // False if a config is not in this DP or the groups are not in runs.
  bool PlanNeighbours(const DiscretePlan& plan, std::vector<int>* slots,
                      std::vector<int>* previous, std::vector<int>* next) const;
  template <int N>
  std::vector<SmoothedDpValue> EvaluateManyN(const std::vector<SmoothedDpPoint>& points,
                                             const std::vector<double>& taus,
                                             const std::vector<std::vector<int>>& orders);
  // Throws InternalError unless `order` suits the cluster; returns the positions' groups ({-1}
  // on a homogeneous cluster: every config).
  std::vector<int> Positions(const std::vector<int>& order) const;
  int LevelIndex(int stages_left) const;
  // The gcd of the mesh sizes: the device decodes count free devices in these units.
  long DeviceUnit() const;
  // The sum of a plan's stage costs t + c + (M - 1) relu(t - theta) + relu(e - phi) at p's
  // levels (lambda ignored), +inf if it is of another microbatch option, uses a config outside
  // this DP, does not fit in memory or needs more than D devices: an upper bound on what the
  // device decodes minimize, wherever the plan is among their candidates.
  double AroundCost(const SmoothedDpPoint& p, const DiscretePlan& plan) const;

  // One config's terms on one range of cut positions, for a config that fits at least one level.
  struct RangeTerm {
    double t, e, c;
    int slot, fits;
  };
  // The configs that fit layers [cuts_[first_cut], cuts_[last_cut]) at some level, by group and
  // ascending mesh size, with their terms (independent of the point): from the cache
  // (range_rows_), or computed into *scratch; *count of them.
  const RangeTerm* RangeTerms(int first_cut, int last_cut, std::vector<RangeTerm>* scratch,
                              size_t* count) const;
  void CollectRangeTerms(int first_cut, int last_cut, std::vector<RangeTerm>* out) const;
  size_t PairIndex(int first_cut, int last_cut) const {
    return pair_row_[first_cut] + (last_cut - first_cut - 1);
  }

  const RelaxTables& tables_;
  int m_ = 0;                     // microbatch option index
  int microbatch_count_ = 1;      // M_m
  int L_ = 0;
  std::vector<int> cuts_;         // (N + 1) cut positions: 0 = cuts_[0] < ... < cuts_[N] = L
  int N_ = 0;
  std::vector<int> configs_;      // (K) table config indices valid for m
  std::vector<double> devices_;   // (K)
  std::vector<int> group_;        // (K) node group of each config
  std::vector<double> capacity_;  // (K) memory per device of the config's group
  int G_ = 1;                     // node groups
  // Heterogeneous only: CrossDelta by (K, 2 first, 2 last, G + 1 previous, G + 1 next).
  std::vector<Delta> cross_;
  // Prefix sums over layers, (K, L + 1) each: t, e (its additive part), c, state + working,
  // activation.
  std::vector<double> prefix_t_, prefix_e_, prefix_c_, prefix_fixed_, prefix_activation_;
  // Overhead terms (K, 2 first, 2 last), e its additive part.
  std::vector<Terms> overhead_;
  // A bucketed DP reduction (TermScalars::TailSeconds): its S and W as prefix sums, (K, L + 1),
  // and S, W, b of the overheads, (K, 2 first, 2 last); empty when no config has one.
  struct Bucket {
    double sync_seconds, window_seconds, last_bucket_seconds;
  };
  bool bucketed_ = false;
  std::vector<double> prefix_sync_, prefix_window_;
  std::vector<Bucket> overhead_bucket_;
  std::vector<int> levels_;       // distinct in-flight counts, ascending
  std::vector<int> by_size_;      // config slots by group, then ascending mesh size
  std::vector<size_t> pair_row_;  // (N + 1): pair of cuts (i, j) at pair_row_[i] + j - i - 1
  // RangeTerms of every pair (i, j), pair p at [range_begin_[p], range_end_[p]) of row i's
  // range_rows_[i]; empty (computed per evaluation) when pairs x configs exceeds
  // kMaxCachedRangeTerms.
  std::vector<std::vector<RangeTerm>> range_rows_;
  // DecodeNearPlan's terms of layer ranges [x, y) (key x * (L + 1) + y), kept between calls:
  // successive windows overlap. Bounded by kMaxCachedRangeTerms terms (then cleared).
  mutable std::unordered_map<long, std::vector<RangeTerm>> near_terms_;
  mutable size_t near_terms_count_ = 0;
  std::vector<size_t> range_begin_, range_end_;
  long edge_terms_ = 0;
};

}  // namespace stratos
