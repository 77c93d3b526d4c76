#include "validate/validation.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "costmodel/error.h"
#include "validate/alpa_point.h"
#include "validate/amp_trials.h"
#include "validate/korthikanti.h"
#include "validate/megatron_h100.h"
#include "validate/nccl_sweeps.h"
#include "validate/reference_tables.h"
#include "validate/vtrain.h"
#include "validate/vtrain_extrapolation.h"
#include "validate/vtrain_shapes.h"
#include "validate/zero_memory.h"

namespace stratos {

const std::vector<std::string>& ValidationReportNames() {
  static const std::vector<std::string> names = {
      "megatron-h100", "amp",           "korthikanti",          "zero", "alpa-point",
      "vtrain",        "vtrain-shapes", "vtrain-extrapolation", "nccl"};
  return names;
}

std::string ValidationReportDescription(const std::string& name) {
  if (name == "megatron-h100")
    return "predicted vs published TFLOP/s of Megatron-Core's 9 GPT runs on H100 (2 rows fitted, "
           "7 held out)";
  if (name == "amp")
    return "rank correlation of predicted vs measured time over AMP's 52 GPT-2 strategies on "
           "4 x 4 T4, beside AMP's own cost model";
  if (name == "korthikanti")
    return "activation memory per layer (Table 2) and one 22B layer's forward/backward time "
           "(Table 4) under TP / SP / recompute";
  if (name == "zero") return "per-GPU model-state bytes of ZeRO stages 0-3 vs the published table";
  if (name == "alpa-point")
    return "Alpa's measured GPT 2.6B iteration on 8 V100 vs our prediction";
  if (name == "vtrain")
    return "predicted vs measured iteration time of vTrain's 1,440 GPT runs on one A100 node "
           "(a fifth fitted), MAPE and Spearman within each model";
  if (name == "vtrain-shapes")
    return "vTrain's runs not fitted by GEMM shape (hidden x TP x micro batch): signed error and "
           "the share of peak reached in hardware FLOPs, measured and predicted";
  if (name == "vtrain-extrapolation")
    return "vTrain's runs: the A100 constants fitted on the models of one hidden size, errors and "
           "rank correlation on the other hidden size's models, which the fit never saw";
  if (name == "nccl")
    return "measured NCCL all-reduce sweeps vs the collective model, its constants fitted on "
           "every fifth row (held-out MAPE by message size)";
  return "";
}

ValidationReport RunValidationReport(const std::string& name) {
  if (name == "megatron-h100")
    return ValidateMegatronH100(ReferenceDataPath("megatron_h100_weak_scaling_2024.csv"));
  if (name == "amp") return ValidateAmpTrials(ReferenceDataPath("amp_trials_homogeneous.csv"));
  if (name == "korthikanti")
    return ValidateKorthikanti(ReferenceDataPath("korthikanti_activation_memory_formulas.csv"),
                               ReferenceDataPath("korthikanti_table4_layer_times_22B.csv"));
  if (name == "zero") return ValidateZeroMemory(ReferenceDataPath("zero_memory.csv"));
  if (name == "alpa-point") return ValidateAlpaPoint(ReferenceDataPath("alpa_measured_points.csv"));
  if (name == "vtrain") return ValidateVtrain(ReferenceDataPath("vtrain_a100_single_node.csv"));
  if (name == "vtrain-shapes")
    return ValidateVtrainShapes(ReferenceDataPath("vtrain_a100_single_node.csv"));
  if (name == "vtrain-extrapolation")
    return ValidateVtrainExtrapolation(ReferenceDataPath("vtrain_a100_single_node.csv"));
  if (name == "nccl") return ValidateNcclSweeps(ReferenceDataPath("nccl_allreduce_sweeps.csv"));
  throw InputError(fmt::format("validate: report = {}: unknown (reports: {})", name,
                               fmt::join(ValidationReportNames(), ", ")));
}

}  // namespace stratos
