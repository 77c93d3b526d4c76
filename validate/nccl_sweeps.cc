#include "validate/nccl_sweeps.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <cmath>
#include <map>
#include <numeric>

#include "calibrate/collective_fit.h"
#include "calibrate/least_squares.h"
#include "calibrate/profile.h"
#include "costmodel/collective.h"
#include "costmodel/error.h"
#include "validate/builders.h"

namespace stratos {

namespace {

constexpr double kMiB = 1024.0 * 1024.0;
constexpr const char* kBase = "dgx-h100-datasheet";

CollectiveRow ToCollectiveRow(const NcclSweepRow& row) {
  CollectiveRow r;
  r.op = "all_reduce";
  r.dtype = "f32";  // nccl-tests' default; the sweeps do not say, and the fit ignores it
  r.nodes = row.nodes;
  r.gpus_per_node = row.gpus_per_node;
  r.group_size = row.nodes * row.gpus_per_node;
  r.num_groups = 1;
  r.crosses_nodes = row.nodes > 1;
  r.bytes = row.size_bytes;
  r.seconds = row.seconds;
  return r;
}

// MAPE in percent over the rows `keep` selects (RelativeErrors); NaN when it selects none.
template <typename Keep>
double Mape(const std::vector<double>& predicted, const std::vector<NcclSweepRow>& rows,
            Keep keep) {
  std::vector<double> kept, measured;
  for (size_t i = 0; i < rows.size(); ++i) {
    if (!keep(i)) continue;
    kept.push_back(predicted[i]);
    measured.push_back(rows[i].seconds);
  }
  return 100.0 * RelativeErrors(kept, measured).mape;
}

nlohmann::json Number(double value) {
  return std::isfinite(value) ? nlohmann::json(value) : nlohmann::json(nullptr);
}

nlohmann::json FitJson(const ClusterSpec& cluster) {
  const int index = static_cast<int>(Collective::kAllReduce);
  nlohmann::json out = {{"launch_us", cluster.collectives[index].launch_seconds * 1e6}};
  const char* names[2] = {"intra_node", "inter_node"};
  for (size_t level = 0; level < 2 && level < cluster.networks.size(); ++level) {
    const auto& fit = cluster.networks[level].collective_fits[index];
    if (fit)
      out[names[level]] = {{"latency_us", fit->latency_seconds * 1e6},
                           {"bandwidth_GBps", fit->bandwidth_bytes_per_second / 1e9},
                           {"pipeline_us_per_sqrt_MB",
                            fit->pipeline_seconds_per_sqrt_byte / LinkFit::kUsPerSqrtMB}};
  }
  return out;
}

}  // namespace

std::vector<double> FitSweepForm(const std::vector<NcclSweepRow>& sweep,
                                 const std::vector<bool>& fitted, bool with_sqrt) {
  const auto regressors = [&](double bytes) {
    std::vector<double> r = {1.0, bytes};
    if (with_sqrt) r.push_back(std::sqrt(bytes));
    return r;
  };
  const int columns = with_sqrt ? 3 : 2;
  const auto count = std::count(fitted.begin(), fitted.end(), true);
  Eigen::MatrixXd A(count, columns);
  Eigen::VectorXd y(count);
  Eigen::Index row = 0;
  for (size_t i = 0; i < sweep.size(); ++i) {
    if (!fitted[i]) continue;
    const std::vector<double> r = regressors(sweep[i].size_bytes);
    for (int c = 0; c < columns; ++c) A(row, c) = r[c];
    y(row++) = sweep[i].seconds;
  }
  std::vector<std::string> names = {"latency", "1 / bandwidth"};
  if (with_sqrt) names.push_back("pipelining");
  const Eigen::VectorXd x = FitRelativeLeastSquares(
      A, y, Eigen::VectorXd::Zero(columns), names,
      fmt::format("fit of the sweep {}", sweep.empty() ? "" : sweep.front().config));
  std::vector<double> predicted;
  for (const NcclSweepRow& one : sweep) {
    const std::vector<double> r = regressors(one.size_bytes);
    double t = 0;
    for (int c = 0; c < columns; ++c) t += x(c) * r[c];
    predicted.push_back(t);
  }
  return predicted;
}

std::vector<bool> NcclFittedRows(const std::vector<NcclSweepRow>& sweep) {
  std::vector<size_t> order(sweep.size());
  std::iota(order.begin(), order.end(), size_t{0});
  std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) {
    return sweep[a].size_bytes > sweep[b].size_bytes;
  });
  std::vector<bool> fitted(sweep.size(), false);
  for (size_t rank = 0; rank < order.size(); rank += 5) fitted[order[rank]] = true;
  return fitted;
}

ClusterSpec FitNcclSweeps(const ClusterSpec& base, InterNodeAlgorithm algorithm,
                          const std::vector<NcclSweepRow>& rows, bool with_pipeline) {
  std::vector<CollectiveRow> collective_rows;
  for (const NcclSweepRow& row : rows) collective_rows.push_back(ToCollectiveRow(row));
  STRATOS_CHECK(!base.networks.empty(), "cluster {} has no network level", base.name);
  const CollectiveFit fit =
      FitCollective(Collective::kAllReduce, algorithm, base.networks[0].ring_links_per_gpu,
                    collective_rows, with_pipeline);
  ClusterSpec cluster = base;
  ApplyCollectiveFit(fit, cluster);
  return cluster;
}

ValidationReport ValidateNcclSweeps(const std::string& reference_path) {
  const std::vector<NcclSweepRow> all = ReadNcclSweeps(reference_path);
  // Sweeps (configs) in file order, and the configs of each GPU type.
  std::vector<std::string> configs, gpus;
  std::map<std::string, std::vector<std::string>> configs_of;
  std::map<std::string, std::vector<NcclSweepRow>> sweep_of;
  for (const NcclSweepRow& row : all) {
    if (sweep_of[row.config].empty()) {
      configs.push_back(row.config);
      if (configs_of[row.gpu].empty()) gpus.push_back(row.gpu);
      configs_of[row.gpu].push_back(row.config);
    }
    sweep_of[row.config].push_back(row);
  }

  ValidationReport report;
  report.name = "nccl";
  report.title =
      "NCCL all-reduce sweeps (nccl_allreduce_sweeps.csv): the collective model's time per call "
      "vs measured, its constants fitted on every fifth row of each sweep";
  report.columns = {{"config", "config", 0},
                    {"size_bytes", "bytes", 0},
                    {"fitted", "fitted", 0},
                    {"monotone", "monotone", 0},
                    {"measured_us", "measured us", 1},
                    {"predicted_us", "model us", 1},
                    {"error_pct", "model err %", 1},
                    {"alpha_beta_error_pct", "a-b err %", 1},
                    {"pipelined_error_pct", "a-b-sqrt err %", 1}};
  report.assumptions = {
      "Fitted rows: every fifth row of each sweep sorted by message size, counting down from its "
      "largest message (the sweep's best-measured bandwidth); errors are on the other rows.",
      fmt::format(
          "model: the cost model's all-reduce (costmodel/collective.h) on the zoo's {} topology "
          "(8 GPUs per node on NVSwitch, one NIC level), its launch cost and the latency per "
          "step, bandwidth and pipelining coefficient of each network level fitted by "
          "calibrate/collective_fit.h on the fitted rows of every sweep of one GPU type "
          "together (relative least squares, all >= 0; a launch cost the layouts cannot tell "
          "apart from the intra-node latency is fixed at 0). A GPU type swept at one node count "
          "is not scored by it: one group layout cannot separate the intra- from the inter-node "
          "constants.",
          kBase),
      "Across nodes the model charges NCCL's tree latency (2 floor(log2 k) inter-node steps); "
      "a flat ring (2 (k - 1)) gives the same predictions here: with one multi-node count per "
      "GPU type the fitted inter-node latency absorbs the step count.",
      "Fitted to each sweep alone on the same rows: a-b, t = a + S / B (the model without its "
      "pipelining term, calibrate --no-pipelining, within one layout); a-b-sqrt, t = a + S / B "
      "+ c sqrt(S) (the model within one layout: its pipelining regressor sqrt(steps x bytes) is "
      "proportional to sqrt(S) there).",
      "Rows given as bus bandwidth only are times size / busbw x 2 (n - 1) / n (nccl-tests' "
      "definition); monotone = no larger message of the sweep took less time (a row that is "
      "not is a measurement artefact such as a warm-up; kept in the MAPE over all sizes)."};

  // Per row: the model's prediction (NaN where its GPU type is not scored), the two forms'.
  std::map<std::string, std::vector<double>> model_of, alpha_beta_of, pipelined_of;
  std::map<std::string, std::vector<bool>> fitted_of, monotone_of;
  for (const std::string& config : configs) {
    const std::vector<NcclSweepRow>& sweep = sweep_of[config];
    fitted_of[config] = NcclFittedRows(sweep);
    for (const NcclSweepRow& row : sweep) {
      bool monotone = true;
      for (const NcclSweepRow& other : sweep)
        monotone &= !(other.size_bytes > row.size_bytes && other.seconds < row.seconds);
      monotone_of[config].push_back(monotone);
    }
    alpha_beta_of[config] = FitSweepForm(sweep, fitted_of[config], false);
    pipelined_of[config] = FitSweepForm(sweep, fitted_of[config], true);
    model_of[config].assign(sweep.size(), std::nan(""));
  }
  nlohmann::json types = nlohmann::json::array();
  for (const std::string& gpu : gpus) {
    std::vector<NcclSweepRow> fitted_rows;
    const int first_nodes = sweep_of[configs_of[gpu].front()].front().nodes;
    int max_nodes = 1;
    bool several_layouts = false;
    for (const std::string& config : configs_of[gpu]) {
      const std::vector<NcclSweepRow>& sweep = sweep_of[config];
      // The config fixes a sweep's layout: its first row stands for all.
      if (sweep.front().gpus_per_node != 8)
        throw InputError(fmt::format("{}:{}: config = \"{}\": must have 8 GPUs per node (the "
                                     "topology of {})",
                                     reference_path, sweep.front().line, config, kBase));
      max_nodes = std::max(max_nodes, sweep.front().nodes);
      several_layouts |= sweep.front().nodes != first_nodes;
      for (size_t i = 0; i < sweep.size(); ++i)
        if (fitted_of[config][i]) fitted_rows.push_back(sweep[i]);
    }
    if (!several_layouts) {
      types.push_back({{"gpu", gpu},
                       {"configs", configs_of[gpu]},
                       {"scored", false},
                       {"reason", "one node count: intra- and inter-node constants not "
                                  "separable"}});
      continue;
    }
    const ClusterSpec fit = FitNcclSweeps(ZooCluster(kBase, max_nodes),
                                          InterNodeAlgorithm::kHierarchical, fitted_rows, true);
    for (const std::string& config : configs_of[gpu]) {
      const std::vector<NcclSweepRow>& sweep = sweep_of[config];
      for (size_t i = 0; i < sweep.size(); ++i)
        model_of[config][i] = PredictCollectiveSeconds(fit, ToCollectiveRow(sweep[i]));
    }
    types.push_back({{"gpu", gpu},
                     {"configs", configs_of[gpu]},
                     {"scored", true},
                     {"fitted_rows", fitted_rows.size()},
                     {"fit", FitJson(fit)}});
  }

  // Held-out MAPE of `predicted` over the config's rows with sizes in [low, high).
  const auto held_out = [&](const std::map<std::string, std::vector<double>>& predicted,
                            const std::string& config, double low, double high,
                            bool monotone_only) {
    const std::vector<NcclSweepRow>& sweep = sweep_of[config];
    return Mape(predicted.at(config), sweep, [&](size_t i) {
      return !fitted_of[config][i] && sweep[i].size_bytes >= low && sweep[i].size_bytes < high &&
             (!monotone_only || monotone_of[config][i]) &&
             std::isfinite(predicted.at(config)[i]);
    });
  };
  const auto errors = [&](const std::map<std::string, std::vector<double>>& predicted,
                          const std::string& config) {
    return nlohmann::json{
        {"held_out_mape_pct", Number(held_out(predicted, config, 0, INFINITY, false))},
        {"held_out_mape_from_1MiB_pct", Number(held_out(predicted, config, kMiB, INFINITY, false))},
        {"held_out_mape_below_1MiB_monotone_pct",
         Number(held_out(predicted, config, 0, kMiB, true))}};
  };
  nlohmann::json sweeps = nlohmann::json::array();
  std::vector<std::string> headline;
  for (const std::string& config : configs) {
    const std::vector<NcclSweepRow>& sweep = sweep_of[config];
    int held = 0;
    for (size_t i = 0; i < sweep.size(); ++i) {
      held += !fitted_of[config][i];
      const double measured = sweep[i].seconds;
      const auto error = [&](double t) { return Number(100.0 * (t / measured - 1.0)); };
      report.rows.push_back({{"config", config},
                             {"size_bytes", sweep[i].size_bytes},
                             {"fitted", static_cast<bool>(fitted_of[config][i])},
                             {"monotone", static_cast<bool>(monotone_of[config][i])},
                             {"measured_us", measured * 1e6},
                             {"predicted_us", Number(model_of[config][i] * 1e6)},
                             {"error_pct", error(model_of[config][i])},
                             {"alpha_beta_error_pct", error(alpha_beta_of[config][i])},
                             {"pipelined_error_pct", error(pipelined_of[config][i])}});
    }
    const bool scored = std::isfinite(model_of[config].front());
    const nlohmann::json model = errors(model_of, config);
    const nlohmann::json alpha_beta = errors(alpha_beta_of, config);
    const nlohmann::json pipelined = errors(pipelined_of, config);
    sweeps.push_back({{"config", config},
                      {"rows", sweep.size()},
                      {"held_out_rows", held},
                      {"model", scored ? model : nlohmann::json(nullptr)},
                      {"alpha_beta", alpha_beta},
                      {"pipelined", pipelined}});
    const auto pct = [](const nlohmann::json& j, const char* key) {
      return j[key].is_null() ? std::string("-") : fmt::format("{:.1f}%", j[key].get<double>());
    };
    const std::string model_text =
        scored ? fmt::format("model {} ({} over all sizes)",
                             pct(model, "held_out_mape_from_1MiB_pct"),
                             pct(model, "held_out_mape_pct"))
               : std::string("model not scored (one node count)");
    headline.push_back(fmt::format("{}: {}, alpha-beta alone {}, with sqrt(S) {}", config,
                                   model_text, pct(alpha_beta, "held_out_mape_from_1MiB_pct"),
                                   pct(pipelined, "held_out_mape_from_1MiB_pct")));
  }
  bool any_scored = false;
  for (const nlohmann::json& type : types) any_scored |= type["scored"].get<bool>();
  if (!any_scored)
    throw InputError(fmt::format("{}: no GPU type is swept at two node counts: nothing for the "
                                 "model to score",
                                 reference_path));
  report.summary = {{"gpu_types", types},
                    {"sweeps", sweeps},
                    {"fit_rule", "every fifth row of each sweep from its largest message"}};
  report.headline =
      fmt::format("held-out MAPE from 1 MiB: {}", fmt::join(headline, "; "));
  return report;
}

}  // namespace stratos
