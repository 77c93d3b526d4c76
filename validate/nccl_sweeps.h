#pragma once
// Validation of the collective model (costmodel/collective.h) on measured all-reduce sweeps
// (../shared/data/reference/nccl_allreduce_sweeps.csv): the all-reduce constants (launch;
// latency, bandwidth and pipelining coefficient per network level) are fitted by
// calibrate/collective_fit.h on every fifth row of each sweep counting down from its largest
// message, and every row is predicted;
// errors are reported on the rows not fitted, over all sizes, from 1 MiB up, and below.
#include <string>
#include <vector>

#include "costmodel/cluster.h"
#include "validate/reference_tables.h"
#include "validate/report.h"

namespace stratos {

// Per row of `sweep` (one config's rows), whether it is fitted: every fifth row of the sweep
// sorted by size, starting at its largest message (the best-measured bandwidth). At most a fifth
// of each sweep, rounded up.
std::vector<bool> NcclFittedRows(const std::vector<NcclSweepRow>& sweep);

// Fits the all-reduce constants on `rows` (every one fitted) with the inter-node `algorithm`,
// with `with_pipeline` each level's pipelining coefficient too (costmodel/collective.h), and
// returns `base` (whose intra-node level is the first network level) with them applied.
// Throws InputError (calibrate/collective_fit.h) when the rows cannot tell the constants apart,
// e.g. a single group layout, whose intra- and inter-node terms add up alike.
ClusterSpec FitNcclSweeps(const ClusterSpec& base, InterNodeAlgorithm algorithm,
                          const std::vector<NcclSweepRow>& rows, bool with_pipeline);

// Forms fitted to one sweep alone on its `fitted` rows (relative least squares, coefficients
// >= 0): t = a + S / B (alpha-beta), or with `with_sqrt` t = a + S / B + c sqrt(S) (the cost
// model's collective within one group layout, pipelining term included: collective.h).
// Returns the predicted seconds of every row. Throws InputError when the fitted
// rows cannot determine the coefficients.
std::vector<double> FitSweepForm(const std::vector<NcclSweepRow>& sweep,
                                 const std::vector<bool>& fitted, bool with_sqrt);

// The report: per GPU type with sweeps of at least two node counts (a single layout cannot
// separate the intra- from the inter-node constants: listed, not scored), the fit above with the
// pipelining term on the zoo's `dgx-h100-datasheet` topology (8 GPUs per node on NVSwitch, one
// NIC level; NCCL's tree latency for the all-reduce across nodes, the cost model's default);
// per sweep, FitSweepForm's two forms beside it. Throws InputError for a malformed table, a
// sweep of other than 8 GPUs per node, or a table with nothing to score.
ValidationReport ValidateNcclSweeps(const std::string& reference_path);

}  // namespace stratos
