#pragma once
// The inner loop of the stage DPs over free devices (baselines/dp_searcher.cc, Alpa's DP, and
// relax/smoothed_dp.cc, SmoothedStageDp::DecodeWithinDevices): one min-plus row update.

namespace stratos {

// out[k] = min(out[k], in[k] + add) for k in [0, count); out and in must not overlap. Units are
// the caller's (seconds in both DPs). Vectorized, with an AVX2 clone chosen at load time on
// x86-64. Throws nothing.
void MinPlusInto(double* __restrict out, const double* __restrict in, double add, int count);

}  // namespace stratos
