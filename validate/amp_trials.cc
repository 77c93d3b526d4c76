#include "validate/amp_trials.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <cmath>
#include <limits>

#include "costmodel/error.h"
#include "costmodel/evaluate.h"
#include "validate/builders.h"
#include "validate/rank_correlation.h"

namespace stratos {

namespace {

constexpr double kGiB = 1024.0 * 1024.0 * 1024.0;
constexpr int kAmpLayerEntries = 30;
constexpr int kNodes = 4;  // 4 x g4dn.12xlarge
constexpr int kGlobalBatch = 32;
// Mean forward seconds of one GPT-2 block (h 1024, s 1024) at micro-batch 1 on one T4, over the
// 24 transformer_layer entries of DachengLi1/AMP @72eeea4 src/known_cost/gpt2_G4_1.npy.
constexpr double kAmpProfiledBlockForwardSeconds = 5.4699e-3;
// The same with Megatron tensor (model) parallelism 2 and 4, per GPU, all-reduces included:
// src/known_cost/gpt2_G4_2.npy and gpt2_G4_4.npy.
constexpr double kAmpProfiledBlockForwardSecondsTp2 = 5.9624e-3;
constexpr double kAmpProfiledBlockForwardSecondsTp4 = 5.5768e-3;
// The LM head's forward at micro-batch 1: the sum of the entries after the blocks of
// gpt2_G4_1.npy, [noop 0.025 ms, noop 0.069 ms, embed2v 3.076 ms, noop 1.480 ms].
constexpr double kAmpProfiledHeadForwardSeconds = 4.6499e-3;

// Index of the smallest value among `candidates` (ties: the first), or -1 if none.
int ArgMin(const std::vector<double>& values, const std::vector<int>& candidates) {
  int best = -1;
  for (int i : candidates)
    if (best < 0 || values[i] < values[best]) best = i;
  return best;
}

}  // namespace

int AmpBoundaryToLayer(int b) {
  if (b < 0 || b > kAmpLayerEntries)
    ThrowInputError("AMP layer partition", "boundary", b,
                    fmt::format("must be in [0, {}]", kAmpLayerEntries));
  if (b == 0) return 0;
  if (b == 1) return 1;          // the no-op after the embedding: nothing of ours is in [1, 2)
  if (b <= 25) return b - 1;     // block b - 2 is our layer b - 1
  if (b < kAmpLayerEntries) return 25;  // the head's four entries
  return 26;
}

double AmpRunSeconds(double iteration_seconds) {
  if (!(iteration_seconds >= 0))
    ThrowInputError("AMP run", "iteration_seconds", iteration_seconds, "must be >= 0");
  return kAmpRunIterations * iteration_seconds;
}

bool AmpRunRecordsTime(bool fits_memory, double iteration_seconds) {
  return fits_memory && AmpRunSeconds(iteration_seconds) <= kAmpLauncherTimeoutSeconds;
}

Problem AmpProblem(const AmpAssumptions& how) {
  Problem problem;
  // AMP's GPT-2 (homogeneous.py model_config; 16 heads from ds_pretrain_gpt2_pipe.sh).
  problem.model = GptModel("gpt2-amp", 1024, 16, 24, 1024, 52256);
  problem.cluster = ZooCluster(how.cluster, kNodes);
  if (how.pcie_peer_to_peer) {
    NetworkLevel& intra = problem.cluster.networks.at(0);
    intra.name = "PCIe Gen3 peer to peer";
    intra.bandwidth_bytes_per_second = kAmpPeerToPeerBytesPerSecond;
    intra.efficiency = 1.0;
    intra.source =
        "half of 'all_reduce,busbw,intra-node,PCIe Gen4' = 24 GB/s in "
        "../shared/data/reference/nccl_collective_bandwidth.csv (NVIDIA GTC24 S62129 slide 12)";
  }
  TrainingSpec& training = problem.training;
  training.global_batch_size = kGlobalBatch;
  training.schedule = Schedule::kOneFOneB;
  training.activation_dtype_bytes = 2;  // fp16
  training.param_dtype_bytes = 2;
  // ds_config.json "fp32_allreduce": true: gradients are all-reduced in fp32.
  training.grad_dtype_bytes = 4;
  // ... but the pipeline engine's allreduce_tied_weight_gradients all-reduces the tied word
  // embedding's own fp16 gradient between the first and the last stage.
  training.tied_embedding_grad_bytes = 2;
  // DeepSpeed's FP16_Optimizer (no ZeRO): fp32 master weights, their fp32 gradients, Adam m, v.
  training.optimizer_state_bytes_per_param = 16;
  training.sequence_parallel = false;  // Megatron-LM v1.1.5 has none
  // ds_pretrain_gpt2_pipe.sh passes none of v1.1.5's --scaled-upper-triang-masked-softmax-fusion,
  // --bias-gelu-fusion, --bias-dropout-fusion: every elementwise op of a block is its own kernel.
  training.fused_elementwise_kernels = false;
  // The example's pipeline casts the fp16 logits to fp32 (fp16_to_fp32, its last layer) and its
  // mpu.vocab_parallel_cross_entropy subtracts the maximum and exponentiates that copy in place
  // (AMP's vendored megatron/mpu/cross_entropy.py): at the peak the fp16 logits beside the fp32
  // softmax it keeps, 2 bytes per logit.
  training.loss_transient_bytes_per_logit = 2;
  DeviceSpec* device = nullptr;
  for (DeviceSpec& d : problem.cluster.devices)
    if (d.name == problem.cluster.node_groups.at(0).device) device = &d;
  STRATOS_CHECK(device != nullptr, "device of {}", problem.cluster.name);
  if (how.matmul_efficiency > 0) {
    device->matmul_efficiency = how.matmul_efficiency;
  } else if (how.fit_profile && how.head_and_block_profile) {
    device->layer_curve.reset();
    device->matmul_efficiency = AmpProfiledHeadMatmulEfficiency(problem);
    device->layer_curve = AmpProfiledBlockCurve(problem);
  } else if (how.fit_profile) {
    device->layer_curve.reset();
    device->matmul_efficiency = AmpProfiledMatmulEfficiency(problem);
  }
  if (how.fit_profile && !how.framework_memory_cluster.empty()) {
    const DeviceSpec measured = ZooCluster(how.framework_memory_cluster, 1).Device();
    device->reserved_memory_bytes = measured.reserved_memory_bytes;
    device->memory_fragmentation = measured.memory_fragmentation;
  }
  if (how.intra_node_latency_seconds >= 0)
    problem.cluster.networks.at(0).latency_seconds = how.intra_node_latency_seconds;
  else if (how.fit_profile)
    problem.cluster.networks.at(0).latency_seconds = AmpProfiledIntraNodeLatency(problem);
  return problem;
}

ClusterSpec AmpCalibratedCluster(const std::string& base_cluster) {
  AmpAssumptions how;
  how.cluster = base_cluster;
  how.fit_profile = true;
  how.framework_memory_cluster.clear();
  const Problem fitted = AmpProblem(how);
  ClusterSpec cluster = ZooCluster(base_cluster, 1);
  DeviceSpec& device = PricedDevice(cluster);
  device.matmul_efficiency = fitted.cluster.Device().matmul_efficiency;
  device.layer_curve = fitted.cluster.Device().layer_curve;
  cluster.networks.at(0).latency_seconds = fitted.cluster.IntraNode().latency_seconds;
  return cluster;
}

std::string AmpCalibrationDifference(const ClusterSpec& cluster, const std::string& base_cluster) {
  const ClusterSpec fit = AmpCalibratedCluster(base_cluster);
  const auto differs = [](double a, double b) {
    return std::abs(a - b) > 1e-9 * std::max(std::abs(a), std::abs(b));
  };
  const DeviceSpec& ours = cluster.Device();
  const DeviceSpec& theirs = fit.Device();
  if (differs(ours.matmul_efficiency, theirs.matmul_efficiency))
    return fmt::format("matmul_efficiency {} (the fit: {})", ours.matmul_efficiency,
                       theirs.matmul_efficiency);
  if (ours.layer_curve.has_value() != theirs.layer_curve.has_value() ||
      (ours.layer_curve && (differs(ours.layer_curve->forward_scale,
                                    theirs.layer_curve->forward_scale) ||
                            differs(ours.layer_curve->backward_scale,
                                    theirs.layer_curve->backward_scale))))
    return "layer_curve differs from the fit";
  if (differs(cluster.IntraNode().latency_seconds, fit.IntraNode().latency_seconds))
    return fmt::format("intra-node latency {} s (the fit: {} s)",
                       cluster.IntraNode().latency_seconds, fit.IntraNode().latency_seconds);
  return "";
}

double AmpProfiledIntraNodeLatency(const Problem& problem) {
  // Our block forward is affine in the latency: f(alpha) = f(0) + alpha g. Least squares over
  // tensor parallel 2 and 4 of the profiled times.
  const std::pair<int, double> profiled[] = {{2, kAmpProfiledBlockForwardSecondsTp2},
                                             {4, kAmpProfiledBlockForwardSecondsTp4}};
  constexpr double kProbe = 1e-3;
  double numerator = 0.0, denominator = 0.0;
  for (const auto& [tp, seconds] : profiled) {
    auto forward = [&, tp = tp](double latency) {
      Problem probe = problem;
      probe.cluster.networks.at(0).latency_seconds = latency;
      const CostModel cost_model(probe);
      const StageConfig config{1, tp, 1, tp, 0, Recompute::kNone, {}};
      const int m = probe.training.global_batch_size;  // one sample per microbatch
      STRATOS_CHECK(cost_model.CheckConfig(config, m).empty(), "{}",
                    cost_model.CheckConfig(config, m));
      return cost_model.LayerTerms(1, config, m).forward_seconds;
    };
    const double base = forward(0.0);
    const double slope = (forward(kProbe) - base) / kProbe;
    numerator += (seconds - base) * slope;
    denominator += slope * slope;
  }
  STRATOS_CHECK(denominator > 0, "the block's forward does not depend on the latency");
  return std::max(0.0, numerator / denominator);
}

namespace {

// The efficiency at which our forward of layer `index` at b = 1 on one device -- FLOPs / (peak x
// efficiency) + the bytes it writes / HBM bandwidth (LayerComputeSeconds, no curves) -- takes
// `profiled_seconds`. The memory part is that forward at efficiency 1 less FLOPs / peak.
double EfficiencyForForward(const Problem& problem, int index, double profiled_seconds) {
  const LayerSpec& layer = problem.model.layers.at(index);
  DeviceSpec ideal = problem.cluster.Device();
  ideal.matmul_efficiency = 1.0;
  ideal.matmul_curve.reset();
  ideal.layer_curve.reset();
  // AMP's profile times the pipeline's layers (the head: its GEMM and the fp32 cast), not the
  // loss function the pipeline applies after them.
  const LayerCompute forward = LayerComputeSeconds(problem.model, index, ideal, problem.training,
                                                   1.0, 1, Recompute::kNone, false);
  const double memory_seconds = forward.forward_seconds - forward.loss_forward_seconds -
                                layer.forward_flops / ideal.peak_flops;
  const double matmul_seconds = profiled_seconds - memory_seconds;
  STRATOS_CHECK(matmul_seconds > 0, "memory term {} s of {} exceeds the profiled forward",
                memory_seconds, layer.name);
  return std::min(1.0, layer.forward_flops / (ideal.peak_flops * matmul_seconds));
}

}  // namespace

double AmpProfiledMatmulEfficiency(const Problem& problem) {
  STRATOS_CHECK(problem.model.layers.at(1).kind == LayerKind::kTransformer, "layer 1 is {}",
                problem.model.layers.at(1).name);
  return EfficiencyForForward(problem, 1, kAmpProfiledBlockForwardSeconds);
}

double AmpProfiledHeadMatmulEfficiency(const Problem& problem) {
  const int last = problem.NumLayers() - 1;
  STRATOS_CHECK(problem.model.layers.at(last).kind == LayerKind::kHead, "the last layer is {}",
                problem.model.layers.at(last).name);
  return EfficiencyForForward(problem, last, kAmpProfiledHeadForwardSeconds);
}

LayerCurve AmpProfiledBlockCurve(const Problem& problem) {
  Problem probe = problem;
  for (DeviceSpec& d : probe.cluster.devices) d.layer_curve.reset();
  const CostModel cost_model(probe);
  const StageConfig config{1, 1, 1, 1, 0, Recompute::kNone, {}};
  const int m = probe.training.global_batch_size;  // one sample per microbatch
  const double device_seconds = cost_model.LayerTerms(1, config, m).forward_seconds;
  STRATOS_CHECK(device_seconds > 0, "the block's forward is free");
  const double scale = kAmpProfiledBlockForwardSeconds / device_seconds;
  return LayerCurve{scale, scale, 0.0, 0.0, 1.0};
}

std::optional<Plan> AmpTrialPlan(const Problem& problem, const AmpTrialRow& trial,
                                 std::string* why) {
  const std::string where = fmt::format("amp_trials_homogeneous.csv:{} (trial {})", trial.line,
                                        trial.trial);
  const int per_microbatch = trial.micro_batch * trial.data_parallel;
  if (kGlobalBatch % per_microbatch != 0)
    ThrowInputError(where, "micro_batch x dp", per_microbatch,
                    fmt::format("must divide the global batch {}", kGlobalBatch));
  const StageConfig config = StageOnDevices(problem.cluster, trial.data_parallel,
                                            trial.tensor_parallel, 0, Recompute::kNone, where);
  Plan plan;
  plan.global_batch_size = kGlobalBatch;
  plan.num_microbatches = kGlobalBatch / per_microbatch;
  plan.schedule = problem.training.schedule;
  const std::vector<int>& bounds = trial.layer_partition;
  if (bounds.front() != 0 || bounds.back() != kAmpLayerEntries)
    ThrowInputError(where, "layer_partition", fmt::format("[{}]", fmt::join(bounds, ",")),
                    fmt::format("must run from 0 to {}", kAmpLayerEntries));
  for (size_t s = 0; s + 1 < bounds.size(); ++s) {
    const int first = AmpBoundaryToLayer(bounds[s]), last = AmpBoundaryToLayer(bounds[s + 1]);
    if (first >= last) {
      *why = fmt::format("stage {} holds AMP entries [{}, {}), no-ops only: no layer of ours", s,
                         bounds[s], bounds[s + 1]);
      return std::nullopt;
    }
    plan.stages.push_back({first, last, config});
  }
  ValidatePlan(problem, plan, where);
  return plan;
}

ValidationReport ValidateAmpTrials(const std::string& reference_path, const AmpAssumptions& how) {
  const std::vector<AmpTrialRow> trials = ReadAmpTrials(reference_path);
  if (trials.size() < 2)
    throw InputError(fmt::format("{}: {} trials: needs at least 2", reference_path, trials.size()));
  const Problem problem = AmpProblem(how);
  // The variants refit the T4 on AMP's profile over the base (their constants are not the
  // shipped file's), with the shipped file's framework memory.
  AmpAssumptions variant = how;
  if (!how.fit_profile) {
    variant.cluster = kAmpBaseCluster;
    variant.fit_profile = true;
    variant.framework_memory_cluster = how.cluster;
  }
  AmpAssumptions other_network = variant;
  other_network.pcie_peer_to_peer = !how.pcie_peer_to_peer;
  const Problem other_problem = AmpProblem(other_network);
  // Which part did the work: every GEMM at the block's one efficiency (no head entry, no block
  // curve), the model of earlier reports.
  AmpAssumptions block_only = variant;
  block_only.head_and_block_profile = false;
  const Problem block_only_problem = AmpProblem(block_only);
  // Is the shipped file what `stratos calibrate --amp-profile` writes?
  const std::string calibration_difference =
      how.fit_profile ? std::string() : AmpCalibrationDifference(problem.cluster);
  const CostModel cost_model(problem), other_cost_model(other_problem),
      block_only_cost_model(block_only_problem);

  const int n = static_cast<int>(trials.size());
  const double kNaN = std::numeric_limits<double>::quiet_NaN();
  std::vector<double> ours(n, kNaN), other(n, kNaN), block_only_seconds(n, kNaN);
  std::vector<bool> fits(n, false), records(n, false), records_other(n, false);
  std::vector<int> feasible, all_representable, predicted_fit;
  ValidationReport report;
  for (int i = 0; i < n; ++i) {
    const AmpTrialRow& trial = trials[i];
    std::string why;
    const std::optional<Plan> plan = AmpTrialPlan(problem, trial, &why);
    nlohmann::json row = {{"trial", trial.trial},
                          {"micro_batch", trial.micro_batch},
                          {"tp", trial.tensor_parallel},
                          {"dp", trial.data_parallel},
                          {"pp", trial.pipeline_parallel},
                          {"amp_partition", fmt::format("[{}]", fmt::join(trial.layer_partition, ","))},
                          {"measured_seconds", trial.measured_seconds},  // inf: JSON null
                          {"measured_failed", !std::isfinite(trial.measured_seconds)},
                          {"amp_predicted_seconds", trial.amp_predicted_cost}};
    if (!plan) {
      row["note"] = why;
      report.rows.push_back(row);
      continue;
    }
    const Estimate estimate = Evaluate(cost_model, *plan);
    const Estimate other_estimate = Evaluate(other_cost_model, *plan);
    all_representable.push_back(i);
    ours[i] = estimate.iteration_seconds;
    other[i] = other_estimate.iteration_seconds;
    block_only_seconds[i] = Evaluate(block_only_cost_model, *plan).iteration_seconds;
    fits[i] = estimate.Fits();
    records[i] = AmpRunRecordsTime(fits[i], ours[i]);
    records_other[i] = AmpRunRecordsTime(other_estimate.Fits(), other[i]);
    if (fits[i]) predicted_fit.push_back(i);
    if (std::isfinite(trial.measured_seconds)) feasible.push_back(i);
    double peak = 0.0;
    for (const StageEstimate& stage : estimate.stages) peak = std::max(peak, stage.peak_memory_bytes);
    std::string layers;
    for (const StagePlan& stage : plan->stages)
      layers += fmt::format("{}{}", layers.empty() ? "" : "|", stage.NumLayers());
    row["num_microbatches"] = plan->num_microbatches;
    row["layers_per_stage"] = layers;
    row["predicted_seconds"] = estimate.iteration_seconds;
    row["predicted_seconds_other_network"] = other_estimate.iteration_seconds;
    row["predicted_fits_memory"] = fits[i];
    row["predicted_peak_memory_gib"] = peak / kGiB;
    row["predicted_run_seconds"] = AmpRunSeconds(ours[i]);
    row["predicted_records_time"] = records[i];
    if (!fits[i]) row["note"] = estimate.MemoryViolation();
    report.rows.push_back(row);
  }
  if (feasible.size() < 2)
    throw InputError(fmt::format("{}: {} feasible trials: needs at least 2", reference_path,
                                 feasible.size()));

  // Rank correlations over the trials that ran (measured time finite).
  std::vector<double> measured, predicted, amp, predicted_other, predicted_block_only;
  for (int i : feasible) {
    measured.push_back(trials[i].measured_seconds);
    predicted.push_back(ours[i]);
    predicted_block_only.push_back(block_only_seconds[i]);
    amp.push_back(trials[i].amp_predicted_cost);
    predicted_other.push_back(other[i]);
  }
  const double rho = SpearmanRho(predicted, measured), tau = KendallTauB(predicted, measured);
  const double amp_rho = SpearmanRho(amp, measured), amp_tau = KendallTauB(amp, measured);
  const double other_rho = SpearmanRho(predicted_other, measured);
  const double other_tau = KendallTauB(predicted_other, measured);
  const double block_only_rho = SpearmanRho(predicted_block_only, measured);
  const double mape = MeanAbsolutePercentError(predicted, measured);
  const double other_mape = MeanAbsolutePercentError(predicted_other, measured);
  const std::vector<double> measured_rank = AverageRanks(measured),
                            predicted_rank = AverageRanks(predicted),
                            amp_rank = AverageRanks(amp);
  for (size_t k = 0; k < feasible.size(); ++k) {
    nlohmann::json& row = report.rows[feasible[k]];
    row["rank_measured"] = measured_rank[k];
    row["rank_predicted"] = predicted_rank[k];
    row["rank_amp"] = amp_rank[k];
  }

  // Top-1 choices and what they measured.
  std::vector<double> measured_all(n), amp_all(n);
  std::vector<int> everything;
  for (int i = 0; i < n; ++i) {
    measured_all[i] = trials[i].measured_seconds;
    amp_all[i] = trials[i].amp_predicted_cost;
    everything.push_back(i);
  }
  const int best = ArgMin(measured_all, feasible);
  const int ours_feasible = ArgMin(ours, feasible);
  const int amp_feasible = ArgMin(amp_all, feasible);
  const int ours_all = ArgMin(ours, all_representable);
  const int ours_fit = ArgMin(ours, predicted_fit);
  const int amp_all_best = ArgMin(amp_all, everything);
  auto choice = [&](int i) -> nlohmann::json {
    if (i < 0) return nullptr;
    const double t = trials[i].measured_seconds;
    return {{"trial", trials[i].trial},
            {"measured_seconds", std::isfinite(t) ? nlohmann::json(t) : nlohmann::json("inf")},
            {"measured_over_best", std::isfinite(t) ? nlohmann::json(t / measured_all[best])
                                                    : nlohmann::json(nullptr)}};
  };
  // Memory: does the model foresee the trials that failed?
  int oom_caught = 0, oom_missed = 0, false_alarms = 0, failed = 0;
  // AMP's runner: memory, or the launcher's time limit (AmpRunRecordsTime), at our prices and
  // at the other intra-node link's.
  int run_caught = 0, run_false_alarms = 0, time_only = 0, other_caught = 0,
      other_false_alarms = 0;
  for (int i : all_representable) {
    const bool ran = std::isfinite(trials[i].measured_seconds);
    if (!ran) ++failed;
    if (!ran && !fits[i]) ++oom_caught;
    if (!ran && fits[i]) ++oom_missed;
    if (ran && !fits[i]) ++false_alarms;
    if (!ran && !records[i]) ++run_caught;
    if (!ran && !records[i] && fits[i]) ++time_only;
    if (ran && !records[i]) ++run_false_alarms;
    if (!ran && !records_other[i]) ++other_caught;
    if (ran && !records_other[i]) ++other_false_alarms;
  }
  int unrepresentable = n - static_cast<int>(all_representable.size());

  report.name = "amp";
  report.title =
      "AMP (NeurIPS'22) homogeneous trials, GPT-2 (h 1024, s 1024, 24 layers) on 4 x 4 T4: "
      "predicted vs measured iteration time, rank correlation beside AMP's own cost model";
  report.columns = {{"trial", "trial", 0},
                    {"micro_batch", "mbs", 0},
                    {"tp", "TP", 0},
                    {"dp", "DP", 0},
                    {"pp", "PP", 0},
                    {"num_microbatches", "m", 0},
                    {"layers_per_stage", "layers/stage", 0},
                    {"measured_seconds", "measured s", 2},
                    {"amp_predicted_seconds", "AMP s", 3},
                    {"predicted_seconds", "ours s", 3},
                    {"rank_measured", "rank meas", 1},
                    {"rank_amp", "rank AMP", 1},
                    {"rank_predicted", "rank ours", 1},
                    {"predicted_peak_memory_gib", "peak GiB", 1},
                    {"predicted_fits_memory", "fits", 0},
                    {"predicted_run_seconds", "run s", 0},
                    {"predicted_records_time", "records", 0}};
  const double efficiency = problem.cluster.Device().matmul_efficiency;
  const double intra_latency = problem.cluster.IntraNode().latency_seconds;
  report.summary = {
      {"num_trials", n},
      {"num_feasible", feasible.size()},
      {"num_unrepresentable", unrepresentable},
      {"spearman_ours", rho},
      {"kendall_tau_b_ours", tau},
      {"spearman_amp", amp_rho},
      {"kendall_tau_b_amp", amp_tau},
      {"mape_percent_ours", mape},
      {"target_spearman", 0.8},
      {"meets_target", rho >= 0.8 && rho >= amp_rho},
      {"t4_matmul_efficiency", efficiency},
      {"t4_block_curve_scale",
       problem.cluster.Device().layer_curve
           ? nlohmann::json(problem.cluster.Device().layer_curve->forward_scale)
           : nlohmann::json()},
      {"block_only",
       {{"t4_matmul_efficiency", block_only_problem.cluster.Device().matmul_efficiency},
        {"spearman_ours", block_only_rho}}},
      {"intra_node_latency_seconds", intra_latency},
      {"t4_constants",
       how.fit_profile ? "fitted in the report"
                       : calibration_difference.empty()
                             ? "the shipped file, which is stratos calibrate --amp-profile's fit"
                             : "the shipped file, which differs from stratos calibrate "
                               "--amp-profile's fit: " + calibration_difference},
      {"shipped_is_fit", !how.fit_profile && calibration_difference.empty()},
      {"best_measured", choice(best)},
      {"top1_ours_among_feasible", choice(ours_feasible)},
      {"top1_amp_among_feasible", choice(amp_feasible)},
      {"top1_ours_among_all", choice(ours_all)},
      {"top1_ours_among_predicted_to_fit", choice(ours_fit)},
      {"top1_amp_among_all", choice(amp_all_best)},
      {"memory",
       {{"failed_trials", failed},
        {"failures_predicted", oom_caught},
        {"failures_missed", oom_missed},
        {"false_alarms", false_alarms}}},
      {"runner",
       {{"failed_trials", failed},
        {"failures_predicted", run_caught},
        {"failures_predicted_by_time_limit_only", time_only},
        {"false_alarms", run_false_alarms},
        {"run_iterations", kAmpRunIterations},
        {"launcher_timeout_seconds", kAmpLauncherTimeoutSeconds},
        {"other_network_failures_predicted", other_caught},
        {"other_network_false_alarms", other_false_alarms}}},
      {"other_network",
       {{"pcie_peer_to_peer", other_network.pcie_peer_to_peer},
        {"spearman_ours", other_rho},
        {"kendall_tau_b_ours", other_tau},
        {"mape_percent_ours", other_mape}}}};
  auto measured_text = [&](int i) {
    return std::isfinite(trials[i].measured_seconds)
               ? fmt::format("{:.2f} s", trials[i].measured_seconds)
               : std::string("failed");
  };
  auto link_text = [](const Problem& p) {
    const NetworkLevel& intra = p.cluster.IntraNode();
    return fmt::format("{} ({:.3g} GB/s)", intra.name, intra.bandwidth_bytes_per_second / 1e9);
  };
  const std::string other_network_name = "with " + link_text(other_problem);
  report.headline = fmt::format(
      "over {} feasible trials: Spearman {:.3f} / Kendall tau-b {:.3f}, MAPE {:.1f}% (AMP's cost "
      "model, which ranks: {:.3f} / {:.3f}; target Spearman >= 0.8 and >= AMP's); our top-1 "
      "among feasible: trial {} measured {} vs best {} (trial {}); among all trials: trial {} "
      "({}); among those our memory model says fit: trial {} ({}); memory model flags {} of {} "
      "failed trials, {} false alarms; "
      "AMP's runner (out of memory, or {} iterations past its launcher's {:.0f} s) {} of {}, {} "
      "false alarms ({} of {}, {} false alarms {} inside nodes); {} inside nodes: Spearman "
      "{:.3f}, MAPE {:.1f}%; every GEMM at the block's efficiency instead (no head entry): "
      "Spearman {:.3f}; T4 constants {}",
      feasible.size(), rho, tau, mape, amp_rho, amp_tau, trials[ours_feasible].trial,
      measured_text(ours_feasible), measured_text(best), trials[best].trial,
      trials[ours_all].trial, measured_text(ours_all),
      ours_fit >= 0 ? trials[ours_fit].trial : -1, ours_fit >= 0 ? measured_text(ours_fit) : "-",
      oom_caught, failed, false_alarms, kAmpRunIterations, kAmpLauncherTimeoutSeconds, run_caught,
      failed, run_false_alarms, other_caught, failed, other_false_alarms, other_network_name,
      other_network_name, other_rho, other_mape, block_only_rho,
      how.fit_profile ? std::string("fitted on AMP's profile in the report")
      : calibration_difference.empty()
          ? fmt::format("of the zoo's {} (the shipped file is `calibrate --amp-profile`'s fit)",
                        how.cluster)
          : fmt::format("of the zoo's {}, which differs from `calibrate --amp-profile`'s fit ({}): "
                        "rerun it",
                        how.cluster, calibration_difference));
  report.assumptions = {
      "model: GPT-2 with h 1024, s 1024, 24 layers, 16 heads (ds_pretrain_gpt2_pipe.sh), "
      "vocabulary 52256, learned positions, tied embeddings; global batch 32",
      fmt::format("cluster: zoo {} x 4 nodes (4 T4 each), {} inside a node {}; 50 Gb/s between "
                  "nodes",
                  how.cluster, link_text(problem),
                  how.pcie_peer_to_peer
                      ? "(the link's upper bound)"
                      : "as in the zoo file (AMP's cluster_info; PCIe peer to peer reported as a "
                        "variant)"),
      fmt::format("{}T4 matmul efficiency {:.4f}: our forward of the LM head at micro-batch 1 (the "
                  "logits GEMM and the logits' fp32 cast through HBM; the loss is not one of the "
                  "profiled layers) equals AMP's profiled "
                  "{:.3f} ms (its 4 entries after the blocks in DachengLi1/AMP "
                  "src/known_cost/gpt2_G4_1.npy, the profile AMP's own cost model uses); the "
                  "block's kernels beyond its GEMMs as a block-curve scale {:.2f}, so that our "
                  "forward of one block equals the profiled {:.3f} ms (mean of the 24 block "
                  "entries; backward scaled alike); intra-node latency {:.0f} us per ring step, "
                  "fitted to the same profile at "
                  "tensor parallel 2 and 4 ({:.3f} and {:.3f} ms per block, all-reduces included; "
                  "gpt2_G4_2.npy, gpt2_G4_4.npy); nothing is fitted to the trials",
                  how.fit_profile
                      ? std::string()
                      : fmt::format("T4 constants of the zoo's {} ({}), fitted by `stratos "
                                    "calibrate --amp-profile` on AMP's layer profile: ",
                                    how.cluster,
                                    calibration_difference.empty()
                                        ? "the shipped file is that fit"
                                        : "differs from that fit: " + calibration_difference),
                  efficiency, 1e3 * kAmpProfiledHeadForwardSeconds,
                  problem.cluster.Device().layer_curve
                      ? problem.cluster.Device().layer_curve->forward_scale
                      : 1.0,
                  1e3 * kAmpProfiledBlockForwardSeconds,
                  1e6 * problem.cluster.IntraNode().latency_seconds,
                  1e3 * kAmpProfiledBlockForwardSecondsTp2,
                  1e3 * kAmpProfiledBlockForwardSecondsTp4),
      problem.cluster.Device().reserved_memory_bytes == 0 &&
              problem.cluster.Device().memory_fragmentation == 0
          ? std::string("memory: all of the T4's 16 GB for tensors (no framework overheads)")
          : fmt::format("memory: of the T4's 16 GB, {:.2f} GiB outside PyTorch's caching allocator "
                        "and the allocator's overhead +{:.1f}% over the tensors' peak, as measured "
                        "on one H200 with PyTorch 2.11 ({}; "
                        "experiments/gpu/results/h200-2026-11-27) and assumed alike for the T4 "
                        "runs: the tensors may take {:.2f} GiB",
                        problem.cluster.Device().reserved_memory_bytes / kGiB,
                        100 * problem.cluster.Device().memory_fragmentation,
                        how.fit_profile ? how.framework_memory_cluster
                                        : how.cluster + ", `calibrate --framework-memory-runs`",
                        CostModel(problem).DeviceMemoryCapacityBytes() / kGiB),
      "DeepSpeed 3D parallelism as in AMP's Megatron-LM v1.1.5 example: fp16, no ZeRO, no "
      "sequence parallelism, no recomputation, gradients all-reduced in fp32 (ds_config.json "
      "fp32_allreduce), FP16_Optimizer states 2 + 4 + 16 bytes per parameter, the fp16 logits "
      "beside their fp32 copy, which the loss exponentiates in place into the softmax it keeps "
      "(6 bytes per logit at the peak), 1F1B, TP innermost "
      "then DP then PP (DeepSpeed's pipe/data/model topology), DP sync not overlapped",
      "kernels: the example's script passes none of v1.1.5's fusion flags "
      "(--scaled-upper-triang-masked-softmax-fusion, --bias-gelu-fusion, --bias-dropout-fusion), "
      "so a block's masked_fill_, softmax, dropout, bias adds, GeLU and residual adds each stream "
      "their tensors through HBM (costmodel/cost_model.h UnfusedBlockElementwiseBytes: 38 h "
      "replicated, 4 h + 8 f and 14 a s per token forward; counted from AMP's vendored "
      "megatron/model/transformer.py, nothing fitted); the LayerNorms, bias-dropout-adds and "
      "residual adds run whole on every TP rank",
      "layer_partition: boundaries into AMP's 30-entry list [embed2h, noop, 24 blocks, noop, noop, "
      "embed2v, noop] (src/cost_homo.py), mapped to our [embedding, 24 blocks, head]; a stage of "
      "AMP no-op entries only has no layer of ours and is reported as not representable",
      fmt::format(
          "failed trials: AMP's runner records a time only if the run reaches iteration {} "
          "(its vendored megatron/training.py), and its vendored DeepSpeed launcher terminates a "
          "run after {:.0f} s (deepspeed/launcher/launch.py time_out); in AMP's log "
          "(src/results/homogeneous_results.txt, the runner's cumulative time) trial 1 ended 31 s "
          "after the trial before it, a crash at start-up, while trials 45, 47, 50 and 51 took "
          "210-212 s each, the limit plus the runner's own steps (the slowest trial that recorded "
          "a time, 48 at 4.29 s, took 193 s): they were stopped by the time limit, slow or hung "
          "behind a rank out of memory; `runner` predicts a failure where the plan does not fit "
          "or {} of our iterations exceed {:.0f} s (start-up excluded: a lower bound), `memory` "
          "where it does not fit",
          kAmpRunIterations, kAmpLauncherTimeoutSeconds, kAmpRunIterations,
          kAmpLauncherTimeoutSeconds),
      "rank correlation over the trials whose measured time is finite; Spearman with average "
      "ranks for ties, Kendall tau-b"};
  return report;
}

}  // namespace stratos
