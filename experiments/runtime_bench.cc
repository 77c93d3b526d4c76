// `stratos bench runtime` (experiments/runtime_bench.h).
#include "experiments/runtime_bench.h"

#include <fmt/format.h>
#include <nlohmann/json.hpp>
#include <torch/torch.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <fcntl.h>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <optional>
#include <thread>
#include <vector>

#include "costmodel/error.h"
#include "calibrate/calibrate.h"
#include "calibrate/profile.h"
#include "costmodel/evaluate.h"
#include "experiments/output.h"
#include "experiments/profile_command.h"
#include "experiments/run_commands.h"
#include "runtime/communicator.h"
#include "runtime/data.h"
#include "runtime/gpt.h"
#include "runtime/profiler.h"
#include "runtime/runtime_plan.h"
#include "runtime/trainer.h"
#include "validate/rank_correlation.h"

namespace stratos {

namespace {

using Clock = std::chrono::steady_clock;
constexpr double kOverheadTargetPercent = 10.0;

struct BenchPlan {
  int pp, dp, tp;
  int zero = 0;  // ZeRO stage
  std::string Name() const {
    return fmt::format("{}x{}x{}{}", pp, dp, tp, zero > 0 ? fmt::format("-zero{}", zero) : "");
  }
};

// PPxDPxTP, at most 4 worker processes; the last two shard the parameters (ZeRO-3).
const std::vector<BenchPlan> kPlans = {{1, 1, 1}, {2, 1, 1}, {1, 2, 1}, {1, 1, 2},
                                       {2, 2, 1}, {1, 2, 2}, {4, 1, 1}, {2, 1, 2},
                                       {1, 4, 1}, {1, 2, 1, 3}, {1, 4, 1, 3}};

struct PlanRow {
  BenchPlan plan;
  std::string status = "failed";  // ok | failed
  std::string error;
  double measured_seconds = 0;
  double predicted_seconds = 0;
  double simulated_seconds = 0;
  double error_percent = 0;  // (measured - predicted) / measured * 100
  double calibrated_seconds = 0;        // predicted on the calibrated cluster description
  double calibrated_error_percent = 0;
  double compute_seconds = 0;           // ... whose compute is calibrated too
  double compute_error_percent = 0;
  nlohmann::json measurement;
  std::vector<double> losses;
};

nlohmann::json ReadJson(const std::string& path) {
  std::ifstream in(path);
  if (!in) throw std::runtime_error(fmt::format("{}: cannot open", path));
  return nlohmann::json::parse(in);
}

// Sends this process's stdout to `path` while alive (RunRun prints every step's loss).
class StdoutRedirect {
 public:
  explicit StdoutRedirect(const std::string& path) {
    std::fflush(stdout);
    saved_ = dup(STDOUT_FILENO);
    const int fd = open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    if (saved_ >= 0 && fd >= 0) dup2(fd, STDOUT_FILENO);
    if (fd >= 0) close(fd);
  }
  ~StdoutRedirect() {
    std::fflush(stdout);
    if (saved_ >= 0) {
      dup2(saved_, STDOUT_FILENO);
      close(saved_);
    }
  }
  StdoutRedirect(const StdoutRedirect&) = delete;
  StdoutRedirect& operator=(const StdoutRedirect&) = delete;

 private:
  int saved_ = -1;
};

PlanRow RunPlan(const BenchRuntimeArgs& args, const BenchPlan& plan, const std::string& dir) {
  PlanRow row;
  row.plan = plan;
  RunArgs run;
  run.flags.pipeline_parallel = plan.pp;
  run.flags.data_parallel = plan.dp;
  run.flags.tensor_parallel = plan.tp;
  run.flags.zero_stage = plan.zero;
  run.flags.micro_batch_size = args.micro_batch_size;
  run.flags.global_batch_size = args.global_batch_size;
  run.flags.steps = args.steps;
  run.flags.output_dir = dir;
  run.flags.threads = 1;
  run.flags.backend = "gloo";
  run.deadline_seconds = args.deadline_seconds;
  std::filesystem::create_directories(dir);
  try {
    int rc;
    {
      StdoutRedirect quiet(dir + "/stdout.txt");
      rc = RunRun(run);
    }
    if (rc != 0) {
      row.error = fmt::format("workers failed (see {}/errors and {}/logs)", dir, dir);
      return row;
    }
    const nlohmann::json measurement = ReadJson(dir + "/measurement.json");
    const nlohmann::json comparison = ReadJson(dir + "/predicted_vs_measured.json");
    row.measured_seconds = measurement.at("iteration_seconds").get<double>();
    row.predicted_seconds = comparison.at("predicted_iteration_seconds").get<double>();
    row.simulated_seconds = comparison.at("simulated_iteration_seconds").get<double>();
    row.losses = measurement.at("losses").get<std::vector<double>>();
    row.measurement = measurement;
    if (row.measured_seconds <= 0) {
      row.error = "measured iteration time is 0";
      return row;
    }
    row.error_percent =
        (row.measured_seconds - row.predicted_seconds) / row.measured_seconds * 100.0;
    row.status = "ok";
  } catch (const std::exception& e) {
    row.error = e.what();
  }
  return row;
}

// What a prediction of a measured run needs: its plan, model and workers, and how many workers
// share each of this machine's hardware threads (>= 1; one intra-op thread per worker).
struct MeasuredRun {
  Plan plan;
  ModelSpec model;
  int workers = 0;
  double slowdown = 1;
};

MeasuredRun ReadMeasuredRun(const nlohmann::json& measurement) {
  MeasuredRun run;
  run.plan = PlanFromJson(measurement.at("plan"), "measurement.json");
  run.model = LoadRuntimeModel(measurement.at("model").get<std::string>(), 0);
  run.workers = measurement.at("world_size").get<int>();
  run.slowdown = LocalWorkerSlowdown(run.workers);
  return run;
}

// The cost model's prediction of a measured run on a calibrated description of this machine:
// the calibrated network levels, and the run's measured per-worker FLOP/s shared among the
// workers when there are more of them than hardware threads.
double CalibratedPrediction(const nlohmann::json& measurement, const ClusterSpec& calibrated) {
  const MeasuredRun run = ReadMeasuredRun(measurement);
  const double flops = measurement.at("predicted_vs_measured").at("flops_per_worker").get<double>();
  Problem problem = RuntimeProblem(run.model, run.plan, run.workers, flops / run.slowdown);
  problem.cluster.networks = calibrated.networks;
  return Evaluate(problem, run.plan).iteration_seconds;
}

// The same on a description whose compute is calibrated too: the device's GEMM curve and block
// curve fitted on GEMMs and blocks of gpt-tiny's shapes (not the run's single large GEMM), every
// compute term slowed by the share of a hardware thread each worker gets (SlowedDevice).
double ComputeCalibratedPrediction(const nlohmann::json& measurement,
                                   const ClusterSpec& calibrated) {
  const MeasuredRun run = ReadMeasuredRun(measurement);
  DeviceSpec device = SlowedDevice(calibrated.devices.front(), run.slowdown);
  Problem problem = RuntimeProblem(run.model, run.plan, run.workers, device.peak_flops);
  device.memory_bytes = problem.cluster.devices.front().memory_bytes;
  device.name = problem.cluster.devices.front().name;
  problem.cluster.devices.front() = device;
  problem.cluster.networks = calibrated.networks;
  return Evaluate(problem, run.plan).iteration_seconds;
}

// GEMMs and transformer blocks of the shapes gpt-tiny trains (hidden 64, 4 heads, sequence 64,
// microbatches of 1-4 samples, TP 1 and 2; and hidden 128), timed in this process on one thread.
Profile ProfileModelShapes() {
  ProfileOptions options;
  options.gemm_sizes = {16, 32, 64, 128, 256, 512};
  options.layer_hiddens = {64, 128};
  options.layer_head_dims = {16};
  options.layer_seq_lens = {64};
  options.layer_micro_batches = {1, 2, 4};
  options.layer_tensor_parallel = {1, 2};
  options.Validate();
  const int saved_threads = torch::get_num_threads();
  torch::set_num_threads(1);
  Profile profile;
  profile.matmuls = ProfileMatmuls(options);
  profile.layers = ProfileLayers(options);
  torch::set_num_threads(saved_threads);
  return profile;
}

struct PlainResult {
  double iteration_seconds = 0;  // mean over steps 1 .. steps - 1
  std::vector<double> losses;
};

// Plain single-process LibTorch training of the same model: the runtime's GptStage holding all
// layers (tp = a self communicator), the same batches and microbatch split, torch::optim::Adam.
PlainResult RunPlain(const BenchRuntimeArgs& args) {
  const RunFlags flags;           // the `stratos run` defaults: model, seed, learning rate
  const TrainOptions defaults;    // Adam hyper-parameters
  const ModelSpec model = LoadRuntimeModel(flags.model, flags.seq_length);
  const CharDataset data(DefaultDataPath(), model.seq_length);
  const uint64_t seed = static_cast<uint64_t>(flags.seed);
  auto self = MakeSelfCommunicator("plain");
  GptStage gpt(model, 0, model.NumLayers(), Recompute::kNone, self.get(), seed);
  torch::optim::Adam adam(
      gpt.Parameters(),
      torch::optim::AdamOptions(flags.learning_rate)
          .betas({defaults.adam_beta1, defaults.adam_beta2})
          .eps(defaults.adam_epsilon)
          .weight_decay(0));
  const int B = args.global_batch_size;
  const int b = args.micro_batch_size;
  const int m = B / b;
  PlainResult result;
  std::vector<double> step_seconds;
  for (int step = 0; step < args.steps; ++step) {
    const Clock::time_point start = Clock::now();
    adam.zero_grad();
    double loss_sum = 0;
    for (int i = 0; i < m; ++i) {
      const CharDataset::Batch batch = data.TrainBatch(seed, step, B, i * b, b);
      torch::Tensor loss = gpt.Forward(batch.inputs, batch.targets);
      loss_sum += loss.item<double>() / m;
      (loss / static_cast<double>(m)).backward();
    }
    adam.step();
    step_seconds.push_back(std::chrono::duration<double>(Clock::now() - start).count());
    result.losses.push_back(loss_sum);
  }
  double sum = 0;
  for (size_t i = 1; i < step_seconds.size(); ++i) sum += step_seconds[i];
  result.iteration_seconds = sum / static_cast<double>(step_seconds.size() - 1);
  return result;
}

}  // namespace

int RunBenchRuntime(const BenchRuntimeArgs& args) {
  if (args.micro_batch_size < 1)
    ThrowInputError("command line", "micro_batch_size", args.micro_batch_size, "must be >= 1");
  if (args.global_batch_size < 1 || args.global_batch_size % (4 * args.micro_batch_size) != 0)
    ThrowInputError("command line", "global_batch_size", args.global_batch_size,
                    fmt::format("must be a positive multiple of 4 x micro-batch = {} (DP up to 4)",
                                4 * args.micro_batch_size));
  EnsureDirectory(args.output_dir);
  const std::string dir = std::filesystem::absolute(args.output_dir).string();

  fmt::print("stratos bench runtime: gpt-tiny on tinyshakespeare, global batch {}, micro-batch {}, "
             "{} steps (first skipped), 1 thread per worker, Gloo\n",
             args.global_batch_size, args.micro_batch_size, args.steps);

  // (2) first, in this otherwise idle process: plain single-process LibTorch training.
  const int saved_threads = torch::get_num_threads();
  torch::set_num_threads(1);
  PlainResult plain;
  std::string plain_error;
  try {
    plain = RunPlain(args);
  } catch (const std::exception& e) {
    plain_error = e.what();
  }
  torch::set_num_threads(saved_threads);

  // (0) The local cluster description calibrated from measurements that are not the bench's
  // runs: a collective profile over 4 worker processes (stratos profile), fitted by calibrate/.
  std::optional<ClusterSpec> calibrated, compute_calibrated;
  std::string calibration_error;
  try {
    ProfileArgs profile_args;
    profile_args.output_dir = dir + "/profile";
    profile_args.parts = {"collective"};
    profile_args.nproc = 4;
    fmt::print("profiling collectives for the calibrated cluster description ...\n");
    std::fflush(stdout);
    int rc;
    {
      StdoutRedirect quiet(dir + "/profile_stdout.txt");
      rc = RunProfile(profile_args);
    }
    if (rc != 0) throw std::runtime_error("stratos profile failed (see " + dir + "/profile/logs)");
    CalibrateOptions options;
    options.source = "stratos bench runtime: collective profile of 4 local Gloo workers";
    Profile profile = ReadProfileDir(profile_args.output_dir);
    calibrated = Calibrate(LocalCpuCluster(4, 1e10), profile, options).cluster;
    // (0b) and its compute: GEMMs and blocks of the model's shapes, measured apart from the runs.
    fmt::print("profiling GEMMs and blocks of gpt-tiny's shapes for the compute calibration ...\n");
    std::fflush(stdout);
    const Profile shapes = ProfileModelShapes();
    profile.matmuls = shapes.matmuls;
    profile.layers = shapes.layers;
    WriteProfileDir(profile, dir + "/profile-compute");
    double best_flops = 0;  // the peak must not cap the fitted curve
    for (const MatmulRow& row : profile.matmuls)
      best_flops = std::max(best_flops, row.flops / row.seconds);
    options.matmul_dtype = "f32";
    options.source = "stratos bench runtime: collective profile of 4 local Gloo workers, GEMMs "
                     "and blocks of gpt-tiny's shapes on one thread";
    const CalibrationResult result =
        Calibrate(LocalCpuCluster(4, 1.25 * best_flops), profile, options);
    compute_calibrated = result.cluster;
    if (result.layer)
      fmt::print("  block curve fitted on {} blocks: power {}, floors {:.0f} / {:.0f} us "
                 "(forward / backward)\n",
                 result.layer->choice.rows, result.layer->choice.curve.power,
                 1e6 * result.layer->choice.curve.forward_floor_seconds,
                 1e6 * result.layer->choice.curve.backward_floor_seconds);
  } catch (const std::exception& e) {
    calibration_error = e.what();
    fmt::print(stderr, "calibration failed: {}\n", calibration_error);
  }

  // (1) the plans, launched as `stratos run` launches them.
  std::vector<PlanRow> rows;
  for (const BenchPlan& plan : kPlans) {
    fmt::print("running {} ({} workers) ...\n", plan.Name(), plan.pp * plan.dp * plan.tp);
    std::fflush(stdout);
    rows.push_back(RunPlan(args, plan, dir + "/plans/" + plan.Name()));
    if (calibrated && rows.back().status == "ok") {
      PlanRow& row = rows.back();
      row.calibrated_seconds = CalibratedPrediction(row.measurement, *calibrated);
      row.calibrated_error_percent =
          (row.measured_seconds - row.calibrated_seconds) / row.measured_seconds * 100.0;
    }
    if (compute_calibrated && rows.back().status == "ok") {
      PlanRow& row = rows.back();
      row.compute_seconds = ComputeCalibratedPrediction(row.measurement, *compute_calibrated);
      row.compute_error_percent =
          (row.measured_seconds - row.compute_seconds) / row.measured_seconds * 100.0;
    }
    if (rows.back().status != "ok")
      fmt::print(stderr, "  {} failed: {}\n", plan.Name(), rows.back().error);
  }

  fmt::print("\n{:<11} {:>7} {:>12} {:>12} {:>9} {:>13} {:>9} {:>13} {:>9}\n", "PPxDPxTP",
             "workers", "measured s", "predicted s", "error %", "calibrated s", "error %",
             "+compute s", "error %");
  double ape_sum = 0, calibrated_ape_sum = 0, compute_ape_sum = 0;
  int ok = 0;
  for (const PlanRow& row : rows) {
    if (row.status == "ok") {
      fmt::print("{:<11} {:>7} {:>12.5f} {:>12.5f} {:>+9.1f} {:>13.5f} {:>+9.1f} {:>13.5f} "
                 "{:>+9.1f}\n",
                 row.plan.Name(), row.plan.pp * row.plan.dp * row.plan.tp, row.measured_seconds,
                 row.predicted_seconds, row.error_percent, row.calibrated_seconds,
                 row.calibrated_error_percent, row.compute_seconds, row.compute_error_percent);
      ape_sum += std::abs(row.error_percent);
      calibrated_ape_sum += std::abs(row.calibrated_error_percent);
      compute_ape_sum += std::abs(row.compute_error_percent);
      ++ok;
    } else {
      fmt::print("{:<11} {:>7} {:>12} {:>12} {:>9}\n", row.plan.Name(),
                 row.plan.pp * row.plan.dp * row.plan.tp, "failed", "-", "-");
    }
  }
  const double mape = ok > 0 ? ape_sum / ok : 0.0;
  fmt::print("MAPE over {} plans: {:.1f}% (error = (measured - predicted) / measured)\n", ok, mape);
  const double calibrated_mape = ok > 0 && calibrated ? calibrated_ape_sum / ok : 0.0;
  if (calibrated)
    fmt::print("MAPE with the calibrated description (loopback network fitted on a separate "
               "collective profile; workers share the {} hardware threads): {:.1f}%\n",
               std::thread::hardware_concurrency(), calibrated_mape);
  const double compute_mape = ok > 0 && compute_calibrated ? compute_ape_sum / ok : 0.0;
  if (compute_calibrated)
    fmt::print("MAPE with the compute calibrated too (GEMM and block curves fitted on gpt-tiny's "
               "shapes, profiled apart from the runs): {:.1f}%\n",
               compute_mape);

  // The ranking a planner needs: Spearman's rho of predicted against measured times over the
  // plans that ran, and how the plan predicted fastest fares against the fastest measured.
  std::vector<double> measured_ok, predicted_ok, calibrated_ok, compute_ok;
  for (const PlanRow& row : rows)
    if (row.status == "ok") {
      measured_ok.push_back(row.measured_seconds);
      predicted_ok.push_back(row.predicted_seconds);
      calibrated_ok.push_back(row.calibrated_seconds);
      compute_ok.push_back(row.compute_seconds);
    }
  nlohmann::json ranking = nlohmann::json::object();
  auto rank_report = [&](const std::vector<double>& predicted, const std::string& which) {
    if (measured_ok.size() < 3) return;
    const double rho = SpearmanRho(predicted, measured_ok);
    const size_t best_predicted =
        std::min_element(predicted.begin(), predicted.end()) - predicted.begin();
    const double best_measured = *std::min_element(measured_ok.begin(), measured_ok.end());
    const double shortfall = measured_ok[best_predicted] / best_measured - 1.0;
    fmt::print("ranking on the {} description: Spearman {:.3f} over {} plans (target >= 0.8: {}); "
               "the plan predicted fastest measures {:.1f}% above the fastest measured (target "
               "<= 10%: {})\n",
               which, rho, measured_ok.size(), rho >= 0.8 ? "met" : "NOT met", 100 * shortfall,
               shortfall <= 0.10 ? "met" : "NOT met");
    ranking[which] = {{"spearman", rho},
                      {"plans", measured_ok.size()},
                      {"best_predicted_over_best_measured_percent", 100 * shortfall}};
  };
  rank_report(predicted_ok, "assumed");
  if (calibrated) rank_report(calibrated_ok, "calibrated");
  if (compute_calibrated) rank_report(compute_ok, "compute-calibrated");

  const PlanRow& base = rows.front();  // 1x1x1
  double overhead = 0;
  double loss_diff = 0;
  const bool have_overhead =
      plain_error.empty() && base.status == "ok" && plain.iteration_seconds > 0;
  if (have_overhead) {
    overhead = (base.measured_seconds / plain.iteration_seconds - 1.0) * 100.0;
    for (size_t i = 0; i < std::min(plain.losses.size(), base.losses.size()); ++i)
      loss_diff = std::max(loss_diff, std::abs(plain.losses[i] - base.losses[i]));
    fmt::print("plain single-process LibTorch (GptStage of all layers, torch::optim::Adam, no "
               "plan machinery): {:.5f} s/iteration\n",
               plain.iteration_seconds);
    fmt::print("runtime 1x1x1: {:.5f} s/iteration -> overhead {:+.1f}% (target <= {:.0f}%: {})\n",
               base.measured_seconds, overhead, kOverheadTargetPercent,
               overhead <= kOverheadTargetPercent ? "met" : "NOT met");
    fmt::print("loss agreement plain vs runtime 1x1x1: max |difference| {:.2e} over {} steps\n",
               loss_diff, std::min(plain.losses.size(), base.losses.size()));
  } else {
    fmt::print(stderr, "overhead not measured: {}\n",
               plain_error.empty() ? "the 1x1x1 run failed" : "plain loop: " + plain_error);
  }

  // Outputs.
  std::string csv = "plan,pp,dp,tp,zero,devices,status,measured_s,predicted_s,error_percent\n";
  nlohmann::json json_rows = nlohmann::json::array();
  for (const PlanRow& row : rows) {
    const BenchPlan& p = row.plan;
    csv += fmt::format("{},{},{},{},{},{},{},{:.6f},{:.6f},{:.3f}\n", p.Name(), p.pp, p.dp, p.tp,
                       p.zero, p.pp * p.dp * p.tp, row.status, row.measured_seconds,
                       row.predicted_seconds, row.error_percent);
    json_rows.push_back({{"plan", p.Name()},
                         {"pp", p.pp},
                         {"dp", p.dp},
                         {"tp", p.tp},
                         {"zero_stage", p.zero},
                         {"devices", p.pp * p.dp * p.tp},
                         {"status", row.status},
                         {"error", row.error},
                         {"measured_iteration_seconds", row.measured_seconds},
                         {"predicted_iteration_seconds", row.predicted_seconds},
                         {"simulated_iteration_seconds", row.simulated_seconds},
                         {"error_percent", row.error_percent},
                         {"calibrated_predicted_iteration_seconds", row.calibrated_seconds},
                         {"calibrated_error_percent", row.calibrated_error_percent},
                         {"compute_calibrated_predicted_iteration_seconds", row.compute_seconds},
                         {"compute_calibrated_error_percent", row.compute_error_percent},
                         {"run_dir", "plans/" + p.Name()}});
  }
  csv += fmt::format("plain,1,1,1,0,1,{},{:.6f},,\n", plain_error.empty() ? "ok" : "failed",
                     plain.iteration_seconds);
  nlohmann::json out = {
      {"schema", "stratos.runtime_bench/1"},
      {"model", RunFlags().model},
      {"global_batch_size", args.global_batch_size},
      {"micro_batch_size", args.micro_batch_size},
      {"steps", args.steps},
      {"warmup_steps_skipped", 1},
      {"threads_per_worker", 1},
      {"plans", json_rows},
      {"plans_ok", ok},
      {"mape_percent", mape},
      {"calibrated_mape_percent", calibrated ? nlohmann::json(calibrated_mape) : nlohmann::json()},
      {"compute_calibrated_mape_percent",
       compute_calibrated ? nlohmann::json(compute_mape) : nlohmann::json()},
      {"calibration_error", calibration_error},
      {"ranking", ranking},
      {"plain",
       {{"what", "one process, runtime GptStage of all layers with a self communicator, same "
                 "batches and microbatches, torch::optim::Adam, 1 intra-op thread"},
        {"status", plain_error.empty() ? "ok" : "failed"},
        {"error", plain_error},
        {"iteration_seconds", plain.iteration_seconds},
        {"losses", plain.losses}}},
      {"runtime_iteration_seconds", base.measured_seconds},
      {"overhead_percent", have_overhead ? nlohmann::json(overhead) : nlohmann::json()},
      {"overhead_target_percent", kOverheadTargetPercent},
      {"overhead_target_met", have_overhead && overhead <= kOverheadTargetPercent},
      {"max_loss_difference_plain_vs_1x1x1", have_overhead ? nlohmann::json(loss_diff)
                                                           : nlohmann::json()},
  };
  WriteFileAtomically(args.output_dir + "/runtime_bench.csv", csv);
  WriteJsonAtomically(args.output_dir + "/runtime_bench.json", out);
  fmt::print("wrote {0}/runtime_bench.csv, {0}/runtime_bench.json\n", args.output_dir);
  return ok == static_cast<int>(rows.size()) && plain_error.empty() ? 0 : 1;
}

}  // namespace stratos
