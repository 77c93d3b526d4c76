#pragma once
// RelaxSearcher: the differentiable search of DESIGN.md §6 (DARTS-style relaxation of the
// pipeline-parallel plan space, Liu et al. ICLR'19), name "relax".
//
//   1. Tables from costmodel (relax/tables.h), over the undominated configs.
//   2. The gradient phase (RelaxOptions::relaxation):
//      smoothed-dp (default): per microbatch option, the smoothed stage DP (relax/smoothed_dp.h),
//        Adam descent on its bottleneck and tail levels (theta, phi) and ascent on its device
//        price lambda, Gibbs temperature annealed; each step's decoded mode is a start. Then,
//        from the final levels and from the levels of the best and the late decoded plans,
//        majorize-minimize with the device budget exact (DecodeWithinDevices; levels <- the
//        decoded plan's own max t_s, max e_s) until a fixed point, then a level search (pattern
//        search on the levels around the best plans of the best microbatch options, each probe
//        majorize-minimized); each decode is a start. Long models (coarse_layers): all of it on
//        coarse cut positions, then the same majorize-minimize and level search at every layer
//        boundary near the best coarse plans' cuts.
//      cuts: Adam on the logits of R random restarts at once (one tensor batch) of independent
//        per-cut probabilities (relax/surrogate.h), softmax temperature and smooth-max tau
//        annealed; optional Gumbel noise and straight-through estimator; every restart is
//        discretized (argmax) every discretize_every steps and at the end.
//   3. Every start is repaired to a valid plan (relax/polish.h) and the best distinct ones are
//      polished by local search on the exact table cost (= costmodel::Evaluate), unless
//      polish = none.
//   4. The best plan that Evaluate() confirms to fit is returned.
// Heterogeneous clusters (several node groups; smoothed-dp only, at most kMaxRelaxGroups groups):
// the annealing spans every order of the groups at once (SmoothedStageDp::EvaluateOrders: a
// soft-min over the orders, one device price per group), the device decodes and the level
// search run on the best relax.decode_orders orders of each microbatch option (each run within
// its group's budget); the starts are not repaired (the decodes keep the budgets), and the
// polish keeps each stage in its group (but for its move that gives every stage one stage's
// config).
//
// SearchSummary: algorithm "relax"; iterations = Adam steps; evaluations = surrogate batch
// evaluations + discrete plan evaluations; termination kConverged, kTimeLimit (best plan so far),
// kEvaluationLimit, or kInfeasible with the reason (which stage overflows memory, by how much).
// Deterministic for a given options.seed, unless the time limit cuts it short.
#include <string>

#include "search/searcher.h"

namespace stratos {

struct RelaxOptions {
  // The relaxation the gradient phase optimizes:
  //   kSmoothedDp  the smoothed stage DP (relax/smoothed_dp.h): Adam on its bottleneck and tail
  //                levels and its device price, per microbatch option, tau annealed; every
  //                step's decoded mode is a discrete start (the default);
  //   kCuts        independent per-cut probabilities, per-stage config and microbatch softmax
  //                (relax/surrogate.h), R restarts (the fields below marked "cuts").
  enum class Relaxation { kSmoothedDp, kCuts };
  Relaxation relaxation = Relaxation::kSmoothedDp;
  // Smoothed DP: Gibbs temperature tau relative to the iteration-time scale (M_m x the balanced
  // stage time), annealed geometrically from initial to final; > 0, final <= initial.
  double initial_gibbs_temperature = 0.02;
  double final_gibbs_temperature = 0.0002;
  // Smoothed DP: from a quarter of the steps on, a track stops once its best decoded plan that
  // fits is more than this times the best one (a track with none goes on); 0: never, else >= 1.
  // At 2, on GPT-3 175B / 1536 on DGX A100, the tracks that stop are 2.0x to 23x behind (1,024
  // GPUs, block level) and 2.2x to 159x (16,384 GPUs, operator granularity), and relax (polish
  // none) returns the same plans in 6.5 s instead of 7.2 s and 3.5 s instead of 4.7 s
  // (experiments/specs/scale-175b-ops.toml, the second figures with prune_microbatch_ratio = 0
  // added to its relax options); at 1.2 it stopped the best option early on GPT-3 13B / 8
  // p3.16xlarge-datasheet / 512 (before the level search).
  double prune_microbatch_ratio = 2;
  // Smoothed DP: at the end, decode every microbatch option's final levels (theta, phi) exactly
  // with the device budget as a DP dimension (SmoothedStageDp::DecodeWithinDevices: no duality
  // gap from the price) when its work (stages x layer ranges x free-device units) is at most
  // device_decode_max_work (>= 0; 5e8 is about a second of min-plus on one core); false:
  // only the price decodes.
  bool device_decode = true;
  // Smoothed DP, device decode: the majorize-minimize also starts from the levels of the last
  // this many distinct decoded plans of the last quarter of the steps, per track (>= 0).
  // Without a level search it mattered (GPT-3 13B / 8 p3.16xlarge-datasheet / 512, polish none,
  // 60 steps: 3.5% above the DP optimum with 0, 1.65% with 15); with one, 0 loses nothing on
  // the ablation spec's problems and saves a quarter of the wall time on the largest (GPT-3 175B
  // / 128 DGX).
  int late_decodes = 0;
  // Smoothed DP, heterogeneous clusters: the annealing spans every order of the node groups (a
  // soft-min over them: SmoothedStageDp::EvaluateOrders); the device decodes, the level search
  // and the refinement then take, per microbatch option, the best this many orders that it
  // decoded plans of (by their best plan) (>= 1).
  int decode_orders = 5;
  double device_decode_max_work = 5e8;
  // Smoothed DP, device decode: the best this many microbatch options (by their best decoded
  // plan) get a level search: a pattern search on the levels (theta, phi) around their best
  // plan's own, majorize-minimizing from each probe, until no probe improves or the pass has
  // decoded level_search_max_probes probes (one pass; on long models a second at full
  // resolution near the coarse plans) (>= 0; 0: none). The default reaches every option that
  // survives the annealing on the zoo's problems: an option's plan before the level search does
  // not predict its plan after it. With 3 options, GPT-3 2.7B / 4 p3.16xlarge-datasheet / 256
  // ends 14.7% above the DP optimum with polish none (4.898 s against 4.271 s: `stratos search
  // --algo relax,dp --option relax.polish=none --option relax.level_search_options=3`), and
  // relax 0.2-0.3% above it on that rung and GPT-3 175B / 128 DGX A100 (experiments/specs/
  // ladder.toml); with every option, at it. The level searches of the options that do not
  // improve cost time (relax's median on the ablation's non-uniform models 4.1 -> 6.1 s, README
  // "Experiments and ablations"). Ablation spec, polish none, its
  // 40 non-uniform cells (2026-11-27, 3 options): 8 within 0.1% of the DP optimum with 0, 40 with
  // 3; its operator cells: 2 of 4 with 0 (up to 14.8% above), 4 with 3.
  int level_search_options = 64;
  // Smoothed DP, models longer than coarse_layers: the microbatch options whose coarse plans are
  // refined at every layer boundary near their cuts, the best by their plans before the level
  // search (>= 1).
  int refine_options = 3;
  // Probes one level-search pass decodes at most (a work bound, so that the search is the same
  // on a loaded machine; >= 1). On the ablation spec's non-uniform models the whole level
  // search converges in 106-155 probes with the default gradient phase and 141-247 after one
  // Adam step (2026-11-27; the summary message counts them). Until then each pass stopped when it
  // had taken as long as the search before it, which after one Adam step (relax-no-gradient) cut
  // every search short, at 46-148 probes on eight of the models, depending on the machine's load.
  int level_search_max_probes = 1000;
  // Smoothed DP: tracks per microbatch option, the k-th (k = 0, 1, ...) starting its device
  // price at 10^-k x the balanced estimate (>= 1). GPT-3 13B / 8 p3.16xlarge-datasheet / 512,
  // polish none, 60 steps, late_decodes 0, no level search: 14.4% above the DP optimum with 1,
  // 3.5% with 2, at twice the gradient time; with the defaults, at the optimum with either.
  int price_starts = 2;
  // Smoothed DP: models with more layers than this run the annealed phase, the majorize-minimize
  // and the level search on coarse cut positions (CoarseCutPositions: the start of each repeated
  // block, e.g. every transformer block at operator granularity, else every
  // ceil(L / coarse_layers)-th boundary), then refine the best refine_options microbatch
  // options' plans at every layer boundary near their cuts (DecodeNearPlan,
  // within the widest coarse gap): majorize-minimize, then the level search. Operator-granularity
  // GPT-3 175B / 128 DGX A100 / 1536 (962 layers), polish none: the DP optimum, 16.529 s, in
  // 18 s (DP: 350 s; experiments/specs/scale-175b-ops.toml). 0: never; else >= 2.
  int coarse_layers = 128;
  // Smoothed DP, heterogeneous clusters: coarse_layers there (the annealing spans every group
  // order, each edge set of a group with its neighbours' groups, so coarse cuts pay more).
  // GPT-3 175B / 1,024 GPUs of three types (dgx-h100-a100-v100-datasheet, h100=32,a100=32,v100=64,
  // block level): 16.4641 s in 2.4 s at 16, 214 s at 128 (no coarse phase) before the polish;
  // the DP optimum 16.4558 s in 33.6 s.
  int heterogeneous_coarse_layers = 16;
  // Smoothed DP: the coarse cut positions' stride is at most max(2, floor(L / max_stages)), so
  // that a plan of the most stages has a coarse gap per stage (CoarseCutPositions). Off by
  // default: on GPT-3 175B / dgx-h100-a100-datasheet it takes relax to the DP optimum on
  // h100=8,a100=16 (16 stages of 5-8 layers; 3.26% above it with the 14 gaps of a stride of 7)
  // and h100=16,a100=32 (1.14%); on the heterogeneous ladder (its relax-coarse-room variant) it
  // reaches the same plans as the default and takes 2.1x as long on the 1,024-GPU three-type
  // rung (6.3 s against 3.0 s) and on 13B with h100=4,a100=4 (README "Heterogeneous clusters").
  bool coarse_room_for_max_stages = false;
  // Smoothed DP, heterogeneous clusters, after the polish: the group extension. Coarse cuts can
  // hide a node group whose GPUs hold only a layer or two per stage. When the best plan leaves a
  // group unused, the orders that add one unused group to the plan's, and that the annealing
  // values (V^0 at its final levels) below the plan, are decoded exactly at every layer
  // boundary, best value first: a majorize-minimize from the plan's levels with theta scaled by
  // 0.95, 0.9, ... 0.8 while it improves (the added devices shorten the bottleneck); the best
  // plan that beats it is polished. At the plan's microbatch count first, then at the others,
  // nearest in log(count) first (the added stages' bubble wants more microbatches: GPT-3 13B on
  // h100=2,a100=2,v100=4, 32 -> the DP optimum's 128, 0.52% above it -> 0, found by its 64th
  // decode). It stops after extend_max_decodes exact decodes (a work bound: the same plans on a
  // loaded machine), or at the search's time limit. GPT-3 175B on dgx-h100-a100-v100-datasheet
  // with h100=8,a100=8,v100=16: the polish's best 65.09 s -> 63.04 s, 1.47% above the DP
  // optimum (62.13 s; 1.56% at 48 decodes, 1.47% too with every count's 278); with
  // h100=32,a100=32,v100=64 the annealing values the V100 orders above the plan and the
  // extension does not run.
  bool extend_groups = true;
  int extend_max_decodes = 72;
  // Random restarts optimized together as one tensor batch; >= 1. Their initial stage counts
  // are spread geometrically over [min_stages, max_stages].
  int restarts = 8;
  // Adam steps; >= 1. Smoothed DP: 40 (with the level search, 20, 40 and 60 reach the same
  // plans on the ablation spec's non-uniform models; on operator-granularity GPT-3 175B / 128 DGX
  // A100 / 1536, polish none, 20 ends 3.0% above the block-level DP optimum, 40 and 60 0.72%).
  // The cut relaxation was tuned at 20.
  int iterations = 40;
  // Adam learning rate on the logits; > 0. Logits live on a scale of a few units.
  double learning_rate = 0.15;
  // Softmax / sigmoid temperature, annealed geometrically from initial to final; > 0,
  // final <= initial.
  double initial_temperature = 1.0;
  double final_temperature = 0.2;
  // Smooth-max tau relative to the mean stage time of the initial point, annealed
  // geometrically from initial to final; >= 0 (0: exact max from the start), final <= initial.
  double initial_smoothmax_tau = 0.2;
  double final_smoothmax_tau = 0.005;
  // Gumbel-softmax noise on the config and microbatch logits (logistic noise on the cuts).
  bool gumbel_noise = false;
  // Straight-through estimator: forward with hard samples, backward through the soft ones.
  bool straight_through = false;
  // Penalty weights (relax/surrogate.h), in units of the initial expected iteration time; >= 0.
  double memory_penalty_weight = 5.0;
  double device_penalty_weight = 5.0;
  double stage_count_penalty_weight = 5.0;
  // Discretize the restarts also every this many steps (0: only at the end), for more diverse
  // polish starts; >= 0.
  int discretize_every = 10;
  // What follows the gradient phase, so that each stage's share of the result is measurable:
  //   kNone      the gradient phase's own result: every restart's argmax, repaired to a valid
  //              plan (RelaxSearcher: PlanPolisher::Repair), the best one returned;
  //   kDescent   plus best-improvement local search on the exact cost from the best starts;
  //   kIterated  plus polish_kicks iterated-local-search kicks per start (the default).
  enum class Polish { kNone, kDescent, kIterated };
  Polish polish = Polish::kIterated;
  // Restart results polished (best discretized first); >= 1.
  int max_polish_starts = 6;
  // max_polish_starts on heterogeneous clusters, where the starts come from more units (each
  // microbatch option's decode_orders orders); >= 1. GPT-3 175B on dgx-h100-a100-datasheet:
  // 9.236 s with 6, 8.983 s with 20 (h100=64,a100=64; DP optimum 8.976 s) and 31.92 s against the
  // optimum 30.94 s (h100=16,a100=16), in about the same time.
  int heterogeneous_max_polish_starts = 20;
  // Iterated-local-search kicks after the first descent of each polish start (none when that
  // descent ends at a local optimum an earlier start already kicked from); >= 0.
  int polish_kicks = 4;
  // Surrogate in float64 instead of float32 (float32 is about twice as fast and precise enough
  // to rank plans; every plan is priced exactly by the polish and Evaluate()).
  bool double_precision = false;
  // Surrogate kernel: a stage's configs of probability below this are skipped (their expected
  // cost share and their logits' gradient, both scaled by that probability, are dropped;
  // SurrogateSettings::min_config_probability); the annealing drives most configs of a stage
  // below it, which saves kernel time. In [0, 1); 0: exact.
  double min_config_probability = 1e-5;
  // Restrict the surrogate to configs not dominated by another of the same mesh size (exact:
  // the optimum never needs a dominated config). The polish always sees every config.
  bool prune_dominated_configs = true;

  // Throws InputError naming the field, its value and the rule.
  void Validate() const;
};

// "smoothed-dp" | "cuts".
const char* RelaxRelaxationName(RelaxOptions::Relaxation relaxation);
// Throws InputError naming `where` and the allowed values for anything else.
RelaxOptions::Relaxation ParseRelaxRelaxation(const std::string& text, const std::string& where);
// "none" | "descent" | "iterated".
const char* RelaxPolishName(RelaxOptions::Polish polish);
// Throws InputError naming `where` and the allowed values for anything else.
RelaxOptions::Polish ParseRelaxPolish(const std::string& text, const std::string& where);

class RelaxSearcher : public Searcher {
 public:
  RelaxSearcher() = default;
  explicit RelaxSearcher(RelaxOptions relax_options) : relax_options_(relax_options) {}
  std::string Name() const override { return "relax"; }
  const RelaxOptions& relax_options() const { return relax_options_; }
  // Throws InputError for invalid options (SearchOptions::Validate, RelaxOptions::Validate,
  // SearchSpace::Build).
  SearchResult Search(const Problem& problem, const SearchOptions& options) override;

 private:
  RelaxOptions relax_options_;
};

}  // namespace stratos
