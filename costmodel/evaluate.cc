#include "costmodel/evaluate.h"

#include <algorithm>
#include <nlohmann/json.hpp>

#include "costmodel/error.h"

namespace stratos {

namespace {
constexpr double kGiB = 1024.0 * 1024.0 * 1024.0;
}

double PipelineObjective(const std::vector<double>& t, const std::vector<double>& e,
                         const std::vector<double>& c, int m, int v) {
  STRATOS_CHECK(t.size() == e.size() && t.size() == c.size() && !t.empty(),
                "{} stage times, {} tails, {} one-time costs", t.size(), e.size(), c.size());
  STRATOS_CHECK(v >= 1, "virtual_stages = {}", v);
  double sum = 0.0, max = 0.0, tail = 0.0, one_time = 0.0;
  for (size_t s = 0; s < t.size(); ++s) {
    sum += t[s];
    max = std::max(max, t[s]);
    tail = std::max(tail, e[s]);
    one_time += c[s];
  }
  return PipelineSeconds(sum, max, tail, one_time, m, v);
}

bool Estimate::Fits() const { return MemoryViolation().empty(); }

std::string Estimate::MemoryViolation() const {
  int worst = -1;
  for (int s = 0; s < static_cast<int>(stages.size()); ++s)
    if (stages[s].MemoryHeadroomBytes() < 0 &&
        (worst < 0 || stages[s].MemoryHeadroomBytes() < stages[worst].MemoryHeadroomBytes()))
      worst = s;
  if (worst < 0) return "";
  const StageEstimate& stage = stages[worst];
  return fmt::format("stage {} needs {:.2f} GiB per device, {:.2f} GiB over its {:.2f} GiB capacity",
                     worst, stage.peak_memory_bytes / kGiB, -stage.MemoryHeadroomBytes() / kGiB,
                     stage.memory_capacity_bytes / kGiB);
}

Estimate Evaluate(const Problem& problem, const Plan& plan) {
  return Evaluate(CostModel(problem), plan);
}

namespace {

// Evaluate() of a validated plan; pipeline rank r holds plan.stages[r], [r + p], ... and the
// cost model's training.virtual_pipeline_stages says how many chunks each rank has.
Estimate EvaluateRanks(const CostModel& cost_model, const Plan& plan) {
  const Problem& problem = cost_model.problem();
  const int m = plan.num_microbatches;
  const int p = plan.NumPipelineRanks();
  const int v = problem.training.virtual_pipeline_stages;
  Estimate estimate;
  std::vector<double> t(p), e(p), c(p);
  // A rank sends forward to the next rank and backward to the previous one (interleaved: the
  // last rank's chunks send forward to the first, wrapping around).
  const auto group_of = [&](int rank) { return plan.stages[(rank + p) % p].config.node_group; };
  for (int s = 0; s < p; ++s) {
    const StageConfig& config = plan.stages[s].config;
    StageEstimate se;
    se.node_group = config.node_group;
    se.terms = cost_model.StageOverhead(config, m, s == 0, s == p - 1, group_of(s - 1),
                                        group_of(s + 1));
    for (int chunk = s; chunk < plan.NumStages(); chunk += p)
      for (int l = plan.stages[chunk].first_layer; l < plan.stages[chunk].last_layer; ++l)
        se.terms += cost_model.LayerTerms(l, config, m);
    se.microbatch_seconds = se.terms.MicrobatchSeconds();
    se.tail_seconds = se.terms.ExposedTailSeconds();
    se.one_time_seconds = se.terms.OneTimeSeconds();
    se.microbatches_in_flight = ChunkForwardsInFlight(plan.schedule, p, s, m, v);
    se.peak_memory_bytes =
        se.terms.PeakMemoryBytes(static_cast<double>(se.microbatches_in_flight) / v);
    se.memory_capacity_bytes = cost_model.DeviceMemoryCapacityBytes(config.node_group);
    t[s] = se.microbatch_seconds;
    e[s] = se.tail_seconds;
    c[s] = se.one_time_seconds;
    estimate.stages.push_back(se);
  }
  estimate.iteration_seconds = PipelineObjective(t, e, c, m, v);
  double sum_t = 0.0;
  for (int s = 0; s < p; ++s) {
    sum_t += t[s];
    estimate.tail_seconds = std::max(estimate.tail_seconds, e[s]);
    if (t[s] > estimate.max_stage_seconds) {
      estimate.max_stage_seconds = t[s];
      estimate.bottleneck_stage = s;
    }
  }
  for (int s = 0; s < p; ++s) estimate.tail_seconds += c[s];
  estimate.fill_seconds = sum_t / v + (1.0 - 1.0 / v) * estimate.max_stage_seconds;
  estimate.steady_seconds = (m - 1) * estimate.max_stage_seconds;
  const double pipeline = estimate.fill_seconds + estimate.steady_seconds;
  estimate.bubble_fraction = pipeline > 0 ? 1.0 - m * (sum_t / p) / pipeline : 0.0;
  estimate.num_devices = plan.NumDevices();
  const ModelSpec& model = problem.model;
  const double batch = problem.training.global_batch_size;
  estimate.model_flops = model.TrainingFlopsPerSample() * batch;
  double peak = 0.0;  // FLOP/s of all the plan's devices
  for (int s = 0; s < p; ++s) {
    const StageConfig& config = plan.stages[s].config;
    peak += config.NumDevices() * cost_model.GroupCluster(config.node_group).Device().peak_flops;
  }
  if (estimate.iteration_seconds > 0) {
    const double flops_per_second = estimate.model_flops / estimate.iteration_seconds;
    estimate.tflops_per_gpu = flops_per_second / estimate.num_devices / 1e12;
    estimate.mfu = flops_per_second / peak;
    estimate.tokens_per_second =
        batch * std::max(1, model.seq_length) / estimate.iteration_seconds;
  }
  const ClusterSpec& cluster = problem.cluster;
  for (int g = 0; cluster.NumGroups() > 1 && g < cluster.NumGroups(); ++g) {
    GroupUtilization use;
    use.name = cluster.GroupName(g);
    use.device = cluster.Group(g).device;
    use.devices_available = cluster.GroupDevices(g);
    double busy_device_seconds = 0.0;
    for (int s = 0; s < p; ++s) {
      const StageConfig& config = plan.stages[s].config;
      if (config.node_group != g) continue;
      use.devices_used += config.NumDevices();
      busy_device_seconds += config.NumDevices() * m * t[s];
    }
    if (use.devices_used > 0 && estimate.iteration_seconds > 0)
      use.busy_fraction = busy_device_seconds / (use.devices_used * estimate.iteration_seconds);
    estimate.groups.push_back(use);
  }
  return estimate;
}

}  // namespace

Estimate Evaluate(const CostModel& cost_model, const Plan& plan) {
  const Problem& problem = cost_model.problem();
  ValidateTrainingSpec(problem.training, "problem");
  ValidatePlan(cost_model, plan);
  if (plan.virtual_stages == 1) return EvaluateRanks(cost_model, plan);
  // The cost model prices a rank's chunks (their sends, the activations they hold) from the
  // training spec's virtual stages.
  Problem interleaved = problem;
  interleaved.training.virtual_pipeline_stages = plan.virtual_stages;
  return EvaluateRanks(CostModel(interleaved), plan);
}

nlohmann::json EstimateToJson(const Estimate& estimate, const Plan& plan) {
  nlohmann::json stages = nlohmann::json::array();
  for (size_t s = 0; s < estimate.stages.size(); ++s) {
    const StageEstimate& se = estimate.stages[s];
    stages.push_back({{"stage", s},
                      {"config", plan.stages[s].config.Label()},
                      {"microbatch_seconds", se.microbatch_seconds},
                      {"compute_seconds", se.terms.compute_seconds},
                      {"tp_comm_seconds", se.terms.tp_comm_seconds},
                      {"p2p_seconds", se.terms.p2p_seconds},
                      {"zero3_gather_seconds", se.terms.zero3_gather_seconds},
                      {"zero_reduce_scatter_seconds", se.terms.zero_reduce_scatter_seconds},
                      {"tail_seconds", se.tail_seconds},
                      {"one_time_seconds", se.one_time_seconds},
                      {"dp_sync_seconds", se.terms.dp_sync_seconds},
                      {"dp_sync_exposed_seconds", se.terms.dp_sync_exposed_seconds +
                                                      se.terms.BucketedDpExposedSeconds()},
                      {"optimizer_seconds", se.terms.optimizer_seconds},
                      {"embedding_sync_seconds", se.terms.embedding_sync_seconds},
                      {"microbatches_in_flight", se.microbatches_in_flight},
                      {"state_bytes", se.terms.state_bytes},
                      {"activation_bytes_per_microbatch", se.terms.activation_bytes},
                      {"peak_memory_bytes", se.peak_memory_bytes},
                      {"memory_capacity_bytes", se.memory_capacity_bytes}});
    if (!estimate.groups.empty()) stages.back()["node_group"] = estimate.groups[se.node_group].name;
  }
  nlohmann::json groups = nlohmann::json::array();
  for (const GroupUtilization& use : estimate.groups)
    groups.push_back({{"name", use.name},
                      {"device", use.device},
                      {"devices_used", use.devices_used},
                      {"devices_available", use.devices_available},
                      {"busy_fraction", use.busy_fraction}});
  nlohmann::json peak = nlohmann::json::array();
  for (const StageEstimate& se : estimate.stages) peak.push_back(se.peak_memory_bytes);
  nlohmann::json out = {{"predicted_iteration_seconds", estimate.iteration_seconds},
          {"fill_seconds", estimate.fill_seconds},
          {"steady_seconds", estimate.steady_seconds},
          {"tail_seconds", estimate.tail_seconds},
          {"bubble_fraction", estimate.bubble_fraction},
          {"num_devices", estimate.num_devices},
          {"tflops_per_gpu", estimate.tflops_per_gpu},
          {"mfu", estimate.mfu},
          {"tokens_per_second", estimate.tokens_per_second},
          {"fits_memory", estimate.Fits()},
          {"peak_memory_bytes", peak},
          {"stages", stages}};
  if (!estimate.groups.empty()) out["node_groups"] = groups;
  return out;
}

std::string EstimateReport(const Estimate& estimate, const Plan& plan) {
  std::string text = fmt::format(
      "plan: {}\n"
      "predicted iteration: {:.4f} s  (fill {:.4f} + steady {:.4f} + tail {:.4f}; bubble {:.1f}%)\n"
      "throughput: {:.1f} TFLOP/s per GPU, MFU {:.1f}%, {:.0f} tokens/s on {} devices\n",
      plan.Summary(), estimate.iteration_seconds, estimate.fill_seconds, estimate.steady_seconds,
      estimate.tail_seconds, 100 * estimate.bubble_fraction, estimate.tflops_per_gpu,
      100 * estimate.mfu, estimate.tokens_per_second, estimate.num_devices);
  // A heterogeneous cluster adds the stage's node group and a table of the groups' use.
  const bool groups = !estimate.groups.empty();
  size_t group_width = 5;
  for (const GroupUtilization& use : estimate.groups)
    group_width = std::max(group_width, use.name.size());
  const auto group_cell = [&](const std::string& name) {
    return groups ? fmt::format(" {:>{}}", name, group_width) : std::string();
  };
  text += fmt::format("{:>5}{} {:>9} {:>10} {:>10} {:>10} {:>10} {:>10} {:>10} {:>9} {:>10}\n",
                      "stage", group_cell("group"), "layers", "t_mb ms", "compute", "tp comm",
                      "p2p", "tail ms", "dp sync", "in-flight", "mem GiB");
  for (size_t s = 0; s < estimate.stages.size(); ++s) {
    const StageEstimate& se = estimate.stages[s];
    text += fmt::format(
        "{:>5}{} {:>9} {:>10.3f} {:>10.3f} {:>10.3f} {:>10.3f} {:>10.3f} {:>10.3f} {:>9} {:>6.1f}/{:<4.0f}\n",
        s, group_cell(groups ? estimate.groups[se.node_group].name : ""),
        plan.RankLayers(static_cast<int>(s)),
        1e3 * se.microbatch_seconds, 1e3 * se.terms.compute_seconds,
        1e3 * se.terms.tp_comm_seconds, 1e3 * se.terms.p2p_seconds, 1e3 * se.tail_seconds,
        1e3 * se.terms.dp_sync_seconds, se.microbatches_in_flight, se.peak_memory_bytes / kGiB,
        se.memory_capacity_bytes / kGiB);
  }
  if (groups) {
    text += fmt::format("{:>{}} {:>18} {:>10} {:>8}\n", "group", group_width + 5, "device",
                        "GPUs used", "busy");
    for (const GroupUtilization& use : estimate.groups)
      text += fmt::format("{:>{}} {:>18} {:>5}/{:<4} {:>7.1f}%\n", use.name, group_width + 5,
                          use.device, use.devices_used, use.devices_available,
                          100 * use.busy_fraction);
  }
  if (!estimate.Fits()) text += "DOES NOT FIT: " + estimate.MemoryViolation() + "\n";
  return text;
}

}  // namespace stratos
