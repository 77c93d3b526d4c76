#pragma once
// `stratos experiment report D`: what each searcher variant of an experiment achieved
// (experiments/experiment_runner.h wrote D).
//
// Per instance (family x problem), the best known plan is the fastest predicted iteration any
// cell found; the optimum is known where a cell proved its plan optimal (DP, ILP, exhaustive
// with termination "optimal"). Per family and variant, over instances x seeds: cells, plans
// found, median and worst gap to the best known plan and to the optimum (%), how many cells are
// within 0.1% and 1% of the optimum, median and largest search wall seconds. Win / tie / loss
// between every two variants on the same instance and seed: a plan beats no plan; plans within
// a relative 1e-6 tie.
//
// Writes D/report.md (the tables), D/report.json (the same numbers), D/rows.csv (one row per
// cell with its gaps, devices, layers and wall seconds) and D/anytime.csv (every cell's anytime
// trace), then plots with experiments/plot.py (matplotlib): D/gap_vs_size.png,
// D/wall_vs_size.png, D/ablation.png and D/anytime.png. Without python3 + matplotlib the plots
// are skipped with a note. Throws InputError when D holds no experiment.
#include <string>

namespace stratos {

struct ExperimentReportOptions {
  std::string dir;
  bool plots = true;
};

// Returns 0; the report is printed to stdout as well.
int RunExperimentReport(const ExperimentReportOptions& options);

}  // namespace stratos
