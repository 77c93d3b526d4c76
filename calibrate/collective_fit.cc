#include "calibrate/collective_fit.h"

#include <fmt/format.h>

#include <cmath>
#include <limits>

#include "calibrate/least_squares.h"
#include "costmodel/collective.h"
#include "costmodel/error.h"

namespace stratos {

namespace {

// Regressor columns, in the order of CollectiveTerms.
enum Column {
  kLaunch,
  kIntraAlpha,
  kIntraBeta,
  kInterAlpha,
  kInterBeta,
  kIntraPipeline,
  kInterPipeline,
  kColumns
};
constexpr const char* kColumnNames[kColumns] = {
    "launch",               "intra-node latency",    "intra-node bandwidth",
    "inter-node latency",   "inter-node bandwidth",  "intra-node pipelining",
    "inter-node pipelining"};

}  // namespace

std::string CollectiveRowExclusion(const CollectiveRow& row) {
  if (!row.Kind()) return fmt::format("{}: not priced by the cost model", row.op);
  if (row.group_size == 1) return "group of 1 GPU: no communication in the model";
  if (row.bytes <= 0) return "0 bytes: a no-op";
  return "";
}

CollectiveFit FitCollective(Collective kind, InterNodeAlgorithm algorithm, int ring_links_per_gpu,
                            const std::vector<CollectiveRow>& rows, bool with_pipeline) {
  const std::string what = fmt::format("fit of {}", CollectiveName(kind));
  Eigen::MatrixXd terms(static_cast<Eigen::Index>(rows.size()), kColumns);
  Eigen::VectorXd seconds(static_cast<Eigen::Index>(rows.size()));
  for (size_t i = 0; i < rows.size(); ++i) {
    const CollectiveRow& row = rows[i];
    STRATOS_CHECK(row.Kind() == kind && CollectiveRowExclusion(row).empty(), "{}: row {} {}", what,
                  i, row.op);
    const CollectiveTerms t = RingCollectiveTerms(kind, algorithm, row.bytes, row.Layout(),
                                                  ring_links_per_gpu, /*with_latency=*/true);
    terms.row(static_cast<Eigen::Index>(i)) << t.launches, t.intra_steps, t.intra_link_bytes,
        t.inter_steps, t.inter_node_bytes, t.intra_pipeline, t.inter_pipeline;
    seconds(static_cast<Eigen::Index>(i)) = row.seconds;
  }
  // Levels no row exercises are left out of the fit (and stay uncalibrated).
  // The pipelining columns only where asked for.
  std::vector<int> used;
  for (int c = 0; c < kColumns; ++c) {
    if (!with_pipeline && (c == kIntraPipeline || c == kInterPipeline)) continue;
    if (rows.empty() || terms.col(c).cwiseAbs().maxCoeff() > 0) used.push_back(c);
  }
  double coefficient[kColumns] = {};
  bool fitted[kColumns] = {};
  auto solve = [&](const std::vector<int>& columns) {
    Eigen::MatrixXd A(terms.rows(), static_cast<Eigen::Index>(columns.size()));
    std::vector<std::string> names;
    for (size_t j = 0; j < columns.size(); ++j) {
      A.col(static_cast<Eigen::Index>(j)) = terms.col(columns[j]);
      names.push_back(kColumnNames[columns[j]]);
    }
    const Eigen::VectorXd lower = Eigen::VectorXd::Zero(A.cols());
    const Eigen::VectorXd x = FitRelativeLeastSquares(A, seconds, lower, names, what);
    for (size_t j = 0; j < columns.size(); ++j) {
      coefficient[columns[j]] = x(static_cast<Eigen::Index>(j));
      fitted[columns[j]] = true;
    }
  };
  std::string note;
  try {
    solve(used);
  } catch (const InputError& first) {
    // One group layout only: a launch cost and per-step latencies add up to the same constant.
    std::vector<int> without_launch;
    for (int c : used) {
      if (c != kLaunch) without_launch.push_back(c);
    }
    if (without_launch.size() == used.size()) throw;
    solve(without_launch);
    note = fmt::format("launch cost fixed at 0: {}", first.what());
  }

  CollectiveFit fit;
  fit.note = note;
  fit.kind = kind;
  fit.algorithm = algorithm;
  fit.ring_links_per_gpu = ring_links_per_gpu;
  fit.launch_seconds = coefficient[kLaunch];
  fit.rows = static_cast<int>(rows.size());
  auto level = [&](Column alpha, Column beta, Column pipeline,
                   const char* name) -> std::optional<LinkFit> {
    if (!fitted[beta]) return std::nullopt;
    if (!(coefficient[beta] > 0)) {
      throw InputError(
          fmt::format("{}: the {} bandwidth comes out unbounded (no row is limited "
                      "by it); profile larger messages",
                      what, name));
    }
    return LinkFit{1.0 / coefficient[beta], coefficient[alpha], coefficient[pipeline]};
  };
  fit.intra = level(kIntraAlpha, kIntraBeta, kIntraPipeline, "intra-node");
  fit.inter = level(kInterAlpha, kInterBeta, kInterPipeline, "inter-node");
  return fit;
}

void ApplyCollectiveFit(const CollectiveFit& fit, ClusterSpec& cluster) {
  const int index = static_cast<int>(fit.kind);
  STRATOS_CHECK(!cluster.networks.empty(), "cluster {} has no network level", cluster.name);
  cluster.networks[0].ring_links_per_gpu = fit.ring_links_per_gpu;
  if (fit.intra) cluster.networks[0].collective_fits[index] = *fit.intra;
  if (fit.inter) {
    if (cluster.networks.size() < 2) {
      throw InputError(fmt::format(
          "{}: the profile has {} rows crossing nodes, but the cluster "
          "has no inter-node network level ([[network]] #2)",
          cluster.source.empty() ? cluster.name : cluster.source, CollectiveName(fit.kind)));
    }
    cluster.networks[1].collective_fits[index] = *fit.inter;
  }
  cluster.collectives[index].launch_seconds = fit.launch_seconds;
  cluster.collectives[index].inter_node_algorithm = fit.algorithm;
}

double PredictCollectiveSeconds(const ClusterSpec& cluster, const CollectiveRow& row) {
  const std::optional<Collective> kind = row.Kind();
  STRATOS_CHECK(kind.has_value(), "collective {} is not priced", row.op);
  return CollectiveSeconds(cluster, *kind, row.bytes, row.Layout(), /*with_latency=*/true);
}

}  // namespace stratos
