#pragma once
// Rank correlation of two paired samples, for "does the cost model order plans like the
// measurements do" (AMP, Li et al. NeurIPS'22, reports the same for its own cost model).
#include <vector>

namespace stratos {

// 1-based ranks with ties given the mean of the ranks they span ("fractional ranking"):
// {10, 20, 20, 30} -> {1, 2.5, 2.5, 4}.
std::vector<double> AverageRanks(const std::vector<double>& values);

// Spearman's rho: the Pearson correlation of the average ranks, which is the tie-corrected
// coefficient (Kendall & Gibbons, "Rank Correlation Methods", 5th ed., §3.8). In [-1, 1].
// Throws InputError if the sizes differ, fewer than 2 pairs are given, a value is not finite,
// or one sample is constant (rho undefined).
double SpearmanRho(const std::vector<double>& x, const std::vector<double>& y);

// Kendall's tau-b: (concordant - discordant) / sqrt((n0 - tx) (n0 - ty)), n0 = n(n-1)/2,
// tx and ty the pairs tied in x and in y (Kendall 1945, "The treatment of ties in ranking
// problems"); equals tau-a without ties. O(n^2). In [-1, 1]. Throws as SpearmanRho.
double KendallTauB(const std::vector<double>& x, const std::vector<double>& y);

}  // namespace stratos
