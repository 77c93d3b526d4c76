// `stratos validate <report>`: prints a validation report and writes its JSON and CSV.
#include <CLI/CLI.hpp>
#include <fmt/format.h>

#include <nlohmann/json.hpp>

#include "experiments/cli_rules.h"
#include "experiments/commands.h"
#include "experiments/output.h"
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
  return validate;
}

int RunValidate(const ValidateArgs& args) {
  const ValidationReport report = RunValidationReport(args.report);
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
