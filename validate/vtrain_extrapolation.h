#pragma once
// `stratos validate vtrain-extrapolation`: does the A100 calibration carry over to models it
// never saw? The vtrain report (validate/vtrain.h) fits on every fifth row of the whole table, so
// every model is among the rows fitted. Here the same constants (the GEMM curve's knee and the
// block floors, FitVtrainConstants' shipped form) are fitted on the models of ONE hidden size and
// checked on the models of every other: the extrapolation in GEMM shape that a planner makes for
// models larger (or smaller) than those it was calibrated on, and that the MFU target of GPT-3
// 6.7B (hidden 4,096, beyond vTrain's largest 2,048) rests on.
#include <string>
#include <vector>

#include "validate/reference_tables.h"
#include "validate/report.h"

namespace stratos {

// The rows fitted when only the models of `hidden_size` are fitted on: those of
// VtrainCalibrationRows (every fifth row of the file) whose hidden size is `hidden_size`.
// Indices into `rows`, ascending; empty when no model has that hidden size.
std::vector<size_t> VtrainCalibrationRowsOfHidden(const std::vector<VtrainRow>& rows,
                                                  int hidden_size);

// For each hidden size H of the table (at least two are needed), the constants fitted on
// VtrainCalibrationRowsOfHidden(rows, H) and, for every model, the MAPE, mean signed error
// (predicted / measured - 1: negative is too fast), Spearman and Kendall rank correlations of the
// rows not fitted (for a model of another hidden size: all its rows), beside the shipped zoo
// file's MAPE on the same rows (the fit on every hidden size, stratos calibrate --vtrain-csv).
// The summary has, per fitted hidden size, the fitted constants and the figures over the models
// of the other hidden sizes. Throws InputError for an unreadable or malformed table or one with a
// single hidden size.
ValidationReport ValidateVtrainExtrapolation(const std::string& reference_path);

}  // namespace stratos
