#include "validate/rank_correlation.h"

#include <algorithm>
#include <cmath>
#include <numeric>

#include "costmodel/error.h"

namespace stratos {

namespace {

void CheckPairs(const std::vector<double>& x, const std::vector<double>& y, const char* what) {
  if (x.size() != y.size())
    throw InputError(fmt::format("{}: {} values against {}: the samples must be paired", what,
                                 x.size(), y.size()));
  if (x.size() < 2)
    throw InputError(fmt::format("{}: {} pairs: needs at least 2", what, x.size()));
  for (size_t i = 0; i < x.size(); ++i)
    if (!std::isfinite(x[i]) || !std::isfinite(y[i]))
      throw InputError(fmt::format("{}: pair {} = ({}, {}): values must be finite", what, i, x[i],
                                   y[i]));
}

int Sign(double v) { return (v > 0) - (v < 0); }

}  // namespace

std::vector<double> AverageRanks(const std::vector<double>& values) {
  const size_t n = values.size();
  std::vector<size_t> order(n);
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(),
                   [&](size_t a, size_t b) { return values[a] < values[b]; });
  std::vector<double> ranks(n);
  for (size_t i = 0; i < n;) {
    size_t j = i;
    while (j + 1 < n && values[order[j + 1]] == values[order[i]]) ++j;
    const double mean_rank = 0.5 * (static_cast<double>(i) + static_cast<double>(j)) + 1.0;
    for (size_t k = i; k <= j; ++k) ranks[order[k]] = mean_rank;
    i = j + 1;
  }
  return ranks;
}

double SpearmanRho(const std::vector<double>& x, const std::vector<double>& y) {
  CheckPairs(x, y, "Spearman rho");
  const std::vector<double> rx = AverageRanks(x), ry = AverageRanks(y);
  const double n = static_cast<double>(x.size());
  const double mean = (n + 1.0) / 2.0;  // the mean of any fractional ranking of n items
  double sxy = 0.0, sxx = 0.0, syy = 0.0;
  for (size_t i = 0; i < x.size(); ++i) {
    sxy += (rx[i] - mean) * (ry[i] - mean);
    sxx += (rx[i] - mean) * (rx[i] - mean);
    syy += (ry[i] - mean) * (ry[i] - mean);
  }
  if (sxx == 0.0 || syy == 0.0)
    throw InputError("Spearman rho: one sample is constant: the correlation is undefined");
  return sxy / std::sqrt(sxx * syy);
}

double KendallTauB(const std::vector<double>& x, const std::vector<double>& y) {
  CheckPairs(x, y, "Kendall tau-b");
  const size_t n = x.size();
  double concordant_minus_discordant = 0.0, tied_x = 0.0, tied_y = 0.0;
  for (size_t i = 0; i < n; ++i) {
    for (size_t j = i + 1; j < n; ++j) {
      const int sx = Sign(x[i] - x[j]), sy = Sign(y[i] - y[j]);
      concordant_minus_discordant += sx * sy;
      tied_x += sx == 0;
      tied_y += sy == 0;
    }
  }
  const double pairs = 0.5 * static_cast<double>(n) * static_cast<double>(n - 1);
  if (tied_x == pairs || tied_y == pairs)
    throw InputError("Kendall tau-b: one sample is constant: the correlation is undefined");
  return concordant_minus_discordant / std::sqrt((pairs - tied_x) * (pairs - tied_y));
}

}  // namespace stratos
