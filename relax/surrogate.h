#pragma once
// The differentiable surrogate of the pipeline objective (DESIGN.md §6), batched over R
// restarts. Shapes use L layers, S = max stages, K configs (a subset of RelaxTables::configs,
// see SurrogateTensors), M microbatch options, C cost classes.
//
// Parameters (probabilities; SurrogateProbabilitiesFromLogits makes them from logits):
//   cut (R, L-1)        c_j = Pr(a stage boundary between layer j and j+1), independent
//   config (R, S, K)    q[s, k] = Pr(stage s uses config k)
//   microbatch (R, M)   w[m] = Pr(the global batch is split into num_microbatches[m])
//
// Stage membership P[l, s] = Pr(layer l in stage s) = Pr(s cuts among the first l boundaries)
// by the Poisson-binomial recursion (P_0 = delta_0, P_{l+1}[s] = P_l[s](1-c_l) + P_l[s-1] c_l,
// mass past S-1 stays in S-1): stages are contiguous by construction, O(L*S).
// Expected layer counts N[s, c] = sum_l P[l, s] [class(l) = c]; stage s is nonempty with
// probability e_s = sum_{s' >= s} P[L-1, s'] and is the last one with probability P[L-1, s].
//
// For each m: t_s = sum_k q[s,k] (sum_c N[s,c] T[c,k,m] + overhead(k, m, s == 0, last) weighted
// by Pr(last) and Pr(nonempty, not last)), the exposed tail e_s and the one-time cost c_s
// likewise (all three are 0 for a surely empty stage), and
//   iteration(m) = sum_s t_s + (m - 1) smoothmax_s t_s + smoothmax_s e_s + sum_s c_s,
//   smoothmax = tau logsumexp(x / tau) over the S stages (tau = 0: the exact max; empty stages
//   enter with 0 <= every nonempty stage's value, so they never change the exact max),
// averaged over w (costmodel/cost_model.h: stages' tails run concurrently, the iteration pays
// the longest; one-time costs add up). Penalties, each relu(excess) / scale:
//   memory   sum_m w_m sum_s sum_k q[s,k] relu(peak(s,k,m) - capacity) / capacity, where
//            peak = state + in_flight * activation + working with in_flight = m (GPipe) or
//            min(m, sum_{s' >= s} e_s') (1F1B),
//   devices  relu(sum_s e_s E_q[mesh size] - num_devices) / num_devices,
//   stages   Pr(number of stages < min_stages).
// At one-hot parameters of a feasible plan with tau = 0 the iteration seconds equal
// costmodel::Evaluate(problem, plan).iteration_seconds and the penalties are 0 (tested).
// Cost per evaluation: O(R (L S + S K C M)), no enumeration of plans.
#include <torch/torch.h>

#include <string>
#include <vector>

#include "costmodel/plan.h"
#include "relax/tables.h"

namespace stratos {

// The tables as tensors (on `device`, of `dtype`), restricted to the configs `config_indices`
// (indices into RelaxTables::configs; e.g. RelaxTables::undominated_configs, or all).
// A stage's additive quantities are features (R, S, F) x table (F, K, M) with F = C + 4
// features: the expected layer counts N[s, c] and the overhead weights
//   [Pr(last) [s > 0], Pr(nonempty, not last) [s > 0], Pr(last) [s = 0], Pr(nonempty, not last) [s = 0]]
// for the rows overhead(first = 0, last = 1), (0, 0), (1, 1), (1, 0). One matmul per quantity.
struct SurrogateTensors {
  std::vector<int> config_indices;  // (K) surrogate config -> RelaxTables config
  int num_features = 0;             // F = C + 4
  torch::Tensor class_onehot;       // (L, C)
  torch::Tensor first_stage;        // (S) 1 for stage 0, else 0
  // (K, F, 3M): [microbatch seconds t | exposed tail seconds e | one-time seconds c] of feature f
  // under config k at option m; (K, F, 2M) without the c block when every c entry is 0
  // (has_one_time false: implicit models have no cut cost). e is TermScalars's additive part;
  // with a bucketed DP reduction (has_bucketed_dp) three more blocks [S | W | b] follow, and a
  // stage's e adds BucketedDpExposedSeconds of their expectations.
  torch::Tensor time_table;
  bool has_one_time = false;
  bool has_bucketed_dp = false;
  // (K, F, 2M): [state + working bytes | activation bytes of one in-flight microbatch].
  torch::Tensor memory_table;
  // (K, F, T + 2M) = [time_table | memory_table]: the fused CPU kernel's layout (one row per
  // (config, feature)).
  torch::Tensor kernel_table;
  torch::Tensor mesh_devices;       // (K)
  torch::Tensor microbatch_counts;  // (M) m as a number
  double memory_capacity_bytes = 0;
  int num_devices = 0;
  int min_stages = 1;
  int max_stages = 1;
  int num_layers = 0;
  Schedule schedule = Schedule::kOneFOneB;
};

// Throws InternalError if a config index is out of range or the list is empty.
// `dtype`: kFloat64 (exact, for tests and gradient checks) or kFloat32 (about twice as fast;
// what RelaxSearcher uses unless RelaxOptions::double_precision).
SurrogateTensors MakeSurrogateTensors(const RelaxTables& tables,
                                      const std::vector<int>& config_indices,
                                      torch::Device device = torch::kCPU,
                                      torch::Dtype dtype = torch::kFloat64);

struct SurrogateProbabilities {
  torch::Tensor cut;         // (R, L-1) in [0, 1]
  torch::Tensor config;      // (R, S, K), rows sum to 1
  torch::Tensor microbatch;  // (R, M), rows sum to 1
};

struct SurrogateSettings {
  // Smooth-maximum temperature in seconds; 0 = exact max.
  double smoothmax_tau_seconds = 0;
  // Penalties are (weight * scale_seconds * relative excess) seconds.
  double penalty_scale_seconds = 1.0;
  double memory_penalty_weight = 10.0;
  double device_penalty_weight = 10.0;
  double stage_count_penalty_weight = 10.0;
  // Fused CPU kernel only: configs whose probability q[r, s, k] is below this are skipped --
  // their share of the expected costs (q times a cost) is dropped and d q taken as 0 (their
  // logit's gradient is q times it). 0: exact (only exact zeros are skipped in the forward).
  double min_config_probability = 0;
};

struct SurrogateResult {
  torch::Tensor objective;           // (R) iteration_seconds + penalty_seconds
  torch::Tensor iteration_seconds;   // (R) expected pipeline objective
  torch::Tensor penalty_seconds;     // (R)
  torch::Tensor memory_excess;       // (R) relative, before weighting
  torch::Tensor device_excess;       // (R) relative
  torch::Tensor stage_count_excess;  // (R) probability
  torch::Tensor stage_probabilities; // (R, L, S) P[l, s]
  torch::Tensor stage_seconds;       // (R, S, M) expected t_s
  torch::Tensor stage_tail_seconds;  // (R, S, M) expected e_s
};

// P[r, l, s] from cut probabilities (R, L-1) -> (R, L, S). Differentiable; on CPU a fused
// O(R L S) kernel with its own backward, elsewhere plain tensor ops (same values).
torch::Tensor StageLayerProbabilities(const torch::Tensor& cut, int max_stages);
// The plain tensor-op version (reference for the fused kernel, and the CUDA path).
torch::Tensor StageLayerProbabilitiesReference(const torch::Tensor& cut, int max_stages);

// The surrogate from explicit probabilities (exact 0/1 allowed). On CPU the O(R S K F M) core
// (expected stage times, tails, one-time costs and per-config memory overflow) is a fused
// kernel with its own backward; `use_reference_ops` (and any other device) computes it with
// plain tensor ops.
SurrogateResult EvaluateSurrogate(const SurrogateTensors& tensors,
                                  const SurrogateProbabilities& probabilities,
                                  const SurrogateSettings& settings,
                                  bool use_reference_ops = false);

// Logits -> probabilities: sigmoid / softmax of logits / temperature. Optional Gumbel noise
// (logistic noise for the cuts) drawn from `generator`, and straight-through hard samples
// (forward one-hot / 0-1, backward through the soft probabilities).
struct SurrogateLogits {
  torch::Tensor cut;         // (R, L-1)
  torch::Tensor config;      // (R, S, K)
  torch::Tensor microbatch;  // (R, M)
};
SurrogateProbabilities SurrogateProbabilitiesFromLogits(const SurrogateLogits& logits,
                                                        double temperature, bool gumbel_noise,
                                                        bool straight_through,
                                                        torch::Generator* generator = nullptr);

// One-hot probabilities (R = 1) of a plan: cuts exactly 0/1, one-hot configs (stages past the
// plan's last get config 0; they are empty and cost nothing) and microbatch option. Throws
// InputError if the plan has more stages than the tensors allow or uses a config or m that is
// not in the tensors.
SurrogateProbabilities OneHotProbabilities(const RelaxTables& tables,
                                           const SurrogateTensors& tensors, const Plan& plan);

// Finite-difference check of the surrogate objective's gradient w.r.t. the logits (Ceres'
// GradientChecker): central differences of step `relative_step` * max(1, |x|) in float64 on
// every logit (or `max_probes` of them, evenly spaced, if > 0) compared with autograd at
// temperature 1 without noise. Returns the worst relative error
// |g_ad - g_fd| / max(|g_ad|, |g_fd|, absolute_floor).
struct GradientCheckResult {
  double max_relative_error = 0;
  std::string worst_entry;  // e.g. "config[0,2,5]: autograd 1.2e-3, finite difference 1.3e-3"
  int entries_checked = 0;
};
GradientCheckResult CheckSurrogateGradient(const SurrogateTensors& tensors,
                                           const SurrogateLogits& logits,
                                           const SurrogateSettings& settings,
                                           double relative_step = 1e-6,
                                           double absolute_floor = 1e-8, int max_probes = 0);

}  // namespace stratos
