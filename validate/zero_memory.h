#pragma once
// `stratos validate zero`: per-GPU model-state bytes of ZeRO stages 0-3 against Rajbhandari et
// al., "ZeRO: Memory Optimizations Toward Training Trillion Parameter Models" (SC'20), §5.1 and
// Figure 1.
#include <string>

#include "validate/reference_tables.h"
#include "validate/report.h"

namespace stratos {

// Our state_bytes per GPU for `psi` parameters under ZeRO `zero_stage` over `nd` data-parallel
// GPUs with K = `k` optimizer bytes per parameter (fp16 parameters and gradients): one explicit
// layer holding all parameters, priced by CostModel::LayerTerms.
double OurZeroStateBytes(double psi, int nd, int zero_stage, double k);

// The paper's formula: (2 + 2 + K) Psi; 2 Psi + 2 Psi + K Psi / Nd; 2 Psi + (2 + K) Psi / Nd;
// (2 + 2 + K) Psi / Nd for stages 0-3.
double ZeroFormulaBytes(double psi, int nd, int zero_stage, double k);

// Half a unit of the last digit of a printed number: "31.4" -> 0.05, "4012" -> 0.5,
// "1.6e+04" -> 500. A value agrees with the print "up to rounding" within it.
double RoundingHalfUnit(const std::string& printed);

ValidationReport ValidateZeroMemory(const std::string& reference_path);

}  // namespace stratos
