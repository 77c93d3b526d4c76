#pragma once
// `stratos validate vtrain`: predicted vs measured iteration time of vTrain's 1,440
// Megatron-DeepSpeed GPT runs on one A100 node (Bang et al., MICRO 2024; VIA-Research/vTrain
// data/ground_truth_single.csv): MAPE on the rows not fitted and, within each model, the
// Spearman rank correlation of the configurations.
#include <array>
#include <optional>
#include <string>
#include <vector>

#include "costmodel/plan.h"
#include "costmodel/problem.h"
#include "validate/reference_tables.h"
#include "validate/report.h"

namespace stratos {

// How a row becomes a Problem and a Plan (the report prints each with its source).
// The zoo cluster `stratos calibrate --vtrain-csv` writes (the A100 default), and its base: the
// same node with datasheet and MAMF constants only.
inline constexpr const char* kVtrainShippedCluster = "dgx-a100-80gb";
inline constexpr const char* kVtrainBaseCluster = "dgx-a100-80gb-datasheet";

struct VtrainAssumptions {
  std::string cluster = kVtrainBaseCluster;  // zoo cluster, one node; the row uses its first GPUs
  // Fitted constants. The device's achieved GEMM share of peak (< 0: the zoo cluster's own
  // value) and its block curve (cluster.h LayerCurve, scales 1: the host's floor per block pass;
  // nullopt: none, blocks priced from GEMMs and the roofline alone).
  double matmul_efficiency = -1;
  std::optional<LayerCurve> layer_curve;
  // The device's GEMM curve (cluster.h MatmulCurve; nullopt: none, every GEMM at
  // matmul_efficiency).
  std::optional<MatmulCurve> matmul_curve;
};

struct VtrainCase {
  Problem problem;
  Plan plan;
};

// Megatron-DeepSpeed's vocabulary for `tensor_parallel`: GPT-2's 50,257 rounded up to a multiple
// of 128 x TP (--make-vocab-size-divisible-by 128).
int VtrainPaddedVocab(int tensor_parallel);

// Problem and Plan of one row: GPT with the row's shapes and the padded GPT-2 vocabulary, fp16
// parameters and gradients with fp32 master weights and Adam moments (ZeRO 0), full activation
// recomputation, no overlap of the DP gradient all-reduce (gradient buckets off), materialized
// attention, 1F1B with m = global batch / (micro batch x DP) microbatches, Megatron's placement
// (embedding on the first stage, head on the last). Throws InputError naming the row for shapes
// or degrees that do not fit.
VtrainCase BuildVtrainCase(const VtrainRow& row, const VtrainAssumptions& how);

// The zoo's A100 as shipped (kVtrainShippedCluster) with its own fitted constants: the
// assumptions that price the rows as `stratos calibrate --vtrain-csv` left the file.
VtrainAssumptions ShippedVtrainAssumptions();

// Predicted iteration time of a row, milliseconds.
double PredictVtrainMs(const VtrainRow& row, const VtrainAssumptions& how);

// The fitted rows, by a rule fixed before looking at any error: every fifth row of the file
// (rows 5, 10, 15, ... of the data), a fifth of the table. Returns their indices into `rows`.
std::vector<size_t> VtrainCalibrationRows(const std::vector<VtrainRow>& rows);

// The constants of `form` fitted to `rows` by least squares on the relative iteration-time
// error: matmul_efficiency in [0.2, 1] (or the GEMM curve's half-efficiency dimension) and, for
// each power of calibrate/layer_fit.h's kLayerCurvePowers, the block curve's forward and backward
// floors in [0, 5 ms] (coordinate descent of golden-section searches from 0.6 or 512 elements,
// 0.5 ms, 1 ms); the power with the least error on `rows` is kept.
struct VtrainFit {
  VtrainAssumptions constants;
  double rms_relative_error = 0;  // on the fitted rows
};
enum class VtrainFitForm {
  kEfficiency,           // matmul_efficiency alone, no block curve
  kEfficiencyAndFloors,  // matmul_efficiency and the block floors
  // The GEMM curve's half-efficiency dimension in [0, 16384] with its asymptote fixed at the
  // base device's matmul_efficiency (the measured maximum achievable matmul FLOPs of large
  // GEMMs, hardware.csv's MAMF column), and the block floors.
  kGemmCurveAndFloors,
};
VtrainFit FitVtrainConstants(const std::vector<VtrainRow>& rows, const VtrainAssumptions& how,
                             VtrainFitForm form);

ValidationReport ValidateVtrain(const std::string& reference_path,
                                const VtrainAssumptions& how = {});

}  // namespace stratos
