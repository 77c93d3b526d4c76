#pragma once
// `stratos experiment run | report | options` (and the hidden `cell`, one cell in its own
// process): registration on the CLI and dispatch.
#include <optional>
#include <string>

#include "experiments/experiment_report.h"
#include "experiments/experiment_runner.h"

namespace CLI {
class App;
}  // namespace CLI

namespace stratos {

struct ExperimentCommands {
  CLI::App* run = nullptr;
  CLI::App* report = nullptr;
  CLI::App* options = nullptr;
  CLI::App* cell = nullptr;
  ExperimentRunOptions run_options;
  ExperimentReportOptions report_options;
  std::string options_algorithm = "all";
  std::string cell_spec, cell_hash, cell_output;
  int cell_id = -1;
};

// Adds `experiment` and its subcommands to `app`.
void AddExperimentCommands(CLI::App& app, ExperimentCommands& commands);
// Runs the experiment subcommand that was given and returns its exit code; nullopt if none was.
std::optional<int> RunExperimentCommands(const ExperimentCommands& commands);

}  // namespace stratos
