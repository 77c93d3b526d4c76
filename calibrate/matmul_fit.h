#pragma once
// Fitting the GEMM efficiency curve of a device (cluster.h MatmulCurve) to profiled matmul
// times. With a = 1 / (peak * max_efficiency), b = a * half_efficiency_dim and
// c = overhead_seconds, one GEMM takes
//   t = a * F + b * F / min(m, n, k) + c,      F = 2 m n k,
// which is linear in (a, b, c): a relative-error least squares (calibrate/least_squares.h) with
// a >= 1 / peak (efficiency <= 1), b >= 0, c >= 0. Three nested forms are tried:
//   overhead             b = 0   (peak share constant, fixed cost per GEMM)
//   saturating           c = 0   (share of peak saturating in the smallest dimension)
//   saturating+overhead  all three
// and ChooseMatmulCurve picks one by leave-one-out cross-validation on the fitted rows only,
// so held-out rows never influence the choice.
#include <string>
#include <utility>
#include <vector>

#include "calibrate/profile.h"
#include "costmodel/cluster.h"

namespace stratos {

enum class MatmulModel { kOverhead, kSaturating, kSaturatingOverhead };
const char* MatmulModelName(MatmulModel model);  // "overhead" | "saturating" | ...

struct MatmulFit {
  MatmulModel model = MatmulModel::kSaturatingOverhead;
  MatmulCurve curve;
  int rows = 0;
};

// Fits `model` to `rows` on a device of `peak_flops` FLOP/s. Throws InputError when the rows
// cannot determine the model's coefficients (too few rows or sizes).
MatmulFit FitMatmulCurve(MatmulModel model, const std::vector<MatmulRow>& rows, double peak_flops);

struct MatmulChoice {
  MatmulFit fit;  // the chosen model, fitted on all rows
  // Leave-one-out MAPE (fraction) of every model that could be fitted, in MatmulModel order.
  std::vector<std::pair<MatmulModel, double>> cross_validation_mape;
};

// Fits each model, estimates its error by leave-one-out cross-validation over `rows`, and keeps
// the one with the lowest. Throws InputError if no model can be fitted.
MatmulChoice ChooseMatmulCurve(const std::vector<MatmulRow>& rows, double peak_flops);

// The cost model's time for `row` under `curve` (costmodel/matmul_efficiency.h MatmulSeconds).
double PredictMatmulSeconds(const MatmulCurve& curve, double peak_flops, const MatmulRow& row);

}  // namespace stratos
