// `stratos validate <report>`: prints a validation report and writes its JSON and CSV;
// `stratos validate targets`: every fidelity target in one table (validate/targets.h).
#include <CLI/CLI.hpp>
#include <fmt/format.h>

#include <nlohmann/json.hpp>

#include <cstdio>
#include <map>

#include "costmodel/error.h"
#include "costmodel/evaluate.h"
#include "experiments/cli_rules.h"
#include "experiments/commands.h"
#include "experiments/output.h"
#include "experiments/problem_loader.h"
#include "experiments/searchers.h"
#include "interop/interop.h"
#include "validate/targets.h"
#include "validate/validation.h"

namespace stratos {

CLI::App* AddValidateCommand(CLI::App& app, ValidateArgs& args) {
  CLI::App* validate = app.add_subcommand(
      "validate", "the cost model against published measurements (tables in the shared "
                  "data's reference/)");
  validate->require_subcommand(1);
  for (const std::string& name : ValidationReportNames()) {
    CLI::App* report = validate->add_subcommand(name, ValidationReportDescription(name));
    report->add_option("--output-dir", args.output_dir,
                       "where <report>.json and <report>.csv go (default: out/validate/<report>)")
        ->check(cli::OutputDirectory());
    report->callback([&args, name] { args.report = name; });
  }
  CLI::App* targets = validate->add_subcommand(
      "targets", "the fidelity targets in one table: each report's figure against its target "
                 "(megatron-h100, vtrain, amp, korthikanti, alpa-point) and the predicted MFU of "
                 "GPT-3 6.7B on 16 A100s at the DP's plan (about a minute)");
  targets
      ->add_option("--output-dir", args.output_dir,
                   "where targets.json and targets.csv go (default: out/validate/targets)")
      ->check(cli::OutputDirectory());
  targets->callback([&args] { args.report = "targets"; });
  return validate;
}

namespace {

// GPT-3 6.7B on 2 nodes of the zoo's dgx-a100-80gb, global batch 512 (the ProblemArgs defaults)
// searched by the DP: the MFU target's figure. The target compares it with Megatron-class runs,
// so the plans are priced as Megatron-LM runs them (interop.h TrainingForTarget: bf16 training
// accumulates and reduces fp32 gradients), as `stratos search --export megatron` prices them.
MfuFigure SearchedA100Mfu() {
  ProblemArgs problem_args;
  problem_args.nodes = "2";
  Problem problem = LoadProblem(problem_args);
  problem.training = TrainingForTarget(Target::kMegatron, problem.training);
  const SearchResult result = MakeSearcher("dp")->Search(problem, SearchOptions{});
  STRATOS_CHECK(result.plan.has_value(), "the DP search found no plan for GPT-3 6.7B on 16 A100s");
  const Estimate estimate = Evaluate(problem, *result.plan);
  return {estimate.mfu, result.plan->Summary()};
}

ValidationReport RunTargets() {
  std::map<std::string, nlohmann::json> summaries;
  for (const std::string& name : FidelityTargetReports()) {
    fmt::print("validate targets: running {}\n", name);
    std::fflush(stdout);
    summaries[name] = RunValidationReport(name).summary;
  }
  fmt::print("validate targets: searching GPT-3 6.7B on 16 A100s (--algo dp)\n");
  std::fflush(stdout);
  const MfuFigure mfu = SearchedA100Mfu();
  return FidelityTargetsReport(CheckFidelityTargets(summaries, mfu), mfu);
}

}  // namespace

int RunValidate(const ValidateArgs& args) {
  const ValidationReport report =
      args.report == "targets" ? RunTargets() : RunValidationReport(args.report);
  const std::string dir =
      args.output_dir.empty() ? "out/validate/" + args.report : args.output_dir;
  EnsureDirectory(dir);
  const std::string json = fmt::format("{}/{}.json", dir, report.name);
  const std::string csv = fmt::format("{}/{}.csv", dir, report.name);
  WriteJsonAtomically(json, report.ToJson());
  WriteFileAtomically(csv, report.Csv());
  fmt::print("{}\nwrote {} and {}\n", report.Text(), json, csv);
  return kExitSuccess;
}

}  // namespace stratos
