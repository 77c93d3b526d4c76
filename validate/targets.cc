#include "validate/targets.h"

#include <fmt/format.h>

#include "costmodel/error.h"

namespace stratos {

namespace {

// The number at `path` ("key" or "key/subkey", a JSON pointer without its leading "/") of report
// `name`'s summary.
double Figure(const std::map<std::string, nlohmann::json>& summaries, const std::string& name,
              const std::string& path) {
  const auto it = summaries.find(name);
  STRATOS_CHECK(it != summaries.end(), "no summary of report {}", name);
  const nlohmann::json::json_pointer pointer("/" + path);
  STRATOS_CHECK(it->second.contains(pointer) && it->second.at(pointer).is_number(),
                "report {} has no figure {}", name, path);
  return it->second.at(pointer).get<double>();
}

TargetCheck AtMost(const std::string& report, const std::string& figure, double value,
                   double bound) {
  return {report, figure, value, fmt::format("<= {}", bound), value <= bound};
}

TargetCheck AtLeast(const std::string& report, const std::string& figure, double value,
                    double bound, const std::string& bound_text = "") {
  return {report, figure, value,
          ">= " + (bound_text.empty() ? fmt::format("{}", bound) : bound_text), value >= bound};
}

}  // namespace

std::vector<std::string> FidelityTargetReports() {
  return {"megatron-h100", "vtrain", "amp", "korthikanti", "alpa-point"};
}

std::vector<TargetCheck> CheckFidelityTargets(
    const std::map<std::string, nlohmann::json>& summaries, const MfuFigure& mfu) {
  std::vector<TargetCheck> checks;
  // A report's figure against the target the report itself states.
  const auto own = [&](const std::string& report, const std::string& figure,
                       const std::string& key, const std::string& target_key, bool at_most) {
    const double value = Figure(summaries, report, key);
    const double bound = Figure(summaries, report, target_key);
    return at_most ? AtMost(report, figure, value, bound) : AtLeast(report, figure, value, bound);
  };
  checks.push_back(own("megatron-h100", "held-out MAPE %", "mape_held_out_pct",
                       "target_held_out_mape_pct", true));
  checks.push_back(own("vtrain", "MAPE % of the rows not fitted", "mape_not_fitted_pct",
                       "target_mape_pct", true));
  checks.push_back(own("vtrain", "Spearman within the worst model", "worst_spearman_within_model",
                       "target_spearman", false));
  const double amp_own = Figure(summaries, "amp", "spearman_amp");
  checks.push_back(AtLeast("amp", "Spearman over the trials that ran",
                           Figure(summaries, "amp", "spearman_ours"), amp_own,
                           fmt::format("{:.4f} (AMP's own cost model)", amp_own)));
  checks.push_back(AtMost("amp", "our top-1's measured time / the best's",
                          Figure(summaries, "amp", "top1_ours_among_feasible/measured_over_best"),
                          1.03));
  // AMP's failed trials: out of memory, or stopped by its launcher's time limit (the report's
  // `runner` figures, validate/amp_trials.h AmpRunRecordsTime), all foreseen and no trial that
  // ran predicted to fail.
  const double failed = Figure(summaries, "amp", "runner/failed_trials");
  const double predicted = Figure(summaries, "amp", "runner/failures_predicted");
  const double false_alarms = Figure(summaries, "amp", "runner/false_alarms");
  checks.push_back({"amp", "failed trials predicted (memory or time limit)", predicted,
                    fmt::format(">= {} (all), no false alarm (has {})", failed, false_alarms),
                    predicted >= failed && false_alarms == 0});
  checks.push_back(own("korthikanti", "22B layer times MAPE %", "time_mape_pct",
                       "target_time_mape_pct", true));
  checks.push_back(own("alpa-point", "GPT 2.6B iteration |error| %", "mape_pct", "target_mape_pct",
                       true));
  const double mfu_pct = 100.0 * mfu.mfu;
  checks.push_back({"mfu", "predicted MFU % of GPT-3 6.7B on 16 A100s", mfu_pct, "in [45, 60]",
                    mfu_pct >= 45.0 && mfu_pct <= 60.0});
  return checks;
}

ValidationReport FidelityTargetsReport(const std::vector<TargetCheck>& checks,
                                       const MfuFigure& mfu) {
  ValidationReport report;
  report.name = "targets";
  report.title =
      "the cost model's fidelity targets on the given data: each report's figure against its "
      "target, and the predicted MFU of GPT-3 6.7B on 16 A100s";
  report.assumptions = {
      "each figure is the report of that name as `stratos validate <report>` computes it, on the "
      "rows it does not fit",
      fmt::format("mfu: GPT-3 6.7B on 2 nodes of the zoo's dgx-a100-80gb (16 A100s), global batch "
                  "512, priced as Megatron-LM runs it (fp32 gradients), at the plan `stratos "
                  "search --algo dp --export megatron` finds: {}",
                  mfu.plan)};
  report.columns = {{"report", "report", 0},
                    {"figure", "figure", 0},
                    {"value", "value", 4},
                    {"rule", "target", 0},
                    {"met", "met", 0}};
  int met = 0;
  for (const TargetCheck& check : checks) {
    report.rows.push_back({{"report", check.report},
                           {"figure", check.figure},
                           {"value", check.value},
                           {"rule", check.rule},
                           {"met", check.met}});
    met += check.met ? 1 : 0;
  }
  const int total = static_cast<int>(checks.size());
  report.summary = {{"met", met},
                    {"total", total},
                    {"all_met", met == total},
                    {"mfu_plan", mfu.plan}};
  std::string missed;
  for (const TargetCheck& check : checks)
    if (!check.met)
      missed += fmt::format("{}{} {} ({:.4g}, target {})", missed.empty() ? "" : "; ",
                            check.report, check.figure, check.value, check.rule);
  report.headline = fmt::format("{} of {} targets met{}{}", met, total,
                                missed.empty() ? "" : "; missed: ", missed);
  return report;
}

}  // namespace stratos
