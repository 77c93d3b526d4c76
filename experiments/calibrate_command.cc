// `stratos calibrate`: fits the cost model's constants to a profile and writes a calibrated
// cluster file; also registers `stratos validate alpa-comm` (experiments/validate_alpa_comm.cc).
#include <fmt/format.h>

#include <CLI/CLI.hpp>
#include <filesystem>

#include "calibrate/alpa_profile.h"
#include "calibrate/calibrate.h"
#include "calibrate/cluster_writer.h"
#include "costmodel/cluster_io.h"
#include "costmodel/error.h"
#include "costmodel/zoo.h"
#include "experiments/calibration_report.h"
#include "experiments/cli_rules.h"
#include "experiments/commands.h"
#include "experiments/output.h"

namespace stratos {

namespace {

// The command line that reproduces this run, with paths as PathForDisplay shows them.
std::string CommandLine(const CalibrateArgs& args, const std::string& profile_flag) {
  // A zoo name is not a path: shown as given.
  const bool cluster_is_file = std::filesystem::is_regular_file(args.cluster);
  std::string line = fmt::format("stratos calibrate {} --cluster {}", profile_flag,
                                 cluster_is_file ? PathForDisplay(args.cluster) : args.cluster);
  if (args.ring_links >= 0) line += fmt::format(" --ring-links {}", args.ring_links);
  if (!args.holdout.empty() && args.holdout != "none") {
    line += fmt::format(" --holdout {}", args.holdout);
  }
  if (args.matmul_dtype != "f16") line += fmt::format(" --matmul-dtype {}", args.matmul_dtype);
  if (!args.name.empty()) line += fmt::format(" --name {}", args.name);
  line += fmt::format(" --output {}", PathForDisplay(args.output));
  return line;
}

}  // namespace

int RunCalibrate(const CalibrateArgs& args) {
  if (!args.profile_dir.empty() && !args.alpa_csv.empty()) {
    throw InputError("command line: give --profile DIR or --alpa-csv FILE, not both");
  }
  const LoadedProfile loaded = LoadProfile(args.profile_dir, args.alpa_csv);
  const ClusterSpec base = ReadClusterFile(ResolveClusterPath(args.cluster));
  CalibrateOptions options;
  options.holdout = ParseHoldout(args.holdout);
  options.ring_links_per_gpu = args.ring_links;
  options.matmul_dtype = args.matmul_dtype;
  options.name = args.name;
  const std::string command = CommandLine(args, loaded.flag);
  options.source = fmt::format("{}: fitted on {}; held out: {}", command, loaded.description,
                               options.holdout.ToString());
  const CalibrationResult result = Calibrate(base, loaded.profile, options);

  fmt::print("calibrating {} on {}\n", base.name, loaded.description);
  fmt::print("held out: {}\n\n", options.holdout.ToString());
  fmt::print("{}", CalibrationTable(result));

  const std::string header = fmt::format(
      "{}: {} calibrated by stratos (calibrate/).\n"
      "Produced by: {}\n"
      "Fitted on {} collective rows and {} GEMMs; see [calibration] source for the data.\n"
      "Held-out errors of this model (refitted on small meshes, predicting larger ones): "
      "`stratos validate alpa-comm`, README section Calibration.",
      result.cluster.name, base.name, command, result.cluster.calibration.collective_rows,
      result.cluster.calibration.matmul_rows);
  const std::filesystem::path parent = std::filesystem::path(args.output).parent_path();
  if (!parent.empty()) EnsureDirectory(parent.string());
  WriteClusterFile(result.cluster, args.output, header);
  fmt::print("\nwrote {}\n", args.output);
  return kExitSuccess;
}

void AddCalibrationCommands(CLI::App& app, CLI::App* validate, CalibrationCommands& commands) {
  CalibrateArgs& c = commands.calibrate_args;
  commands.calibrate = app.add_subcommand(
      "calibrate",
      "fit the cost model's collective and matmul constants to a profile; write a "
      "calibrated cluster file");
  CLI::Option* profile = commands.calibrate->add_option("--profile", c.profile_dir,
                                                        "profile directory (matmul.csv, "
                                                        "collective.csv, layer.csv, "
                                                        "profile.json)");
  commands.calibrate
      ->add_option("--alpa-csv", c.alpa_csv,
                   "Alpa profile CSV (default, without --profile: the shared data's "
                   "alpa_v100_comm/alpa_v100_comm_1x1_to_2x8.csv)")
      ->excludes(profile);
  commands.calibrate->add_option("--cluster", c.cluster, "base cluster: zoo name or .toml file")
      ->capture_default_str();
  commands.calibrate
      ->add_option("--holdout", c.holdout,
                   "rows not fitted, only predicted: comma list of NxG[/gS][/local|/cross], "
                   "gemm>D, or none")
      ->capture_default_str();
  commands.calibrate
      ->add_option("--ring-links", c.ring_links,
                   "NVLink links per GPU of a switchless intra-node topology (V100 SXM2: 6; 0: "
                   "bandwidth per GPU); default: the base cluster's")
      ->check(cli::IntAtLeast(0));
  commands.calibrate
      ->add_option("--matmul-dtype", c.matmul_dtype,
                   "GEMM rows of this dtype fit the device's curve (bf16: a GPU profiled with "
                   "`stratos profile --device cuda --dtype bf16`)")
      ->check(cli::OneOf({"f16", "bf16", "f32"}))
      ->capture_default_str();
  commands.calibrate->add_option("--name", c.name,
                                 "name of the calibrated cluster (default: <base>-calibrated)");
  commands.calibrate->add_option("--output", c.output, "calibrated cluster file (.toml)")
      ->capture_default_str();

  ValidateAlpaCommArgs& v = commands.validate_args;
  commands.validate_alpa_comm = validate->add_subcommand(
      "alpa-comm",
      "fit collectives on small V100 meshes (Alpa profile), predict the 1x8 and 2x8 "
      "meshes; matmul curve on GEMMs up to 4096, predict larger ones");
  commands.validate_alpa_comm->add_option("--alpa-csv", v.alpa_csv, "Alpa profile CSV");
  commands.validate_alpa_comm->add_option("--cluster", v.cluster, "base cluster")
      ->capture_default_str();
  commands.validate_alpa_comm
      ->add_option("--ring-links", v.ring_links, "NVLink links per GPU (V100 SXM2: 6)")
      ->check(cli::IntAtLeast(0))
      ->capture_default_str();
  commands.validate_alpa_comm->add_option("--output-dir", v.output_dir, "where outputs go")
      ->check(cli::OutputDirectory())
      ->capture_default_str();
}

std::optional<int> RunCalibrationCommands(const CalibrationCommands& commands) {
  if (commands.calibrate != nullptr && commands.calibrate->parsed()) {
    return RunCalibrate(commands.calibrate_args);
  }
  if (commands.validate_alpa_comm != nullptr && commands.validate_alpa_comm->parsed()) {
    return RunValidateAlpaComm(commands.validate_args);
  }
  return std::nullopt;
}

}  // namespace stratos
