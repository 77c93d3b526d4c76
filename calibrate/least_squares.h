#pragma once
// Least squares that minimise RELATIVE error, with lower bounds on the coefficients, and the
// error figures every calibration reports (DESIGN.md §5: "report fit error on held-out rows,
// never only on the rows fitted").
#include <Eigen/Dense>

#include <limits>
#include <string>
#include <vector>

namespace stratos {

// Mean and maximum absolute percentage error of `rows` predictions; fractions (0.05 = 5%).
// NaN when rows == 0.
struct ErrorStats {
  int rows = 0;
  double mape = std::numeric_limits<double>::quiet_NaN();     // mean |predicted / measured - 1|
  double max_ape = std::numeric_limits<double>::quiet_NaN();  // max  |predicted / measured - 1|
};

// Errors of predicted[i] against measured[i] (> 0). Throws InternalError on size mismatch.
ErrorStats RelativeErrors(const std::vector<double>& predicted,
                          const std::vector<double>& measured);

// The coefficients x minimising sum_i ((A x - y)_i / y_i)^2 subject to x_j >= lower[j]
// (-infinity: unbounded): each row is divided by its measurement, so a 10 us collective and a
// 1 s one weigh the same, and the fit minimises relative error (rows (A_i / y_i) x ~ 1).
// Columns are scaled to unit norm before Eigen's ColPivHouseholderQR. The bounds are handled
// exactly by trying every face of the box (the fixed-at-bound subsets of bounded columns) and
// keeping the best feasible least-squares solution, which is the constrained optimum of this
// convex problem; fine for the few (<= 12) columns of a calibration.
// Throws InputError "<what>: ..." when there are no rows, fewer rows than columns, a
// measurement <= 0 or not finite, or a column cannot be identified from the rows (all zero, or
// linearly dependent on others: the message names it from `column_names`).
Eigen::VectorXd FitRelativeLeastSquares(const Eigen::MatrixXd& A, const Eigen::VectorXd& y,
                                        const Eigen::VectorXd& lower,
                                        const std::vector<std::string>& column_names,
                                        const std::string& what);

}  // namespace stratos
