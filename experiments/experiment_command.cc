#include "experiments/experiment_command.h"

#include <CLI/CLI.hpp>
#include <fmt/format.h>

#include "experiments/cli_rules.h"
#include "experiments/commands.h"
#include "experiments/searchers.h"

namespace stratos {

void AddExperimentCommands(CLI::App& app, ExperimentCommands& c) {
  CLI::App* experiment = app.add_subcommand(
      "experiment", "experiment runner: searcher variants x problem families x seeds, and reports");
  experiment->require_subcommand(1);
  c.run = experiment->add_subcommand(
      "run", "run the cells of an experiment spec (TOML), each in its own process; resumable");
  c.run->add_option("spec", c.run_options.spec_path,
                    "experiment spec (.toml), or a shipped one by name: ladder, ablation-relax, scale")
      ->required();
  c.run->add_option("--output-dir", c.run_options.output_dir,
                    "where results go (default out/experiments/<spec name>)")
      ->check(cli::OutputDirectory());
  c.run->add_option("--jobs", c.run_options.jobs, "cells run at once")
      ->check(cli::IntAtLeast(1))
      ->capture_default_str();
  c.run->add_flag("--extend", c.run_options.extend,
                  "the spec changed: keep the finished cells it still has, run the rest");
  c.run->add_option("--max-cells", c.run_options.max_cells,
                    "stop after running this many cells (0: all)")
      ->check(cli::IntAtLeast(0));
  c.run->add_flag("--rerun-errors", c.run_options.rerun_errors,
                  "cells that ended in error (a crash, a failed start) run again");
  c.run->add_flag("!--no-progress", c.run_options.progress, "no progress lines on stderr");

  c.report = experiment->add_subcommand(
      "report", "medians, gaps, win/tie/loss tables and plots of an experiment directory");
  c.report->add_option("dir", c.report_options.dir, "output directory of `experiment run`")
      ->required();
  c.report->add_flag("!--no-plots", c.report_options.plots, "skip the matplotlib plots");

  c.options = experiment->add_subcommand(
      "options", "list every searcher option settable by name (specs, --option)");
  std::vector<std::string> names = SearcherNames();
  names.push_back("all");
  c.options->add_option("algorithm", c.options_algorithm, "one algorithm, or all")
      ->check(cli::OneOf(names))
      ->capture_default_str();

  c.cell = experiment->add_subcommand("cell", "internal: run one cell (started by `run`)");
  c.cell->group("");
  c.cell->add_option("spec", c.cell_spec)->required();
  c.cell->add_option("--cell", c.cell_id)->required();
  c.cell->add_option("--hash", c.cell_hash)->required();
  c.cell->add_option("--output", c.cell_output)->required();
}

std::optional<int> RunExperimentCommands(const ExperimentCommands& c) {
  if (c.run && *c.run) return RunExperiment(c.run_options);
  if (c.report && *c.report) return RunExperimentReport(c.report_options);
  if (c.cell && *c.cell) return RunExperimentCell(c.cell_spec, c.cell_id, c.cell_hash, c.cell_output);
  if (c.options && *c.options) {
    const std::vector<std::string> names = c.options_algorithm == "all"
                                               ? SearcherNames()
                                               : std::vector<std::string>{c.options_algorithm};
    bool first = true;
    for (const std::string& name : names) {
      SearcherSetup setup(name);
      fmt::print("{}:\n", name);
      for (const std::string& line : setup.Help()) {
        // search.* and space.* are shared: print them once.
        const bool shared = line.rfind("search.", 0) == 0 || line.rfind("space.", 0) == 0;
        if (shared && !first) continue;
        fmt::print("  {}\n", line);
      }
      first = false;
    }
    return kExitSuccess;
  }
  return std::nullopt;
}

}  // namespace stratos
