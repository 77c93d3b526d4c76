#include "calibrate/matmul_fit.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <limits>

#include "calibrate/least_squares.h"
#include "costmodel/error.h"
#include "costmodel/matmul_efficiency.h"

namespace stratos {

namespace {

GemmShape ShapeOf(const MatmulRow& row) {
  return GemmShape{static_cast<double>(row.m), static_cast<double>(row.n),
                   static_cast<double>(row.k)};
}

}  // namespace

const char* MatmulModelName(MatmulModel model) {
  switch (model) {
    case MatmulModel::kOverhead:
      return "overhead";
    case MatmulModel::kSaturating:
      return "saturating";
    case MatmulModel::kSaturatingOverhead:
      return "saturating+overhead";
  }
  return "unknown";
}

MatmulFit FitMatmulCurve(MatmulModel model, const std::vector<MatmulRow>& rows, double peak_flops) {
  STRATOS_CHECK(peak_flops > 0, "peak {}", peak_flops);
  const bool saturating = model != MatmulModel::kOverhead;
  const bool overhead = model != MatmulModel::kSaturating;
  const Eigen::Index cols = 1 + (saturating ? 1 : 0) + (overhead ? 1 : 0);
  Eigen::MatrixXd A(static_cast<Eigen::Index>(rows.size()), cols);
  Eigen::VectorXd seconds(static_cast<Eigen::Index>(rows.size()));
  std::vector<std::string> names = {"1 / (peak x max_efficiency)"};
  if (saturating) names.push_back("half_efficiency_dim");
  if (overhead) names.push_back("overhead");
  for (size_t i = 0; i < rows.size(); ++i) {
    const GemmShape shape = ShapeOf(rows[i]);
    const double flops = shape.Flops();
    Eigen::Index c = 0;
    const Eigen::Index r = static_cast<Eigen::Index>(i);
    A(r, c++) = flops;
    if (saturating) A(r, c++) = flops / std::min({shape.m, shape.n, shape.k});
    if (overhead) A(r, c++) = 1.0;
    seconds(r) = rows[i].seconds;
  }
  Eigen::VectorXd lower = Eigen::VectorXd::Zero(cols);
  lower(0) = 1.0 / peak_flops;  // max_efficiency <= 1
  const Eigen::VectorXd x = FitRelativeLeastSquares(
      A, seconds, lower, names, fmt::format("matmul fit ({})", MatmulModelName(model)));
  MatmulFit fit;
  fit.model = model;
  fit.rows = static_cast<int>(rows.size());
  fit.curve.max_efficiency = std::min(1.0, 1.0 / (x(0) * peak_flops));
  Eigen::Index c = 1;
  if (saturating) fit.curve.half_efficiency_dim = x(c++) / x(0);
  if (overhead) fit.curve.overhead_seconds = x(c++);
  return fit;
}

MatmulChoice ChooseMatmulCurve(const std::vector<MatmulRow>& rows, double peak_flops) {
  MatmulChoice choice;
  double best = std::numeric_limits<double>::infinity();
  std::string reasons;
  for (MatmulModel model :
       {MatmulModel::kOverhead, MatmulModel::kSaturating, MatmulModel::kSaturatingOverhead}) {
    try {
      double sum = 0;
      for (size_t left_out = 0; left_out < rows.size(); ++left_out) {
        std::vector<MatmulRow> others = rows;
        others.erase(others.begin() + static_cast<std::ptrdiff_t>(left_out));
        const MatmulFit fit = FitMatmulCurve(model, others, peak_flops);
        const double predicted = PredictMatmulSeconds(fit.curve, peak_flops, rows[left_out]);
        sum += std::abs(predicted / rows[left_out].seconds - 1.0);
      }
      const double mape = sum / static_cast<double>(rows.size());
      choice.cross_validation_mape.emplace_back(model, mape);
      if (mape < best) {
        best = mape;
        choice.fit = FitMatmulCurve(model, rows, peak_flops);
      }
    } catch (const InputError& error) {
      reasons += fmt::format("; {}", error.what());
    }
  }
  if (choice.cross_validation_mape.empty()) {
    throw InputError(
        fmt::format("matmul fit: no model can be fitted to {} rows{}", rows.size(), reasons));
  }
  return choice;
}

double PredictMatmulSeconds(const MatmulCurve& curve, double peak_flops, const MatmulRow& row) {
  return MatmulSeconds(curve, peak_flops, ShapeOf(row));
}

}  // namespace stratos
