#pragma once
// The cost model's fidelity targets on the given data, checked in one place: each is a figure one
// of the validation reports computes (ValidationReport::summary), or the predicted MFU of GPT-3
// 6.7B on 16 A100s, with the rule it must meet. `stratos validate targets` runs the reports and
// prints the checks; a regression in any report shows there as a target newly missed.
#include <map>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "validate/report.h"

namespace stratos {

struct TargetCheck {
  std::string report;  // the validation report's name, or "mfu"
  std::string figure;  // what is measured, e.g. "held-out MAPE %"
  double value = 0;    // the measured figure, in the figure's unit
  std::string rule;    // what it must meet, e.g. "<= 5"
  bool met = false;
};

// The MFU of GPT-3 6.7B on 16 A100s (2 nodes of the zoo's dgx-a100-80gb, global batch 512) at
// the plan the DP searcher finds (README's `stratos search --model gpt3-6.7b --cluster
// dgx-a100-80gb --nodes 2 --global-batch 512 --algo dp`).
struct MfuFigure {
  double mfu = 0;    // fraction of peak
  std::string plan;  // the plan, one line (for the report)
};

// The targets, each from the summary of the report it names (keyed by report name); where a
// report states its own target, the bound is read from it (the key after the figure):
//   megatron-h100  mape_held_out_pct <= target_held_out_mape_pct (5)
//   vtrain         mape_not_fitted_pct <= target_mape_pct (8),
//                  worst_spearman_within_model >= target_spearman (0.9)
//   amp            spearman_ours >= spearman_amp; top1_ours_among_feasible/measured_over_best
//                  <= 1.03 (the measured best or within 3% of it); memory/failures_predicted >=
//                  memory/failed_trials (every failed trial predicted not to fit)
//   korthikanti    time_mape_pct <= target_time_mape_pct (10)
//   alpa-point     mape_pct <= target_mape_pct (15)
//   mfu            45% <= mfu <= 60%
// Throws InternalError if a summary is missing or lacks a figure or a bound.
std::vector<TargetCheck> CheckFidelityTargets(
    const std::map<std::string, nlohmann::json>& summaries, const MfuFigure& mfu);

// The reports CheckFidelityTargets reads, in its order (the "mfu" figure comes from a search).
std::vector<std::string> FidelityTargetReports();

// The checks as a report named "targets": one row per target (report, figure, value, rule, met)
// and a summary {"met", "total", "all_met", "mfu_plan"}.
ValidationReport FidelityTargetsReport(const std::vector<TargetCheck>& checks,
                                       const MfuFigure& mfu);

}  // namespace stratos
