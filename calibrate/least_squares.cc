#include "calibrate/least_squares.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <cmath>
#include <limits>

#include "costmodel/error.h"

namespace stratos {

ErrorStats RelativeErrors(const std::vector<double>& predicted,
                          const std::vector<double>& measured) {
  STRATOS_CHECK(predicted.size() == measured.size(), "{} predictions for {} measurements",
                predicted.size(), measured.size());
  ErrorStats stats;
  stats.rows = static_cast<int>(measured.size());
  if (measured.empty()) return stats;
  double sum = 0;
  double max = 0;
  for (size_t i = 0; i < measured.size(); ++i) {
    const double ape = std::abs(predicted[i] / measured[i] - 1.0);
    sum += ape;
    max = std::max(max, ape);
  }
  stats.mape = sum / static_cast<double>(measured.size());
  stats.max_ape = max;
  return stats;
}

Eigen::VectorXd FitRelativeLeastSquares(const Eigen::MatrixXd& A, const Eigen::VectorXd& y,
                                        const Eigen::VectorXd& lower,
                                        const std::vector<std::string>& column_names,
                                        const std::string& what) {
  const Eigen::Index rows = A.rows();
  const Eigen::Index cols = A.cols();
  STRATOS_CHECK(y.size() == rows && lower.size() == cols &&
                    static_cast<Eigen::Index>(column_names.size()) == cols,
                "{}: shapes A {}x{}, y {}, lower {}, names {}", what, rows, cols, y.size(),
                lower.size(), column_names.size());
  if (rows == 0) throw InputError(fmt::format("{}: no rows to fit", what));
  if (rows < cols) {
    throw InputError(fmt::format("{}: {} rows cannot determine {} coefficients ({})", what, rows,
                                 cols, fmt::join(column_names, ", ")));
  }
  for (Eigen::Index i = 0; i < rows; ++i) {
    if (!(y(i) > 0) || !std::isfinite(y(i))) {
      throw InputError(
          fmt::format("{}: row {}: measured value {} must be finite and > 0", what, i, y(i)));
    }
  }
  // Relative weighting: row i divided by y_i, so the target is 1 everywhere.
  Eigen::MatrixXd B = A.array().colwise() / y.array();
  const Eigen::VectorXd ones = Eigen::VectorXd::Ones(rows);
  // Unit-norm columns: the coefficients of a calibration span 15 orders of magnitude
  // (seconds per byte next to seconds per call).
  Eigen::VectorXd scale(cols);
  for (Eigen::Index j = 0; j < cols; ++j) {
    scale(j) = B.col(j).norm();
    if (!(scale(j) > 0) || !std::isfinite(scale(j))) {
      throw InputError(
          fmt::format("{}: coefficient '{}' cannot be fitted: its column is zero on "
                      "every row (the rows do not exercise it)",
                      what, column_names[j]));
    }
    B.col(j) /= scale(j);
  }
  const Eigen::VectorXd scaled_lower = lower.cwiseProduct(scale);

  std::vector<Eigen::Index> bounded;
  for (Eigen::Index j = 0; j < cols; ++j) {
    if (std::isfinite(lower(j))) bounded.push_back(j);
  }
  STRATOS_CHECK(bounded.size() <= 12, "{}: {} bounded coefficients", what, bounded.size());

  double best_objective = std::numeric_limits<double>::infinity();
  Eigen::VectorXd best;
  for (unsigned mask = 0; mask < (1u << bounded.size()); ++mask) {
    // Coefficients fixed at their bound on this face, the others free.
    std::vector<bool> fixed(cols, false);
    for (size_t b = 0; b < bounded.size(); ++b) fixed[bounded[b]] = (mask >> b) & 1u;
    std::vector<Eigen::Index> free;
    Eigen::VectorXd z = Eigen::VectorXd::Zero(cols);
    Eigen::VectorXd target = ones;
    for (Eigen::Index j = 0; j < cols; ++j) {
      if (fixed[j]) {
        z(j) = scaled_lower(j);
        target -= B.col(j) * z(j);
      } else {
        free.push_back(j);
      }
    }
    if (!free.empty()) {
      Eigen::MatrixXd F(rows, static_cast<Eigen::Index>(free.size()));
      for (size_t f = 0; f < free.size(); ++f) F.col(f) = B.col(free[f]);
      Eigen::ColPivHouseholderQR<Eigen::MatrixXd> qr(F);
      qr.setThreshold(1e-12);
      if (qr.rank() < F.cols()) {
        if (mask != 0) continue;
        std::vector<std::string> dependent;
        for (Eigen::Index r = qr.rank(); r < F.cols(); ++r) {
          dependent.push_back(column_names[free[qr.colsPermutation().indices()(r)]]);
        }
        throw InputError(fmt::format(
            "{}: coefficients {} cannot be told apart from the others on these rows (rank {} of "
            "{}); profile more shapes or sizes",
            what, fmt::join(dependent, ", "), qr.rank(), F.cols()));
      }
      const Eigen::VectorXd solution = qr.solve(target);
      bool feasible = true;
      for (size_t f = 0; f < free.size(); ++f) {
        const Eigen::Index j = free[f];
        if (solution(f) < scaled_lower(j)) feasible = false;
        z(j) = solution(f);
      }
      if (!feasible) continue;
    }
    const double objective = (B * z - ones).squaredNorm();
    if (objective < best_objective) {
      best_objective = objective;
      best = z;
    }
    if (mask == 0) break;  // the unconstrained optimum is feasible: it is the answer
  }
  STRATOS_CHECK(best.size() == cols, "{}: no feasible face", what);
  return best.cwiseQuotient(scale);
}

}  // namespace stratos
