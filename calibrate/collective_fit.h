#pragma once
// Fitting the collective constants of the cost model (costmodel/collective.h) to profiled
// collective times. For one collective and a fixed inter-node algorithm the model is linear in
//   (launch, alpha_intra, 1 / bandwidth_intra, alpha_inter, 1 / bandwidth_inter[, c_intra,
//    c_inter])
// with the row's RingCollectiveTerms as regressors, so the fit is a relative-error least squares
// (calibrate/least_squares.h) with every coefficient >= 0. Which terms a profile can determine
// depends on its rows: without rows crossing nodes the inter-node pair is not fitted.
#include <optional>
#include <string>
#include <vector>

#include "calibrate/profile.h"
#include "costmodel/cluster.h"

namespace stratos {

// Why the collective model does not cover `row` ("" when it does): collectives the cost model
// does not price (all_to_all, send_recv), groups of one GPU (no communication in the model; a
// profiler then times a local copy), 0 bytes (a no-op).
std::string CollectiveRowExclusion(const CollectiveRow& row);

struct CollectiveFit {
  Collective kind = Collective::kAllReduce;
  InterNodeAlgorithm algorithm = InterNodeAlgorithm::kHierarchical;
  int ring_links_per_gpu = 0;  // the intra-node topology the fit assumed
  double launch_seconds = 0;
  std::optional<LinkFit> intra;  // nullopt: no fitted row used intra-node links
  std::optional<LinkFit> inter;  // nullopt: no fitted row crossed nodes
  int rows = 0;
  std::string note;  // what the fit had to give up, e.g. a launch cost it could not separate
};

// Fits `kind`'s constants to `rows` (all of that op and covered by the model), with
// `with_pipeline` also each level's pipelining coefficient (costmodel/collective.h). When the
// launch cost cannot be told apart from the per-step latencies (every row has the same group
// layout), it is fixed at 0 and `note` says so. Throws InputError naming the collective when
// there are too few rows, when other constants cannot be told apart, or when a bandwidth comes
// out unbounded (no bandwidth-bound rows).
CollectiveFit FitCollective(Collective kind, InterNodeAlgorithm algorithm, int ring_links_per_gpu,
                            const std::vector<CollectiveRow>& rows, bool with_pipeline = false);

// Writes `fit` into `cluster`: the network levels' collective_fits, ring_links_per_gpu of the
// intra-node level, and the collective's launch cost and algorithm. Throws InputError if the fit
// has an inter-node part but the cluster has a single network level.
void ApplyCollectiveFit(const CollectiveFit& fit, ClusterSpec& cluster);

// The cost model's time for `row` on `cluster` (CollectiveSeconds with the row's layout).
// Requires CollectiveRowExclusion(row) == "".
double PredictCollectiveSeconds(const ClusterSpec& cluster, const CollectiveRow& row);

}  // namespace stratos
