#pragma once
// `stratos validate vtrain-shapes`: where the cost model misses vTrain's single-node A100 runs
// (validate/vtrain.h), by GEMM shape. The rows the vtrain report does not fit are grouped by
// hidden size, TP and micro batch (what sets a block's GEMM shapes on one GPU: tokens = micro
// batch x sequence against hidden / TP), and each group gets its signed and absolute errors and
// the share of peak that its runs reach in hardware FLOPs (measured and predicted), so that the
// shapes the device constants extrapolate to can be read off: the figure the MFU target of
// GPT-3 6.7B rests on (its GEMMs are larger than any of vTrain's).
#include <string>

#include "costmodel/evaluate.h"
#include "costmodel/plan.h"
#include "validate/report.h"
#include "validate/vtrain.h"

namespace stratos {

// Hardware FLOPs of one iteration of `plan` whose Evaluate() is `estimate`, recomputation
// included: the sum over pipeline ranks of microbatches x the rank's hardware FLOPs per
// microbatch and device (StageTerms::hardware_flops) x its devices. FLOPs. Throws InternalError
// when the estimate has fewer stages than the plan's pipeline ranks.
double IterationHardwareFlops(const Plan& plan, const Estimate& estimate);

// The rows of `reference_path` that VtrainCalibrationRows leaves out, priced on the zoo's
// shipped A100 (kVtrainShippedCluster, its constants as the file gives them: no refit), one
// table row per (hidden size, TP, micro batch) with: rows, mean signed error of the iteration
// time (percent, predicted / measured - 1), MAPE, and the mean share of the device's peak in
// hardware FLOPs over the group's runs, measured (IterationHardwareFlops / (measured seconds x
// GPUs x peak)) and predicted. The summary names the group with the largest per-GPU GEMMs
// (micro batch x hidden / TP largest, then hidden) and the groups predicted most too fast and
// most too slow. Throws InputError for an unreadable or malformed table.
ValidationReport ValidateVtrainShapes(const std::string& reference_path);

}  // namespace stratos
