#pragma once
// Small descriptive statistics shared by the reports and the fits.
#include <algorithm>
#include <cmath>
#include <vector>

namespace stratos {

// The median of `values` (the mean of the two middle ones for an even count); NaN when empty.
inline double Median(std::vector<double> values) {
  if (values.empty()) return NAN;
  std::sort(values.begin(), values.end());
  const size_t n = values.size();
  return n % 2 == 1 ? values[n / 2] : 0.5 * (values[n / 2 - 1] + values[n / 2]);
}

}  // namespace stratos
