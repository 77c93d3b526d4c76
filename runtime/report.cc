#include "runtime/report.h"

#include <fmt/format.h>

#include <filesystem>
#include <fstream>

#include "costmodel/atomic_file.h"
#include "costmodel/evaluate.h"
#include "costmodel/pipeline_sim.h"
#include "runtime/trainer.h"

namespace stratos {

using nlohmann::json;

namespace {

void WriteJson(const std::string& path, const json& value) {
  WriteFileAtomically(path, value.dump(2) + "\n");
}

const char* kKeys[] = {"step_seconds",      "forward_seconds",  "backward_seconds",
                       "p2p_wait_seconds",  "dp_sync_seconds",  "optimizer_seconds",
                       "tp_comm_seconds"};

// Mean of each key over the measured steps of one rank (all but the first if there are several).
std::map<std::string, double> RankMeans(const json& rank) {
  std::map<std::string, double> mean;
  const json& steps = rank.at("steps");
  const size_t skip = steps.size() > 1 ? 1 : 0;
  const double count = std::max<double>(1.0, static_cast<double>(steps.size() - skip));
  for (const char* key : kKeys) mean[key] = 0;
  for (size_t i = skip; i < steps.size(); ++i)
    for (const char* key : kKeys) mean[key] += steps[i].at(key).get<double>() / count;
  return mean;
}

}  // namespace

json WriteRunReports(const RunRecord& record, const std::string& output_dir) {
  const Plan plan = PlanFromJson(record.options.at("plan"), "run options: plan");
  const int world = static_cast<int>(record.ranks.size());
  const int m = plan.num_microbatches;

  // Per pipeline stage (with virtual stages: per pipeline rank, its chunks together): mean over
  // its ranks.
  const int num_stages = plan.NumPipelineRanks();
  std::vector<std::map<std::string, double>> stage_means(num_stages);
  std::vector<int> stage_ranks(num_stages, 0);
  // Per stage, the largest of its ranks' device memory figures (CUDA runs; empty otherwise).
  std::vector<json> stage_memory(num_stages, json::object());
  double iteration_seconds = 0;
  for (const json& rank : record.ranks) {
    const int s = rank.at("stage").get<int>();
    if (rank.contains("memory"))
      for (const auto& [key, value] : rank.at("memory").items())
        stage_memory[s][key] = std::max(stage_memory[s].value(key, 0.0), value.get<double>());
    const auto mean = RankMeans(rank);
    for (const auto& [key, value] : mean) stage_means[s][key] += value;
    ++stage_ranks[s];
    iteration_seconds = std::max(iteration_seconds, mean.at("step_seconds"));
  }
  json stages = json::array();
  for (int s = 0; s < num_stages; ++s) {
    auto& mean = stage_means[s];
    json layers = {plan.stages[s].first_layer, plan.stages[s].last_layer};
    if (plan.virtual_stages > 1) {
      layers = json::array();
      for (int k = s; k < plan.NumStages(); k += num_stages)
        layers.push_back({plan.stages[k].first_layer, plan.stages[k].last_layer});
    }
    for (auto& [key, value] : mean) value /= std::max(1, stage_ranks[s]);
    const double busy = mean["forward_seconds"] + mean["backward_seconds"] +
                        mean["dp_sync_seconds"] + mean["optimizer_seconds"];
    stages.push_back({{"stage", s},
                      {"layers", layers},
                      {"config", plan.stages[s].config.Label()},
                      {"forward_seconds", mean["forward_seconds"]},
                      {"backward_seconds", mean["backward_seconds"]},
                      {"communication_seconds", mean["tp_comm_seconds"] + mean["dp_sync_seconds"]},
                      {"tp_comm_seconds", mean["tp_comm_seconds"]},
                      {"dp_sync_seconds", mean["dp_sync_seconds"]},
                      {"optimizer_seconds", mean["optimizer_seconds"]},
                      {"idle_seconds", mean["p2p_wait_seconds"]},
                      {"other_seconds", std::max(0.0, mean["step_seconds"] - busy -
                                                          mean["p2p_wait_seconds"])},
                      {"step_seconds", mean["step_seconds"]}});
  }
  const double tokens = static_cast<double>(plan.global_batch_size) * record.model.seq_length;
  json measurement = {
      {"schema", "stratos.measurement/1"},
      {"model", record.model.name},
      {"plan", PlanToJson(plan)},
      {"plan_summary", plan.Summary()},
      {"world_size", world},
      {"first_step", record.first_step},
      {"losses", record.losses},
      {"attention", record.flash_attention ? "fused" : "materialized"},
      {"iteration_seconds", iteration_seconds},
      {"tokens_per_second", iteration_seconds > 0 ? tokens / iteration_seconds : 0.0},
      {"stages", stages},
      {"ranks", record.ranks},
      {"options", record.options},
  };

  // Predicted: the cost model on the run's cluster description (options.cluster), or on this
  // machine's workers (LocalCpuCluster, whose peak is the measured matmul FLOP/s of a worker:
  // one CPU thread, or the GPU in the run's dtype).
  const std::string cluster = record.options.value("cluster", "");
  const std::string device = record.options.value("device", "cpu");
  const std::string dtype = record.options.value("dtype", "f32");
  RuntimeGradSync sync;
  sync.bucket_bytes = record.options.value("bucket_bytes", sync.bucket_bytes);
  sync.overlap = record.options.value("overlap_grad_sync", sync.overlap);
  Problem problem = RuntimeProblem(record.model, plan, world, record.flops_per_worker, cluster,
                                   dtype, record.flash_attention, sync);
  if (cluster.empty() && device == "cuda") {
    problem.cluster.name = "local-cuda";
    problem.cluster.devices.front().source =
        "peak = measured " + dtype + " matmul FLOP/s of this GPU; memory and bandwidth assumed";
  }
  const Estimate estimate = Evaluate(problem, plan);
  // Model FLOPs utilization (Chowdhery et al. 2022, PaLM, App. B): the model's FLOPs per
  // iteration (Estimate::model_flops: forward + backward, no recomputation) over the measured
  // iteration time and the devices' peak.
  const double model_flops = estimate.model_flops;
  const double peak_flops = problem.cluster.Device().peak_flops;
  const double achieved = iteration_seconds > 0 ? model_flops / iteration_seconds / world : 0.0;
  measurement["model_flops_per_iteration"] = model_flops;
  measurement["model_flops_per_second_per_device"] = achieved;
  measurement["mfu"] = peak_flops > 0 ? achieved / peak_flops : 0.0;
  measurement["mfu_peak_flops"] = peak_flops;
  measurement["mfu_peak_source"] =
      fmt::format("{} of cluster {}", problem.cluster.Device().name, problem.cluster.name);
  const SimResult sim = SimulatePipeline(SimStagesFromEstimate(estimate), m, plan.schedule);
  json rows = json::array();
  for (int s = 0; s < num_stages; ++s) {
    // Evaluate's stages are pipeline ranks (a rank's chunks summed).
    const StageTerms& terms = estimate.stages[s].terms;
    const double predicted_tail = estimate.stages[s].tail_seconds;
    const double predicted_forward = terms.forward_seconds;
    const double predicted_backward = terms.MicrobatchSeconds() - terms.forward_seconds;
    const double measured_forward = stages[s]["forward_seconds"].get<double>() / m;
    const double measured_backward = stages[s]["backward_seconds"].get<double>() / m;
    const double measured_tail = stages[s]["dp_sync_seconds"].get<double>() +
                                 stages[s]["optimizer_seconds"].get<double>();
    auto ratio = [](double measured, double predicted) {
      return predicted > 0 ? measured / predicted : 0.0;
    };
    json row = {{"stage", s},
                {"predicted_forward_seconds_per_microbatch", predicted_forward},
                {"measured_forward_seconds_per_microbatch", measured_forward},
                {"forward_ratio", ratio(measured_forward, predicted_forward)},
                {"predicted_backward_seconds_per_microbatch", predicted_backward},
                {"measured_backward_seconds_per_microbatch", measured_backward},
                {"backward_ratio", ratio(measured_backward, predicted_backward)},
                {"predicted_tail_seconds", predicted_tail},
                {"measured_tail_seconds", measured_tail},
                {"predicted_model_flops_per_microbatch", terms.model_flops},
                {"predicted_peak_memory_bytes", estimate.stages[s].peak_memory_bytes}};
    // Measured on CUDA: the caching allocator's peaks and what the device holds outside it.
    if (!stage_memory[s].empty()) {
      row["measured_peak_allocated_bytes"] = stage_memory[s]["peak_allocated_bytes"];
      row["measured_peak_reserved_bytes"] = stage_memory[s]["peak_reserved_bytes"];
      row["measured_outside_allocator_bytes"] = stage_memory[s]["outside_allocator_bytes"];
      row["measured_device_total_bytes"] = stage_memory[s]["device_total_bytes"];
      row["memory_ratio"] = ratio(stage_memory[s]["peak_allocated_bytes"].get<double>(),
                                  estimate.stages[s].peak_memory_bytes);
    }
    rows.push_back(row);
  }
  json comparison = {
      {"schema", "stratos.predicted_vs_measured/1"},
      {"cluster", problem.cluster.name},
      {"flops_per_worker", record.flops_per_worker},
      {"predicted_iteration_seconds", estimate.iteration_seconds},
      {"simulated_iteration_seconds", sim.iteration_seconds},
      {"measured_iteration_seconds", iteration_seconds},
      {"iteration_ratio",
       estimate.iteration_seconds > 0 ? iteration_seconds / estimate.iteration_seconds : 0.0},
      {"stages", rows},
      {"note", cluster.empty()
                   ? "predicted: costmodel::Evaluate of the same plan on this machine's workers "
                     "(LocalCpuCluster: measured matmul peak, assumed memory and network); "
                     "ratios are measured / predicted"
                   : "predicted: costmodel::Evaluate of the same plan on cluster " + cluster +
                         "; ratios are measured / predicted"}};
  measurement["predicted_vs_measured"] = comparison;

  if (!output_dir.empty()) {
    std::filesystem::create_directories(output_dir);
    // Chrome trace: one process per rank, one thread per category group.
    json trace = json::array();
    for (const json& rank : record.ranks) {
      const int r = rank.at("rank").get<int>();
      trace.push_back({{"name", "process_name"},
                       {"ph", "M"},
                       {"pid", r},
                       {"args",
                        {{"name", fmt::format("rank {} (stage {}, dp {}, tp {})", r,
                                              rank.at("stage").get<int>(),
                                              rank.at("dp_rank").get<int>(),
                                              rank.at("tp_rank").get<int>())}}}});
      trace.push_back({{"name", "process_sort_index"}, {"ph", "M"}, {"pid", r},
                       {"args", {{"sort_index", r}}}});
      for (const json& e : rank.at("events")) {
        trace.push_back({{"name", e[0]},
                         {"cat", e[1]},
                         {"ph", "X"},
                         {"pid", r},
                         {"tid", 0},
                         {"ts", e[2].get<double>() * 1e6},
                         {"dur", e[3].get<double>() * 1e6}});
      }
    }
    WriteJson(output_dir + "/measurement.json", measurement);
    WriteJson(output_dir + "/predicted_vs_measured.json", comparison);
    WriteJson(output_dir + "/trace.json", {{"traceEvents", trace}, {"displayTimeUnit", "ms"}});
  }
  return measurement;
}

}  // namespace stratos
