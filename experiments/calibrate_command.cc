// `stratos calibrate`: fits the cost model's constants to a profile and writes a calibrated
// cluster file; also registers `stratos validate alpa-comm` (experiments/validate_alpa_comm.cc).
#include <fmt/format.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <filesystem>
#include <optional>
#include <thread>

#include "calibrate/alpa_profile.h"
#include "calibrate/calibrate.h"
#include "calibrate/cluster_writer.h"
#include "calibrate/memory_fit.h"
#include "costmodel/cluster_io.h"
#include "costmodel/json_reader.h"
#include "costmodel/error.h"
#include "costmodel/zoo.h"
#include "experiments/calibration_report.h"
#include "experiments/cli_rules.h"
#include "experiments/commands.h"
#include "experiments/output.h"
#include "runtime/trainer.h"
#include "validate/amp_trials.h"
#include "validate/megatron_h100.h"
#include "validate/reference_tables.h"
#include "validate/vtrain.h"

namespace stratos {

namespace {

// " --framework-memory-runs DIR" when given, for the command lines that reproduce a file.
std::string FrameworkMemoryFlag(const CalibrateArgs& args) {
  return args.framework_memory_runs.empty()
             ? std::string()
             : fmt::format(" --framework-memory-runs {}",
                           PathForDisplay(args.framework_memory_runs));
}

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
  if (!args.matmul_dtype.empty()) line += fmt::format(" --matmul-dtype {}", args.matmul_dtype);
  if (!args.name.empty()) line += fmt::format(" --name {}", args.name);
  if (args.no_layer_curve) line += " --no-layer-curve";
  if (args.no_pipelining) line += " --no-pipelining";
  if (!args.memory_runs.empty())
    line += fmt::format(" --memory-runs {}", PathForDisplay(args.memory_runs));
  line += FrameworkMemoryFlag(args);
  if (!args.save_as.empty()) {
    line += fmt::format(" --save-as {}", args.save_as);
  } else if (!args.output.empty()) {
    line += fmt::format(" --output {}", PathForDisplay(args.output));
  }
  return line;
}

// The memory rows of the runs in `dir` (its *.json files, sorted; each a measurement.json of
// `stratos run`): per run, the rank whose tensors peaked highest. Runs without device memory
// measurements (CPU runs) are skipped. Throws InputError for a missing directory or a file that
// is not a measurement.
std::vector<RunMemoryRow> ReadMemoryRuns(const std::string& dir) {
  if (!std::filesystem::is_directory(dir))
    throw InputError(fmt::format("--memory-runs {}: not a directory", dir));
  std::vector<std::string> files;
  for (const auto& entry : std::filesystem::directory_iterator(dir))
    if (entry.path().extension() == ".json") files.push_back(entry.path().string());
  std::sort(files.begin(), files.end());
  std::vector<RunMemoryRow> rows;
  for (const std::string& file : files) {
    const nlohmann::json measurement = ReadJsonInputFile(file, "measurement");
    if (!measurement.contains("ranks") || !measurement.at("ranks").is_array())
      throw InputError(fmt::format("{}: not a stratos.measurement/1 file (no ranks)", file));
    std::optional<RunMemoryRow> best;
    for (const nlohmann::json& rank : measurement.at("ranks")) {
      if (!rank.contains("memory")) continue;
      const nlohmann::json& m = rank.at("memory");
      RunMemoryRow row;
      row.run = PathForDisplay(file);
      try {
        row.device_total_bytes = m.at("device_total_bytes").get<double>();
        row.outside_allocator_bytes = m.at("outside_allocator_bytes").get<double>();
        row.peak_allocated_bytes = m.at("peak_allocated_bytes").get<double>();
        row.peak_reserved_bytes = m.at("peak_reserved_bytes").get<double>();
      } catch (const nlohmann::json::exception& e) {
        throw InputError(fmt::format("{}: ranks[].memory: {}", file, e.what()));
      }
      if (!best || row.peak_allocated_bytes > best->peak_allocated_bytes) best = row;
    }
    if (best) rows.push_back(*best);
  }
  return rows;
}

// --framework-memory-runs DIR: `device` with the framework's memory constants fitted on the CUDA
// runs in DIR (measured on another device; FitDeviceMemory, WithFrameworkMemoryFit), its source
// saying so, and a line printed; `device` unchanged without the flag.
void ApplyFrameworkMemory(const CalibrateArgs& args, DeviceSpec& device) {
  if (args.framework_memory_runs.empty()) return;
  const MemoryFit fit = FitDeviceMemory(ReadMemoryRuns(args.framework_memory_runs),
                                        "--framework-memory-runs " + args.framework_memory_runs);
  device = WithFrameworkMemoryFit(device, fit);
  device.source += fmt::format(
      "; framework memory as measured in {} CUDA runs on another device ({}): the median held "
      "outside PyTorch's caching allocator and the median allocator overhead over the tensors' "
      "peak (the framework's, assumed for this device)",
      fit.runs, PathForDisplay(args.framework_memory_runs));
  fmt::print("framework memory from {} runs on another device: {:.3f} GiB outside the caching "
             "allocator (median), allocator overhead +{:.1f}% over the tensors' peak (median)\n",
             fit.runs, fit.reserved_memory_bytes / (1024.0 * 1024 * 1024),
             100 * fit.memory_fragmentation);
}

// --cluster local: the runtime's description of this machine's CPU workers (LocalCpuCluster),
// as many as the profile's largest collective mesh, whose peak is the profile's fastest GEMM of
// `dtype` (the matmul fit then sets the efficiency curve below it). Throws InputError naming
// what the profile lacks.
ClusterSpec LocalBase(const Profile& profile, const std::string& dtype, const std::string& where) {
  int workers = 0;
  for (const CollectiveRow& row : profile.collectives)
    workers = std::max(workers, row.nodes * row.gpus_per_node);
  double peak = 0;
  for (const MatmulRow& row : profile.matmuls)
    if (row.dtype == dtype) peak = std::max(peak, row.flops / row.seconds);
  if (workers < 2)
    throw InputError(fmt::format(
        "{}: --cluster local sizes the workers from the collective rows, and there are none "
        "(stratos profile --parts collective)",
        where));
  if (!(peak > 0))
    throw InputError(fmt::format(
        "{}: --cluster local takes its peak from the {} GEMM rows, and there are none (stratos "
        "profile --parts matmul --dtype {})",
        where, dtype, dtype));
  return LocalCpuCluster(workers, peak);
}

// Writes `cluster` to `output` (its directory created) atomically and says where; with a
// --save-as name, that every command now takes it. Throws InputError naming the file.
void WriteCalibratedCluster(const ClusterSpec& cluster, const std::string& output,
                            const std::string& header, const std::string& save_as) {
  const std::filesystem::path parent = std::filesystem::path(output).parent_path();
  if (!parent.empty()) EnsureDirectory(parent.string());
  WriteClusterFile(cluster, output, header);
  fmt::print("wrote {}\n", output);
  if (!save_as.empty()) fmt::print("every command now takes it as --cluster {}\n", save_as);
}

// A calibration of one device from published runs (--vtrain-csv, --megatron-h100-csv): the base
// cluster (one node group), the device it prices, and what the written file says it came from.
struct DeviceCalibration {
  ClusterSpec cluster;
  std::string base_name;
  std::string command;  // the command line that reproduces the file

  DeviceSpec& Device() {
    return *std::find_if(cluster.devices.begin(), cluster.devices.end(),
                         [&](const DeviceSpec& d) { return d.name == cluster.Device().name; });
  }
};

DeviceCalibration StartDeviceCalibration(const CalibrateArgs& args, const std::string& flag,
                                         const std::string& file) {
  DeviceCalibration c;
  c.cluster = ReadClusterFile(ResolveClusterPath(args.cluster));
  if (!c.cluster.IsHomogeneous())
    ThrowInputError("command line", "--cluster", args.cluster,
                    flag + " calibrates one device: the cluster must have one node group");
  c.base_name = c.cluster.name;
  c.cluster.name = !args.name.empty() ? args.name
                   : !args.save_as.empty() ? args.save_as
                                           : c.base_name + "-calibrated";
  const bool cluster_is_file = std::filesystem::is_regular_file(args.cluster);
  c.command = fmt::format("stratos calibrate {}{} --cluster {}{}{}", flag,
                          file.empty() ? std::string() : " " + PathForDisplay(file),
                          cluster_is_file ? PathForDisplay(args.cluster) : args.cluster,
                          args.name.empty() ? "" : " --name " + args.name,
                          FrameworkMemoryFlag(args));
  return c;
}

// Writes a device calibration's file: a header naming the cluster, its base, what it was
// calibrated on and the command that reproduces it, then `checks` (where its errors are
// reported).
void WriteDeviceCalibration(const DeviceCalibration& c, const CalibrateArgs& args,
                            const std::string& output, const std::string& calibrated_on,
                            const std::string& checks) {
  const std::string header =
      fmt::format("{}: {} calibrated by stratos on {}.\nProduced by: {}\n{}", c.cluster.name,
                  c.base_name, calibrated_on, c.command, checks);
  WriteCalibratedCluster(c.cluster, output, header, args.save_as);
}

// --vtrain-csv: the base cluster's device with the GEMM curve (its asymptote the base's
// matmul_efficiency, the measured large-GEMM share of peak) and the block curve fitted on every
// fifth row of vTrain's table (FitVtrainConstants, the fit of `stratos validate vtrain`).
int RunCalibrateVtrain(const CalibrateArgs& args, const std::string& output) {
  const std::vector<VtrainRow> rows = ReadVtrain(args.vtrain_csv);
  std::vector<VtrainRow> fit_rows;
  for (size_t i : VtrainCalibrationRows(rows)) fit_rows.push_back(rows[i]);
  DeviceCalibration c = StartDeviceCalibration(args, "--vtrain-csv", args.vtrain_csv);
  VtrainAssumptions how;
  how.cluster = args.cluster;
  const VtrainFit fit = FitVtrainConstants(fit_rows, how, VtrainFitForm::kGemmCurveAndFloors);
  DeviceSpec& device = c.Device();
  device.matmul_curve = fit.constants.matmul_curve;
  device.layer_curve = fit.constants.layer_curve;
  device.source += fmt::format(
      "; calibrated: the GEMM curve's half-efficiency dimension (its asymptote this "
      "matmul_efficiency) and the block curve fitted on every fifth row of vTrain's single-node "
      "A100 runs ({} of {})",
      fit_rows.size(), rows.size());
  ApplyFrameworkMemory(args, device);
  c.cluster.calibration.source = fmt::format(
      "{}: the GEMM curve's half-efficiency dimension (asymptote: {}'s matmul_efficiency, the "
      "measured large-GEMM share of peak) and the block curve (scales 1, floors) fitted by least "
      "squares on "
      "the relative iteration-time error of every fifth row ({} of {} rows; the rule of "
      "`stratos validate vtrain`, which reports the errors on the other rows); network and memory "
      "as in {}{}",
      c.command, c.base_name, fit_rows.size(), rows.size(), c.base_name,
      args.framework_memory_runs.empty() ? "" : " (framework memory: see the device's source)");
  c.cluster.calibration.layer_rows = static_cast<int>(fit_rows.size());
  const LayerCurve& curve = *fit.constants.layer_curve;
  fmt::print("calibrating {} on {} ({} of {} rows: every fifth)\n", c.base_name,
             PathForDisplay(args.vtrain_csv), fit_rows.size(), rows.size());
  const MatmulCurve& gemm = *fit.constants.matmul_curve;
  fmt::print("GEMM curve {:.4f} / (1 + {:.1f} / min(m, n, k)); block floors {:.0f} us forward / "
             "{:.0f} us backward (power {:g}); RMS relative error on the fitted rows {:.1f}%\n",
             gemm.max_efficiency, gemm.half_efficiency_dim, curve.forward_floor_seconds * 1e6,
             curve.backward_floor_seconds * 1e6, curve.power, 100 * fit.rms_relative_error);
  WriteDeviceCalibration(c, args, output, "vTrain's single-node A100 runs",
                         "Errors on the rows not fitted: `stratos validate vtrain`; held-out "
                         "checks on other tables: `stratos validate korthikanti` (22B layer "
                         "times).");
  return kExitSuccess;
}

// --megatron-h100-csv: the base cluster's matmul_efficiency fitted on the smallest and the
// largest run of Megatron-Core's H100 table (FitMegatronConstants with the report's assumptions,
// the fit of `stratos validate megatron-h100`).
int RunCalibrateMegatron(const CalibrateArgs& args, const std::string& output) {
  const std::vector<MegatronScalingRow> rows = ReadMegatronScaling(args.megatron_h100_csv);
  if (rows.size() < 2)
    throw InputError(fmt::format("{}: {} rows: needs at least 2 (the smallest and the largest "
                                 "run)",
                                 PathForDisplay(args.megatron_h100_csv), rows.size()));
  std::vector<MegatronScalingRow> fit_rows;
  for (size_t i : MegatronCalibrationRows(rows)) fit_rows.push_back(rows[i]);
  DeviceCalibration c =
      StartDeviceCalibration(args, "--megatron-h100-csv", args.megatron_h100_csv);
  MegatronAssumptions how;
  how.cluster = args.cluster;
  const MegatronFit fit = FitMegatronConstants(fit_rows, how);
  DeviceSpec& device = c.Device();
  const double datasheet = device.matmul_efficiency;
  device.matmul_efficiency = fit.matmul_efficiency;
  device.source += fmt::format(
      "; calibrated: matmul_efficiency (datasheet MAMF share {:.3f}) fitted end to end on "
      "Megatron-Core's H100 runs {} and {}",
      datasheet, fit_rows[0].model, fit_rows[1].model);
  ApplyFrameworkMemory(args, device);
  c.cluster.calibration.source = fmt::format(
      "{}: matmul_efficiency fitted by grid search (least squares on the relative TFLOP/s error) "
      "on the smallest and the largest run ({} on {} GPUs, {} on {} GPUs; the rule of `stratos "
      "validate megatron-h100`, which reports the errors on the other {} rows), with "
      "communication overlap {:g} and the report's other assumptions; an end-to-end figure "
      "that absorbs the kernels the model does not price; network and memory as in {}{}",
      c.command, fit_rows[0].model, fit_rows[0].num_gpus, fit_rows[1].model, fit_rows[1].num_gpus,
      rows.size() - fit_rows.size(), how.comm_overlap_fraction, c.base_name,
      args.framework_memory_runs.empty() ? "" : " (framework memory: see the device's source)");
  fmt::print("calibrating {} on {} ({} of {} rows: the smallest and the largest run)\n",
             c.base_name, PathForDisplay(args.megatron_h100_csv), fit_rows.size(), rows.size());
  fmt::print("matmul_efficiency {:.4f} (datasheet {:.4f}); RMS relative error on the fitted rows "
             "{:.1f}%\n",
             fit.matmul_efficiency, datasheet, 100 * fit.rms_relative_error);
  WriteDeviceCalibration(c, args, output, "Megatron-Core's H100 weak-scaling runs",
                         "Errors on the rows not fitted: `stratos validate megatron-h100`.");
  return kExitSuccess;
}

// --amp-profile: the base cluster's T4 matmul efficiency and block curve and its intra-node
// latency fitted on AMP's published GPT-2 layer profile (AmpCalibratedCluster, the constants
// `stratos validate amp` prices the trials with).
int RunCalibrateAmp(const CalibrateArgs& args, const std::string& output) {
  DeviceCalibration c = StartDeviceCalibration(args, "--amp-profile", "");
  const ClusterSpec fit = AmpCalibratedCluster(args.cluster);
  DeviceSpec& device = c.Device();
  device.matmul_efficiency = fit.Device().matmul_efficiency;
  device.layer_curve = fit.Device().layer_curve;
  c.cluster.networks.at(0).latency_seconds = fit.IntraNode().latency_seconds;
  c.cluster.networks.at(0).source +=
      "; calibrated: latency fitted on AMP's profiled GPT-2 blocks at model parallel 2 and 4";
  device.source +=
      "; calibrated: matmul_efficiency from AMP's profiled LM head, the block curve's scale from "
      "its profiled block (DachengLi1/AMP src/known_cost/gpt2_G4_1.npy)";
  ApplyFrameworkMemory(args, device);
  c.cluster.calibration.source = fmt::format(
      "{}: the T4's matmul efficiency (AMP's profiled LM head forward, 4.650 ms at micro-batch "
      "1), the block curve's scale (the profiled block forward, 5.470 ms) and the intra-node "
      "latency per ring step (the profiled blocks at model parallel 2 and 4) from AMP's GPT-2 "
      "layer profile (DachengLi1/AMP @72eeea4 src/known_cost/gpt2_G4_{{1,2,4}}.npy, the profile "
      "AMP's own cost model uses; validate/amp_trials.h); nothing fitted to AMP's trials, whose "
      "ranking `stratos validate amp` reports; the rest as in {}",
      c.command, c.base_name);
  const LayerCurve& curve = *fit.Device().layer_curve;
  fmt::print("calibrating {} on AMP's GPT-2 layer profile (T4)\n", c.base_name);
  fmt::print("matmul_efficiency {:.4f}; block curve scale {:.3f}; intra-node latency {:.1f} us\n",
             fit.Device().matmul_efficiency, curve.forward_scale,
             1e6 * fit.IntraNode().latency_seconds);
  WriteDeviceCalibration(c, args, output, "AMP's published T4 layer profile",
                         "Ranking of AMP's measured trials with it: `stratos validate amp`.");
  return kExitSuccess;
}

}  // namespace

int RunCalibrate(const CalibrateArgs& given) {
  CalibrateArgs args = given;
  if (args.cluster.empty())
    args.cluster = !args.vtrain_csv.empty()          ? kVtrainBaseCluster
                   : !args.megatron_h100_csv.empty() ? kMegatronBaseCluster
                   : args.amp_profile                ? kAmpBaseCluster
                                                     : "p3.16xlarge-datasheet";
  if (!args.profile_dir.empty() && !args.alpa_csv.empty()) {
    throw InputError("command line: give --profile DIR or --alpa-csv FILE, not both");
  }
  if (!args.save_as.empty() && !args.output.empty())
    throw InputError("command line: give --output FILE or --save-as NAME, not both");
  const bool local = args.cluster == "local";
  const std::string output = !args.save_as.empty() ? UserClusterPath(args.save_as)
                             : !args.output.empty() ? args.output
                                                    : "out/calibrate/cluster.toml";
  if (!args.vtrain_csv.empty()) return RunCalibrateVtrain(args, output);
  if (!args.megatron_h100_csv.empty()) return RunCalibrateMegatron(args, output);
  if (args.amp_profile) return RunCalibrateAmp(args, output);
  const LoadedProfile loaded = LoadProfile(args.profile_dir, args.alpa_csv);
  const std::string matmul_dtype =
      !args.matmul_dtype.empty() ? args.matmul_dtype : local ? "f32" : "f16";
  const ClusterSpec base = local ? LocalBase(loaded.profile, matmul_dtype, loaded.flag)
                                 : ReadClusterFile(ResolveClusterPath(args.cluster));
  CalibrateOptions options;
  options.holdout = ParseHoldout(args.holdout);
  options.ring_links_per_gpu = args.ring_links;
  options.fit_layer_curve = !args.no_layer_curve;
  options.collective_pipeline = !args.no_pipelining;
  options.memory_from_runs = !args.memory_runs.empty();
  options.matmul_dtype = matmul_dtype;
  options.name = !args.name.empty() ? args.name : args.save_as;
  const std::string command = CommandLine(args, loaded.flag);
  options.source = fmt::format("{}: fitted on {}; held out: {}", command, loaded.description,
                               options.holdout.ToString());
  CalibrationResult result = Calibrate(base, loaded.profile, options);
  std::optional<MemoryFit> memory;
  if (!args.memory_runs.empty()) {
    memory = FitDeviceMemory(ReadMemoryRuns(args.memory_runs), "--memory-runs " + args.memory_runs);
    DeviceSpec& device = result.cluster.devices.front();
    device = WithMemoryFit(device, *memory);
    device.source += fmt::format("; memory as measured in {} CUDA runs ({}): the driver's total, "
                                 "the median held outside the caching allocator and the median "
                                 "allocator overhead over the tensors' peak",
                                 memory->runs, PathForDisplay(args.memory_runs));
  }
  ApplyFrameworkMemory(args, result.cluster.devices.front());
  // Local workers beyond the machine's hardware threads share them: a plan on every worker (what
  // the search prices) runs each at threads / workers of the speed its rows were profiled at.
  const int threads = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  const double slowdown = local ? LocalWorkerSlowdown(base.NumDevices()) : 1.0;
  if (slowdown > 1) {
    DeviceSpec& device = result.cluster.devices.front();
    device = SlowedDevice(device, slowdown);
    device.source += fmt::format("; compute {:.3g}x slower than profiled: {} workers share this "
                                 "machine's {} hardware threads",
                                 slowdown, base.NumDevices(), threads);
  }

  fmt::print("calibrating {} on {}\n", base.name, loaded.description);
  fmt::print("held out: {}\n\n", options.holdout.ToString());
  fmt::print("{}", CalibrationTable(result));
  if (memory)
    fmt::print("\ndevice memory from {} runs: {:.2f} GiB in all, {:.3f} GiB outside the caching "
               "allocator (median), allocator overhead +{:.1f}% over the tensors' peak (median)\n",
               memory->runs, memory->memory_bytes / (1024.0 * 1024 * 1024),
               memory->reserved_memory_bytes / (1024.0 * 1024 * 1024),
               100 * memory->memory_fragmentation);
  if (slowdown > 1)
    fmt::print("\n{} workers share this machine's {} hardware threads: the device's compute "
               "constants are {:.3g}x slower than profiled (one worker alone)\n",
               base.NumDevices(), threads, slowdown);

  const std::string header = fmt::format(
      "{}: {} calibrated by stratos (calibrate/).\n"
      "Produced by: {}\n"
      "Fitted on {} collective rows, {} GEMMs and {} transformer blocks; see [calibration] source "
      "for the data.\n"
      "Held-out errors of this model (refitted on small meshes, predicting larger ones): "
      "`stratos validate alpa-comm`, README section Calibration.",
      result.cluster.name, base.name, command, result.cluster.calibration.collective_rows,
      result.cluster.calibration.matmul_rows, result.cluster.calibration.layer_rows);
  fmt::print("\n");
  WriteCalibratedCluster(result.cluster, output, header, args.save_as);
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
  commands.calibrate
      ->add_option("--vtrain-csv", c.vtrain_csv,
                   "vTrain's single-node A100 runs (the shared data's "
                   "reference/vtrain_a100_single_node.csv): fit the device's GEMM curve (its "
                   "asymptote the base's matmul efficiency) and block curve on every fifth row")
      ->excludes(profile)
      ->excludes("--alpa-csv");
  commands.calibrate
      ->add_option("--megatron-h100-csv", c.megatron_h100_csv,
                   "Megatron-Core's H100 weak-scaling runs (the shared data's "
                   "reference/megatron_h100_weak_scaling_2024.csv): fit the device's matmul "
                   "efficiency on the smallest and the largest run")
      ->excludes(profile)
      ->excludes("--alpa-csv")
      ->excludes("--vtrain-csv");
  commands.calibrate
      ->add_flag("--amp-profile", c.amp_profile,
                 "fit the T4's matmul efficiency, block curve and intra-node latency on AMP's "
                 "published GPT-2 layer profile (what `stratos validate amp` prices with)")
      ->excludes(profile)
      ->excludes("--alpa-csv")
      ->excludes("--vtrain-csv")
      ->excludes("--megatron-h100-csv");
  commands.calibrate->add_option(
      "--cluster", c.cluster,
      "base cluster: zoo name or .toml file, or local (this machine's worker processes, sized "
      "from the profile); default: p3.16xlarge-datasheet, with --vtrain-csv "
      "dgx-a100-80gb-datasheet, with --megatron-h100-csv dgx-h100-datasheet, with --amp-profile "
      "g4dn.12xlarge-datasheet");
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
                   "`stratos profile --device cuda --dtype bf16`); default: f32 for --cluster "
                   "local, else f16")
      ->check(cli::OneOf({"f16", "bf16", "f32"}));
  commands.calibrate
      ->add_option("--memory-runs", c.memory_runs,
                   "directory of CUDA runs' measurement.json files (`stratos run --device cuda`): "
                   "set the device's memory, what lies outside the caching allocator and its "
                   "fragmentation from them")
      ->excludes("--vtrain-csv")
      ->excludes("--megatron-h100-csv")
      ->excludes("--amp-profile");
  commands.calibrate
      ->add_option("--framework-memory-runs", c.framework_memory_runs,
                   "directory of CUDA runs' measurement.json files taken on another device: set "
                   "only what lies outside the caching allocator and its fragmentation from them "
                   "(the framework's memory, not the GPU's), keeping the device's memory")
      ->excludes("--memory-runs");
  commands.calibrate->add_flag(
      "--no-layer-curve", c.no_layer_curve,
      "fit no block curve from the profile's transformer blocks (blocks are then priced from the "
      "GEMM curve and the memory roofline alone)");
  commands.calibrate->add_flag(
      "--no-pipelining", c.no_pipelining,
      "fit each network level's latency and bandwidth only, no pipelining term c sqrt(steps x "
      "bytes) (costmodel/collective.h; it follows the bus bandwidth's ramp over message sizes)");
  commands.calibrate->add_option(
      "--name", c.name, "name of the calibrated cluster (default: the --save-as name, else "
                        "<base>-calibrated)");
  CLI::Option* output = commands.calibrate->add_option(
      "--output", c.output, "calibrated cluster file (.toml; default: out/calibrate/cluster.toml)");
  commands.calibrate
      ->add_option("--save-as", c.save_as,
                   "save it in your own zoo as NAME (every command then takes --cluster NAME; "
                   "$STRATOS_USER_ZOO, else $XDG_DATA_HOME/stratos, else "
                   "~/.local/share/stratos)")
      ->excludes(output);

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
