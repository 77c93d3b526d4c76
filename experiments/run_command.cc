// `stratos run` and `stratos worker` (experiments/run_commands.h).
#include <fmt/format.h>
#include <nlohmann/json.hpp>
#include <torch/torch.h>

#include <algorithm>
#include <cmath>

#include "calibrate/alpa_profile.h"
#include "calibrate/memory_fit.h"
#include "costmodel/error.h"
#include "costmodel/json_reader.h"
#include "experiments/commands.h"
#include "experiments/output.h"
#include "experiments/run_commands.h"
#include "runtime/data.h"
#include "runtime/device.h"
#include "runtime/kineto_trace.h"
#include "runtime/launcher.h"
#include "runtime/report.h"
#include "runtime/trainer.h"

namespace stratos {

namespace {

TrainOptions OptionsFromFlags(const RunFlags& flags) {
  TrainOptions options;
  options.model = flags.model;
  options.seq_length = flags.seq_length;
  options.steps = flags.steps;
  options.learning_rate = flags.learning_rate;
  options.seed = static_cast<uint64_t>(flags.seed);
  options.data_path = flags.data_path;
  options.output_dir = flags.output_dir;
  options.checkpoint_dir = flags.checkpoint_dir;
  options.checkpoint_every = flags.checkpoint_every;
  options.resume = flags.resume;
  options.timeout_seconds = flags.timeout_seconds;
  options.backend = flags.backend;
  options.device = flags.device;
  options.dtype = flags.dtype;
  options.fp32_residual_connection = flags.fp32_residual_connection;
  options.cluster = flags.cluster;
  options.threads = flags.threads;
  options.kineto_step = flags.kineto_step;
  // The rules that join two flags or the build, named by flag (TrainOptions::Validate names the
  // run_options.json keys).
  const std::string where = "command line";
  if (flags.dtype == "bf16" && flags.device != "cuda")
    ThrowInputError(where, "--dtype", "bf16",
                    "needs --device cuda (bf16 autocast); the CPU runtime trains in fp32");
  if (flags.fp32_residual_connection && flags.dtype != "bf16")
    ThrowInputError(where, "--fp32-residual-connection", "set",
                    "applies to --dtype bf16 only (an f32 run's residual stream is fp32)");
  if (flags.kineto_step >= 0 && !KinetoAvailable())
    ThrowInputError(where, "--kineto-step", flags.kineto_step,
                    "this build has no Kineto profiler (LibTorch >= 2.4, cmake STRATOS_KINETO)");
  if (flags.device == "cuda" && !torch::cuda::is_available())
    ThrowInputError(where, "--device", "cuda", NoCudaRule());
  if (!flags.plan_file.empty()) {
    options.plan = ReadPlanFile(flags.plan_file);
  } else {
    const ModelSpec model = LoadRuntimeModel(flags.model, flags.seq_length);
    options.plan = UniformRuntimePlan(
        model, flags.pipeline_parallel, flags.data_parallel, flags.tensor_parallel,
        flags.micro_batch_size, flags.global_batch_size,
        ParseSchedule(flags.schedule, "command line: --schedule"), flags.zero_stage,
        ParseRecompute(flags.recompute, "command line: --recompute"), flags.virtual_stages);
    const CompressionSpec compression = CompressionFromCommandLine(
        flags.grad_compression, flags.topk_density, flags.topk_momentum, flags.powersgd_rank);
    for (StagePlan& stage : options.plan.stages) stage.config.grad_compression = compression;
  }
  options.Validate();
  return options;
}

void PrintMfu(const nlohmann::json& measurement) {
  fmt::print("MFU {:.1f}% ({:.4g} TFLOP/s of model FLOPs per device; peak {:.4g} TFLOP/s of {})\n",
             100.0 * measurement.at("mfu").get<double>(),
             measurement.at("model_flops_per_second_per_device").get<double>() / 1e12,
             measurement.at("mfu_peak_flops").get<double>() / 1e12,
             measurement.at("mfu_peak_source").get<std::string>());
}


}  // namespace

CompressionSpec CompressionFromCommandLine(const std::string& name, double topk_density,
                                          double topk_momentum, int powersgd_rank) {
  // The flags' ranges are checked while parsing (experiments/main.cc); the plan's validation
  // checks the spec again with the stage it belongs to.
  CompressionSpec spec;
  spec.kind = ParseGradCompression(name, "command line", "--grad-compression");
  spec.topk_density = topk_density;
  spec.topk_momentum = topk_momentum;
  spec.powersgd_rank = powersgd_rank;
  return spec;
}

int RunRun(const RunArgs& args) {
  const TrainOptions options = OptionsFromFlags(args.flags);
  const std::string where = args.flags.plan_file.empty() ? "command line" : args.flags.plan_file;
  if (args.nproc != 0 && args.nproc != options.plan.NumDevices())
    ThrowInputError("command line", "--nproc", args.nproc,
                    fmt::format("must equal the plan's {} devices ({})", options.plan.NumDevices(),
                                where));
  // Refused before anything is launched (RunLocal checks again).
  const ModelSpec model = LoadRuntimeModel(options.model, options.seq_length);
  const CharDataset data(options.data_path.empty() ? DefaultDataPath() : options.data_path,
                         model.seq_length);
  CheckRuntimePlan(model, options.plan, options.plan.NumDevices(), where, data.VocabSize(),
                   options.cluster);
  fmt::print("plan: {}\n", options.plan.Summary());
  fmt::print("launching {} workers; logs in {}/logs\n", options.plan.NumDevices(),
             options.output_dir);
  const LaunchResult result =
      RunLocal(options, SelfExecutable(), {"worker", "--config"}, args.deadline_seconds);
  if (!result.Succeeded()) {
    fmt::print(stderr, "stratos run: workers failed: {}\n{}", result.Summary(),
               WorkerErrors(options.output_dir));
    return kExitNoResult;
  }
  const auto measurement =
      ReadJsonFile(options.output_dir + "/measurement.json");
  const auto losses = measurement.at("losses").get<std::vector<double>>();
  const int first_step = measurement.at("first_step").get<int>();
  for (size_t i = 0; i < losses.size(); ++i)
    fmt::print("step {:4d}  loss {:.4f}\n", first_step + static_cast<int>(i), losses[i]);
  const auto& comparison = measurement.at("predicted_vs_measured");
  fmt::print("iteration {:.4f} s (predicted {:.4f} s), {:.0f} tokens/s\n",
             measurement.at("iteration_seconds").get<double>(),
             comparison.at("predicted_iteration_seconds").get<double>(),
             measurement.at("tokens_per_second").get<double>());
  for (const auto& stage : measurement.at("stages"))
    fmt::print("  stage {}: forward {:.4f} s, backward {:.4f} s, communication {:.4f} s, idle "
               "{:.4f} s per iteration\n",
               stage.at("stage").get<int>(), stage.at("forward_seconds").get<double>(),
               stage.at("backward_seconds").get<double>(),
               stage.at("communication_seconds").get<double>(),
               stage.at("idle_seconds").get<double>());
  for (const auto& stage : comparison.at("stages")) {
    if (!stage.contains("measured_peak_allocated_bytes")) continue;
    constexpr double kGiB = 1024.0 * 1024.0 * 1024.0;
    fmt::print("  stage {}: peak memory predicted {:.2f} GiB; measured {:.2f} GiB in tensors, "
               "{:.2f} GiB held by the caching allocator, {:.2f} GiB outside it\n",
               stage.at("stage").get<int>(),
               stage.at("predicted_peak_memory_bytes").get<double>() / kGiB,
               stage.at("measured_peak_allocated_bytes").get<double>() / kGiB,
               stage.at("measured_peak_reserved_bytes").get<double>() / kGiB,
               stage.at("measured_outside_allocator_bytes").get<double>() / kGiB);
  }
  PrintMfu(measurement);
  fmt::print("wrote {0}/measurement.json, {0}/trace.json, {0}/predicted_vs_measured.json\n",
             options.output_dir);
  if (options.kineto_step >= 0)
    fmt::print("wrote the Kineto trace of step {} to {}/kineto/rank_<r>.json\n",
               options.kineto_step, options.output_dir);
  return kExitSuccess;
}

namespace {

// The reports of one run re-derived from its measurement.json (RunRunReport).
nlohmann::json RederiveRun(const std::string& where, const std::string& cluster,
                           const std::string& output_dir) {
  const nlohmann::json measurement = ReadJsonInputFile(where, "measurement");
  RunRecord record;
  try {
    record.options = measurement.at("options");
    if (!cluster.empty()) record.options["cluster"] = cluster;
    // Nothing is traced again: a run traced by a build with Kineto re-derives on any build.
    record.options["kineto_step"] = -1;
    const TrainOptions options = TrainOptionsFromJson(record.options, where + ": options");
    record.model = LoadRuntimeModel(options.model, options.seq_length);
    record.first_step = measurement.at("first_step").get<int>();
    record.losses = measurement.at("losses").get<std::vector<double>>();
    record.flops_per_worker =
        measurement.at("predicted_vs_measured").at("flops_per_worker").get<double>();
    // Runs measured before the key existed: CUDA runs had LibTorch 2.x (fused attention).
    record.flash_attention =
        measurement.contains("attention")
            ? measurement.at("attention").get<std::string>() == "fused"
            : record.options.value("device", "cpu") == "cuda";
    for (const nlohmann::json& rank : measurement.at("ranks")) record.ranks.push_back(rank);
  } catch (const nlohmann::json::exception& e) {
    throw InputError(fmt::format("{}: not a stratos.measurement/1 file ({})", where, e.what()));
  }
  EnsureDirectory(output_dir);
  return WriteRunReports(record, output_dir);
}

}  // namespace

namespace {

// The stage of a run whose measured peak of tensor bytes is largest, with its predicted peak and
// the device memory figures; null for a run without memory measurements (CPU).
nlohmann::json PeakMemoryStage(const nlohmann::json& comparison) {
  nlohmann::json worst;
  for (const nlohmann::json& stage : comparison.at("stages")) {
    if (!stage.contains("measured_peak_allocated_bytes")) continue;
    if (worst.is_null() || stage.at("measured_peak_allocated_bytes").get<double>() >
                               worst.at("measured_peak_allocated_bytes").get<double>())
      worst = stage;
  }
  if (worst.is_null()) return worst;
  const double predicted = worst.at("predicted_peak_memory_bytes").get<double>();
  const double allocated = worst.at("measured_peak_allocated_bytes").get<double>();
  return {{"stage", worst.at("stage")},
          {"predicted_peak_bytes", predicted},
          {"measured_peak_allocated_bytes", allocated},
          {"measured_peak_reserved_bytes", worst.at("measured_peak_reserved_bytes")},
          {"measured_outside_allocator_bytes", worst.at("measured_outside_allocator_bytes")},
          {"measured_device_total_bytes", worst.at("measured_device_total_bytes")},
          {"relative_error", allocated > 0 ? predicted / allocated - 1.0 : 0.0}};
}

// Over the runs with memory measurements: the predicted peak of tensor bytes against the
// measured one (MAPE), and the framework constants `calibrate --memory-runs` would fit from them
// (calibrate/memory_fit.h: the medians of the bytes held outside the caching allocator and of its
// overhead over the tensors at their peak). Printed; null without runs.
nlohmann::json MemoryReport(const nlohmann::json& runs) {
  constexpr double kGiB = 1024.0 * 1024.0 * 1024.0;
  double sum_abs_error = 0;
  std::vector<double> overheads;
  std::vector<RunMemoryRow> rows;
  for (const nlohmann::json& run : runs) {
    const nlohmann::json& m = run.at("memory");
    if (m.is_null()) continue;
    if (rows.empty())
      fmt::print("\n{:<48} {:>10} {:>10} {:>8} {:>10} {:>9}\n", "peak memory of the run (GiB)",
                 "measured", "predicted", "error", "allocator", "outside");
    RunMemoryRow row;
    row.run = PathForDisplay(run.at("measurement").get<std::string>());
    row.device_total_bytes = m.at("measured_device_total_bytes").get<double>();
    row.outside_allocator_bytes = m.at("measured_outside_allocator_bytes").get<double>();
    row.peak_allocated_bytes = m.at("measured_peak_allocated_bytes").get<double>();
    row.peak_reserved_bytes = m.at("measured_peak_reserved_bytes").get<double>();
    rows.push_back(row);
    overheads.push_back(row.peak_reserved_bytes / row.peak_allocated_bytes - 1.0);
    const double error = m.at("relative_error").get<double>();
    sum_abs_error += std::abs(error);
    fmt::print("{:<48} {:>10.2f} {:>10.2f} {:>+7.1f}% {:>10.2f} {:>9.2f}\n", row.run,
               row.peak_allocated_bytes / kGiB, m.at("predicted_peak_bytes").get<double>() / kGiB,
               100 * error, row.peak_reserved_bytes / kGiB, row.outside_allocator_bytes / kGiB);
  }
  if (rows.empty()) return nullptr;
  const MemoryFit fit = FitDeviceMemory(rows, "run-report");
  const double mape = sum_abs_error / static_cast<double>(rows.size());
  fmt::print("MAPE of the predicted peak memory (tensors) over {} run(s): {:.1f}%\n", rows.size(),
             100 * mape);
  fmt::print("held outside the caching allocator: median {:.3f} GiB; the allocator's peak over "
             "the tensors' peak: median +{:.1f}% (min +{:.1f}%, max +{:.1f}%)\n",
             fit.reserved_memory_bytes / kGiB, 100 * fit.memory_fragmentation,
             100 * *std::min_element(overheads.begin(), overheads.end()),
             100 * *std::max_element(overheads.begin(), overheads.end()));
  return {{"runs", rows.size()},
          {"mape", mape},
          {"median_outside_allocator_bytes", fit.reserved_memory_bytes},
          {"median_fragmentation", fit.memory_fragmentation}};
}

}  // namespace

int RunRunReport(const RunReportArgs& args) {
  fmt::print("{:<48} {:>10} {:>10} {:>8} {:>6}  {}\n", "run", "measured s", "predicted", "error",
             "MFU", "plan");
  nlohmann::json runs = nlohmann::json::array();
  double sum_abs_error = 0;
  for (size_t i = 0; i < args.measurement_files.size(); ++i) {
    const std::string& where = args.measurement_files[i];
    const std::string dir = fmt::format("{}/{}", args.output_dir, i);
    const nlohmann::json derived = RederiveRun(where, args.cluster, dir);
    const auto& comparison = derived.at("predicted_vs_measured");
    const double measured = comparison.at("measured_iteration_seconds").get<double>();
    const double predicted = comparison.at("predicted_iteration_seconds").get<double>();
    const double error = measured > 0 ? predicted / measured - 1.0 : 0.0;
    sum_abs_error += std::abs(error);
    fmt::print("{:<48} {:>10.4f} {:>10.4f} {:>+7.1f}% {:>5.1f}%  {}\n", PathForDisplay(where),
               measured, predicted, 100 * error, 100 * derived.at("mfu").get<double>(),
               derived.at("plan_summary").get<std::string>());
    runs.push_back({{"measurement", where},
                    {"output_dir", dir},
                    {"cluster", comparison.at("cluster")},
                    {"measured_iteration_seconds", measured},
                    {"predicted_iteration_seconds", predicted},
                    {"relative_error", error},
                    {"mfu", derived.at("mfu")},
                    {"memory", PeakMemoryStage(comparison)}});
  }
  const double mape = sum_abs_error / static_cast<double>(args.measurement_files.size());
  fmt::print("MAPE of the predicted iteration time over {} run(s): {:.1f}%\n",
             args.measurement_files.size(), 100 * mape);
  nlohmann::json summary = {{"schema", "stratos.run_report/1"}, {"runs", runs}, {"mape", mape}};
  if (const nlohmann::json memory = MemoryReport(runs); !memory.is_null())
    summary["memory"] = memory;
  WriteJsonAtomically(args.output_dir + "/summary.json", summary);
  fmt::print("wrote {}/summary.json and each run's reports in {}/<i>/\n", args.output_dir,
             args.output_dir);
  return kExitSuccess;
}

int RunWorker(const WorkerArgs& args) {
  TrainOptions options;
  if (!args.config_file.empty()) {
    options = TrainOptionsFromJson(ReadJsonInputFile(args.config_file, "run options"),
                                   args.config_file);
  } else {
    options = OptionsFromFlags(args.flags);
  }
  return RunWorkerProcess(options, RendezvousFromEnvironment());
}

}  // namespace stratos
