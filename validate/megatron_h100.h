#pragma once
// `stratos validate megatron-h100`: predicted vs published TFLOP/s per GPU of Megatron-Core's
// weak-scaling table on H100 (NVIDIA/Megatron-LM README, 2024: GPT 1.7B-462B on 48-6144 GPUs).
#include <string>

#include "costmodel/plan.h"
#include "costmodel/problem.h"
#include "validate/reference_tables.h"
#include "validate/report.h"

namespace stratos {

// The zoo cluster `stratos calibrate --megatron-h100-csv` writes (the H100 default), and its base:
// the same node with datasheet and MAMF constants only.
inline constexpr const char* kMegatronShippedCluster = "dgx-h100";
inline constexpr const char* kMegatronBaseCluster = "dgx-h100-datasheet";

// How a row becomes a Problem and a Plan; the free constants are the last two fields.
struct MegatronAssumptions {
  std::string cluster = kMegatronBaseCluster;  // zoo cluster; nodes = GPUs / GPUs per node
  // Interleaved 1F1B with one transformer layer per virtual stage (v = layers / PP) on rows with
  // PP > 1; false: plain 1F1B.
  bool interleaved = true;
  // FlashAttention (UseFlashAttention: no attention scores in memory); false: the scores are
  // stored and streamed as in Korthikanti et al. Table 2.
  bool flash_attention = true;
  // The device's achieved GEMM share of peak (< 0: the zoo cluster's own value), fitted, and the
  // share of TP, PP and DP communication hidden behind compute: 1 as Megatron-Core's README ran
  // it (gradient reduce, parameter gather, TP and PP communication overlapped), or fitted.
  double matmul_efficiency = -1;
  double comm_overlap_fraction = 1;
  // The DP gradient reduction in Megatron-Core's buckets of max(40M, 1M x DP) parameters (its
  // --overlap-grad-reduce default; TrainingSpec::dp_bucket_bytes at 4 bytes per gradient), its
  // exposed part max(S - W, b), instead of hidden in the share comm_overlap_fraction.
  bool dp_buckets = false;
};

struct MegatronCase {
  Problem problem;
  Plan plan;
};

// Problem and Plan of one row (see the assumptions printed by the report): GPT with the row's
// shapes, microbatch 1, sequence parallelism, distributed optimizer (ZeRO-1) with bf16 params
// and fp32 gradients, FlashAttention (UseFlashAttention), no recomputation, embedding on the
// first and head on the last stage, interleaved 1F1B with one layer per virtual stage.
// Throws InputError naming the row for shapes or degrees that do not fit.
MegatronCase BuildMegatronCase(const MegatronScalingRow& row, const MegatronAssumptions& how);

// Model FLOPs of one iteration as Megatron-LM counts them (megatron/training/training.py
// num_floating_point_operations, no GQA, 4h MLP): 72 B s L h^2 (1 + s/(6h) + V/(12 L h)),
// i.e. Korthikanti et al. 2022 Eq. 7 = 3 x the forward GEMM FLOPs, recomputation not counted.
double MegatronModelFlops(const MegatronScalingRow& row);

// Predicted TFLOP/s per GPU (model FLOPs / (iteration seconds x GPUs)) of a row.
double PredictMegatronTflops(const MegatronScalingRow& row, const MegatronAssumptions& how);

// The free constants fitted to `rows` by least squares on the relative TFLOP/s error (grid search,
// efficiency in [0.2, 1]; with fit_overlap the overlap too, in [0, 1], else how's overlap).
// `stratos calibrate --megatron-h100-csv` ships the efficiency fitted with the overlap of `how`.
struct MegatronFit {
  double matmul_efficiency = 0;
  double comm_overlap_fraction = 0;
  double rms_relative_error = 0;  // on the fitted rows
};
MegatronFit FitMegatronConstants(const std::vector<MegatronScalingRow>& rows,
                                 const MegatronAssumptions& how, bool fit_overlap = false);

// Calibration rows by a rule fixed before looking at any error: the smallest and the largest
// run of the table (fewest and most GPUs). Returns their indices into `rows`.
std::vector<size_t> MegatronCalibrationRows(const std::vector<MegatronScalingRow>& rows);

ValidationReport ValidateMegatronH100(const std::string& reference_path,
                                      const MegatronAssumptions& how = {});

}  // namespace stratos
