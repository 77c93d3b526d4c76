#pragma once
// Evaluate(problem, plan) -> Estimate: the predicted iteration time, memory and throughput of a
// discrete plan, from the additive cost model (cost_model.h).
#include <nlohmann/json_fwd.hpp>

#include <string>
#include <vector>

#include "costmodel/cost_model.h"
#include "costmodel/plan.h"

namespace stratos {

struct StageEstimate {
  StageTerms terms;                 // summed over the stage's layers + its overhead
  double microbatch_seconds = 0;    // t_s
  double tail_seconds = 0;          // e_s, exposed tail after the stage's last backward
  double one_time_seconds = 0;      // c_s
  // Forward passes whose activations the stage holds at its peak: microbatches, or with v
  // virtual stages microbatch-chunks (ChunkForwardsInFlight; each 1/v of the activations).
  int microbatches_in_flight = 0;
  double peak_memory_bytes = 0;     // per device
  double memory_capacity_bytes = 0; // per device (usable), of the stage's node group
  int node_group = 0;               // the stage's node group (StageConfig::node_group)
  double MemoryHeadroomBytes() const { return memory_capacity_bytes - peak_memory_bytes; }
};

// How a heterogeneous plan uses one node group of the cluster.
struct GroupUtilization {
  std::string name;        // the group's name (ClusterSpec::GroupName)
  std::string device;      // its device
  int devices_used = 0;    // by the plan's stages in the group
  int devices_available = 0;
  // Share of the iteration the used devices spend in forward and backward passes:
  // sum over the group's stages of devices_s * m * t_s / (devices_used * T); 0 if none used.
  double busy_fraction = 0;
};

struct Estimate {
  // T = fill_seconds + steady_seconds + tail_seconds (cost_model.h).
  // tail_seconds = max_s e_s + sum_s c_s: everything charged once per iteration.
  double iteration_seconds = 0;
  double fill_seconds = 0;     // sum_s t_s (interleaved: sum_s t_s / v + (1 - 1/v) max_s t_s)
  double steady_seconds = 0;   // (m - 1) * max_s t_s
  double tail_seconds = 0;     // max_s e_s + sum_s c_s
  double max_stage_seconds = 0;
  int bottleneck_stage = 0;
  double bubble_fraction = 0;  // idle share of the pipeline part: 1 - m*mean t / (fill+steady)
  int num_devices = 0;
  double model_flops = 0;      // per iteration, whole cluster, no recomputation
  double tflops_per_gpu = 0;   // model FLOP/s per device / 1e12
  double mfu = 0;              // model FLOP/s / (sum over stages of devices * their peak)
  double tokens_per_second = 0;
  std::vector<StageEstimate> stages;
  // One entry per node group of a heterogeneous cluster (empty for a homogeneous one).
  std::vector<GroupUtilization> groups;

  bool Fits() const;  // every stage's peak memory within capacity
  // "" if it fits, else e.g. "stage 2 (mesh 1x4 dp4 tp1 ...) needs 93.1 GiB per device, 13.1 GiB
  // over its 80.0 GiB capacity"
  std::string MemoryViolation() const;
};

// Requires a structurally valid plan (ValidatePlan) and training options in range
// (ValidateTrainingSpec); throws InputError otherwise.
// Memory overflow is reported in the Estimate, not thrown. Estimate::stages has one entry per
// pipeline rank: with plan.virtual_stages = v > 1, rank r's terms sum its chunks' layers and
// are priced as problem.training.virtual_pipeline_stages = v prices them.
Estimate Evaluate(const Problem& problem, const Plan& plan);

// Same, reusing a CostModel (searchers evaluate many plans).
Estimate Evaluate(const CostModel& cost_model, const Plan& plan);

// The closed form of cost_model.h from its four reductions over the stages: the sum and the
// largest of the microbatch times t, the largest exposed tail e and the sum of one-time costs c,
// with m microbatches and v virtual stages (PipelineObjective below). Searchers that keep the
// reductions themselves (relax's polish) price with it, so every objective is this one.
inline double PipelineSeconds(double sum_t, double max_t, double max_e, double sum_c, int m,
                              int v = 1) {
  // For v = 1 this is sum + (m - 1) * max, bit for bit (x / 1.0 == x, m - 1.0 is exact).
  return sum_t / v + (m - 1.0 / v) * max_t + max_e + sum_c;
}

// The closed form of cost_model.h over per-stage values: sum t + (m-1) max t + max e + sum c.
// With v virtual stages per device (interleaved 1F1B, Narayanan et al. SC'21 §2.2.2) the fill
// shrinks by v: sum t / v + (m - 1/v) max t + max e + sum c, which for uniform stages is
// (m + (p-1)/v) t, the paper's bubble (p-1)/(v m); v = 1 is the plain formula.
// Throws InternalError unless the three vectors have the same, nonzero length and v >= 1.
double PipelineObjective(const std::vector<double>& microbatch_seconds,
                         const std::vector<double>& tail_seconds,
                         const std::vector<double>& one_time_seconds, int num_microbatches,
                         int virtual_stages = 1);

nlohmann::json EstimateToJson(const Estimate& estimate, const Plan& plan);
// Human-readable multi-line report (per-stage breakdown).
std::string EstimateReport(const Estimate& estimate, const Plan& plan);

}  // namespace stratos
