#include "validate/vtrain_extrapolation.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <map>
#include <set>
#include <tuple>

#include "costmodel/error.h"
#include "validate/rank_correlation.h"
#include "validate/vtrain.h"

namespace stratos {

std::vector<size_t> VtrainCalibrationRowsOfHidden(const std::vector<VtrainRow>& rows,
                                                  int hidden_size) {
  std::vector<size_t> fitted;
  for (size_t i : VtrainCalibrationRows(rows))
    if (rows[i].hidden_size == hidden_size) fitted.push_back(i);
  return fitted;
}

namespace {

using ModelKey = std::tuple<int, int, int, int>;  // hidden, layers, heads, sequence

ModelKey KeyOf(const VtrainRow& row) {
  return {row.hidden_size, row.num_layers, row.attention_heads, row.seq_length};
}

std::string ModelLabel(const ModelKey& key) {
  return fmt::format("h{} L{} a{} s{}", std::get<0>(key), std::get<1>(key), std::get<2>(key),
                     std::get<3>(key));
}

// Predicted, shipped-file predicted and measured times of one model's rows not fitted.
struct Series {
  std::vector<double> predicted, shipped, measured;
  void Append(const Series& o) {
    predicted.insert(predicted.end(), o.predicted.begin(), o.predicted.end());
    shipped.insert(shipped.end(), o.shipped.begin(), o.shipped.end());
    measured.insert(measured.end(), o.measured.begin(), o.measured.end());
  }
  double MeanErrorPct() const {
    double sum = 0;
    for (size_t i = 0; i < predicted.size(); ++i) sum += predicted[i] / measured[i] - 1.0;
    return 100.0 * sum / static_cast<double>(predicted.size());
  }
};

}  // namespace

ValidationReport ValidateVtrainExtrapolation(const std::string& reference_path) {
  const std::vector<VtrainRow> rows = ReadVtrain(reference_path);
  std::set<int> hidden_sizes;
  for (const VtrainRow& row : rows) hidden_sizes.insert(row.hidden_size);
  if (hidden_sizes.size() < 2)
    throw InputError(fmt::format("{}: every row has hidden size {}: needs at least two hidden "
                                 "sizes (one to fit, the others to check)",
                                 reference_path, *hidden_sizes.begin()));
  const VtrainAssumptions shipped = ShippedVtrainAssumptions();
  std::vector<double> shipped_ms(rows.size());
  for (size_t i = 0; i < rows.size(); ++i) shipped_ms[i] = PredictVtrainMs(rows[i], shipped);

  ValidationReport report;
  report.name = "vtrain-extrapolation";
  report.title =
      "vTrain's single-node A100 runs: the A100 constants fitted on the models of one hidden size "
      "and checked on the models of the others (models the fit never saw)";
  report.columns = {{"fitted_on", "fitted on", 0},   {"model", "model", 0},
                    {"seen", "rows of it fitted", 0}, {"rows", "rows checked", 0},
                    {"mape_pct", "MAPE %", 1},        {"bias_pct", "mean err %", 1},
                    {"spearman", "Spearman", 3},      {"kendall", "Kendall", 3},
                    {"shipped_mape_pct", "shipped MAPE %", 1}};
  nlohmann::json fits = nlohmann::json::array();
  std::vector<std::string> headline_parts;
  for (int fit_hidden : hidden_sizes) {
    const std::vector<size_t> fit_rows_index = VtrainCalibrationRowsOfHidden(rows, fit_hidden);
    std::vector<bool> fitted(rows.size(), false);
    std::vector<VtrainRow> fit_rows;
    for (size_t i : fit_rows_index) {
      fitted[i] = true;
      fit_rows.push_back(rows[i]);
    }
    const VtrainFit fit = FitVtrainConstants(fit_rows, {}, VtrainFitForm::kGemmCurveAndFloors);
    const VtrainAssumptions& constants = fit.constants;
    std::map<ModelKey, Series> models;
    std::map<ModelKey, int> fitted_rows_of;
    for (size_t i = 0; i < rows.size(); ++i) {
      if (fitted[i]) {
        ++fitted_rows_of[KeyOf(rows[i])];
        continue;
      }
      Series& series = models[KeyOf(rows[i])];
      series.predicted.push_back(PredictVtrainMs(rows[i], constants));
      series.shipped.push_back(shipped_ms[i]);
      series.measured.push_back(rows[i].iteration_ms);
    }
    Series unseen;
    double worst_spearman = 1.0;
    for (const auto& [key, series] : models) {
      const bool other = std::get<0>(key) != fit_hidden;
      const double spearman = SpearmanRho(series.predicted, series.measured);
      report.rows.push_back(
          {{"fitted_on", fmt::format("h{}", fit_hidden)},
           {"model", ModelLabel(key)},
           {"seen", other ? "none" : fmt::format("{}", fitted_rows_of[key])},
           {"rows", series.measured.size()},
           {"mape_pct", MeanAbsolutePercentError(series.predicted, series.measured)},
           {"bias_pct", series.MeanErrorPct()},
           {"spearman", spearman},
           {"kendall", KendallTauB(series.predicted, series.measured)},
           {"shipped_mape_pct", MeanAbsolutePercentError(series.shipped, series.measured)}});
      if (!other) continue;
      unseen.Append(series);
      worst_spearman = std::min(worst_spearman, spearman);
    }
    const double mape = MeanAbsolutePercentError(unseen.predicted, unseen.measured);
    const double shipped_mape = MeanAbsolutePercentError(unseen.shipped, unseen.measured);
    const double bias = unseen.MeanErrorPct();
    const MatmulCurve& gemm = *constants.matmul_curve;
    const LayerCurve& curve = *constants.layer_curve;
    fits.push_back({{"fitted_hidden_size", fit_hidden},
                    {"fitted_rows", fit_rows.size()},
                    {"gemm_half_efficiency_dim", gemm.half_efficiency_dim},
                    {"forward_floor_us", curve.forward_floor_seconds * 1e6},
                    {"backward_floor_us", curve.backward_floor_seconds * 1e6},
                    {"power", curve.power},
                    {"unseen_rows", unseen.measured.size()},
                    {"unseen_mape_pct", mape},
                    {"unseen_mean_error_pct", bias},
                    {"unseen_worst_spearman_within_model", worst_spearman},
                    {"shipped_unseen_mape_pct", shipped_mape}});
    headline_parts.push_back(fmt::format(
        "fitted on h{} alone (knee {:.0f}): the other models' {} runs MAPE {:.1f}%, mean "
        "{:+.1f}% ({}), Spearman >= {:.3f} (the shipped fit on every size: {:.1f}%)",
        fit_hidden, gemm.half_efficiency_dim, unseen.measured.size(), mape, bias,
        bias < 0 ? "too fast" : "too slow", worst_spearman, shipped_mape));
  }
  report.summary = {{"rows", rows.size()},
                    {"hidden_sizes", hidden_sizes},
                    {"fit_rule",
                     "every fifth row of the file (data rows 5, 10, 15, ...) of the models of one "
                     "hidden size"},
                    {"fits", fits}};
  report.headline = fmt::format("{}", fmt::join(headline_parts, "; "));
  report.assumptions = {
      "Rows priced as `stratos validate vtrain` prices them (Megatron-DeepSpeed, fp16, full "
      "recomputation, materialized attention, no gradient buckets, 1F1B, Megatron's placement) "
      "on one node of the zoo's dgx-a100-80gb-datasheet with the fitted constants.",
      "Fitted, for each hidden size H in turn, on the rows of the vtrain report's rule (every "
      "fifth row of the file) that belong to models of hidden size H: the GEMM curve's "
      "half-efficiency dimension (its asymptote the datasheet file's MAMF share) and the block "
      "floors with their power, as `stratos calibrate --vtrain-csv` fits them on every size.",
      "'rows of it fitted': none for a model of another hidden size, whose every row is checked; "
      "for the fitted size's models the rows not fitted are checked. 'shipped MAPE': the zoo's "
      "dgx-a100-80gb on the same rows, for comparison only: it was fitted on every size's fifth, "
      "so it saw a fifth of the rows this fit did not.",
      "The table has two hidden sizes (1,024 and 2,048, heads 16, sequence 1,024): fitting on "
      "1,024 and checking 2,048 extrapolates upward in GEMM shape, as pricing a model larger than "
      "any profiled does."};
  return report;
}

}  // namespace stratos
