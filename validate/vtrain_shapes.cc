#include "validate/vtrain_shapes.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <map>
#include <tuple>
#include <vector>

#include "costmodel/error.h"
#include "validate/reference_tables.h"

namespace stratos {

double IterationHardwareFlops(const Plan& plan, const Estimate& estimate) {
  const int ranks = plan.NumStages() / std::max(1, plan.virtual_stages);
  STRATOS_CHECK(static_cast<int>(estimate.stages.size()) >= ranks,
                "estimate of {} stages for a plan of {} pipeline ranks", estimate.stages.size(),
                ranks);
  double flops = 0.0;
  for (int s = 0; s < ranks; ++s)
    flops += plan.num_microbatches * estimate.stages[s].terms.hardware_flops *
             plan.stages[s].config.NumDevices();
  return flops;
}

namespace {

// (hidden size, TP, micro batch): what sets a block's GEMM shapes on one GPU.
using ShapeKey = std::tuple<int, int, int>;

struct ShapeGroup {
  std::vector<double> predicted_ms, measured_ms;
  // Over the group's runs without pipelining (PP 1), whose time has no bubble in it.
  int unpipelined_runs = 0;
  double measured_hfu_sum = 0, predicted_hfu_sum = 0;
  double measured_microbatch_ms_sum = 0, predicted_microbatch_ms_sum = 0;
};

// sum / count, or null for no runs.
nlohmann::json MeanOrNull(double sum, double count) {
  return count > 0 ? nlohmann::json(sum / count) : nlohmann::json();
}

nlohmann::json GroupJson(const ShapeKey& key, const ShapeGroup& group) {
  const double n = static_cast<double>(group.measured_ms.size());
  const double runs = group.unpipelined_runs;
  double bias = 0.0;
  for (size_t i = 0; i < group.measured_ms.size(); ++i)
    bias += group.predicted_ms[i] / group.measured_ms[i] - 1.0;
  return {{"hidden", std::get<0>(key)},
          {"tp", std::get<1>(key)},
          {"micro_batch", std::get<2>(key)},
          {"rows", group.measured_ms.size()},
          {"unpipelined_rows", group.unpipelined_runs},
          {"measured_hfu_pct", MeanOrNull(100.0 * group.measured_hfu_sum, runs)},
          {"predicted_hfu_pct", MeanOrNull(100.0 * group.predicted_hfu_sum, runs)},
          {"measured_microbatch_ms", MeanOrNull(group.measured_microbatch_ms_sum, runs)},
          {"predicted_microbatch_ms", MeanOrNull(group.predicted_microbatch_ms_sum, runs)},
          {"bias_pct", 100.0 * bias / n},
          {"mape_pct", MeanAbsolutePercentError(group.predicted_ms, group.measured_ms)}};
}

std::string GroupName(const nlohmann::json& group) {
  return fmt::format("h {}, TP {}, micro batch {}", group["hidden"].get<int>(),
                     group["tp"].get<int>(), group["micro_batch"].get<int>());
}

// A percentage to one decimal, "-" for none (a group without runs at PP 1).
std::string Percent(const nlohmann::json& value) {
  return value.is_null() ? "-" : fmt::format("{:.1f}", value.get<double>());
}

}  // namespace

ValidationReport ValidateVtrainShapes(const std::string& reference_path) {
  const std::vector<VtrainRow> rows = ReadVtrain(reference_path);
  std::vector<bool> fitted(rows.size(), false);
  for (size_t i : VtrainCalibrationRows(rows)) fitted[i] = true;
  const VtrainAssumptions shipped = ShippedVtrainAssumptions();

  std::map<ShapeKey, ShapeGroup> groups;
  size_t not_fitted = 0;
  for (size_t i = 0; i < rows.size(); ++i) {
    if (fitted[i]) continue;
    const VtrainRow& row = rows[i];
    const VtrainCase c = BuildVtrainCase(row, shipped);
    const Estimate estimate = Evaluate(c.problem, c.plan);
    const double peak = row.num_gpus * c.problem.cluster.Device().peak_flops;
    const double flops = IterationHardwareFlops(c.plan, estimate);
    ShapeGroup& group = groups[{row.hidden_size, row.tensor_parallel, row.micro_batch}];
    group.predicted_ms.push_back(estimate.iteration_seconds * 1e3);
    group.measured_ms.push_back(row.iteration_ms);
    if (row.pipeline_parallel == 1) {
      ++group.unpipelined_runs;
      group.measured_hfu_sum += flops / (row.iteration_ms * 1e-3 * peak);
      group.predicted_hfu_sum += flops / (estimate.iteration_seconds * peak);
      const double m = c.plan.num_microbatches;
      group.measured_microbatch_ms_sum += row.iteration_ms / m;
      group.predicted_microbatch_ms_sum += estimate.iteration_seconds * 1e3 / m;
    }
    ++not_fitted;
  }
  STRATOS_CHECK(!groups.empty(), "{}: no rows left once the fitted ones are set aside",
                reference_path);

  ValidationReport report;
  report.name = "vtrain-shapes";
  report.title =
      "vTrain's single-node A100 runs not fitted, by GEMM shape (hidden size x TP x micro "
      "batch): signed error and the share of peak reached in hardware FLOPs, measured and "
      "predicted";
  report.columns = {{"hidden", "hidden", 0},
                    {"tp", "TP", 0},
                    {"micro_batch", "micro batch", 0},
                    {"rows", "rows", 0},
                    {"unpipelined_rows", "PP 1", 0},
                    {"measured_hfu_pct", "HFU meas %", 1},
                    {"predicted_hfu_pct", "HFU pred %", 1},
                    {"measured_microbatch_ms", "ms/mb meas", 1},
                    {"predicted_microbatch_ms", "ms/mb pred", 1},
                    {"bias_pct", "mean err %", 1},
                    {"mape_pct", "MAPE %", 1}};
  // The largest per-GPU GEMMs: tokens x hidden / TP largest (ties: the larger hidden size).
  const ShapeKey* largest = nullptr;
  auto gemm_size = [](const ShapeKey& k) {
    return std::make_pair(static_cast<double>(std::get<2>(k)) * std::get<0>(k) / std::get<1>(k),
                          std::get<0>(k));
  };
  nlohmann::json too_fast, too_slow;
  for (const auto& [key, group] : groups) {
    const nlohmann::json row = GroupJson(key, group);
    report.rows.push_back(row);
    if (largest == nullptr || gemm_size(key) > gemm_size(*largest)) largest = &key;
    if (too_fast.is_null() || row["bias_pct"].get<double>() < too_fast["bias_pct"].get<double>())
      too_fast = row;
    if (too_slow.is_null() || row["bias_pct"].get<double>() > too_slow["bias_pct"].get<double>())
      too_slow = row;
  }
  const nlohmann::json largest_group = GroupJson(*largest, groups.at(*largest));
  report.summary = {{"cluster", shipped.cluster},
                    {"rows_not_fitted", not_fitted},
                    {"groups", groups.size()},
                    {"largest_gemm_group", largest_group},
                    {"most_too_fast_group", too_fast},
                    {"most_too_slow_group", too_slow}};
  report.headline = fmt::format(
      "{} rows not fitted in {} shape groups on the zoo's {} as shipped; the largest per-GPU "
      "GEMMs ({}) reach {}% of peak in hardware FLOPs without pipelining, predicted {}% (mean "
      "error {:+.1f}%); predicted most too fast: {} ({:+.1f}%); most too slow: {} ({:+.1f}%)",
      not_fitted, groups.size(), shipped.cluster, GroupName(largest_group),
      Percent(largest_group["measured_hfu_pct"]), Percent(largest_group["predicted_hfu_pct"]),
      largest_group["bias_pct"].get<double>(),
      GroupName(too_fast), too_fast["bias_pct"].get<double>(), GroupName(too_slow),
      too_slow["bias_pct"].get<double>());
  report.assumptions = {
      "Rows: those `stratos validate vtrain` does not fit (all but every fifth), each priced as "
      "that report prices it (Megatron-DeepSpeed, fp16, full recomputation, materialized "
      "attention, no gradient buckets, 1F1B, Megatron's placement) on the zoo's " +
          shipped.cluster +
          " with the constants the file ships (nothing refitted here).",
      "Groups: hidden size x TP x micro batch, which fix a block's GEMM shapes on one GPU "
      "(tokens = micro batch x 1,024 against hidden / TP and 4 hidden / TP); layers, PP, DP and "
      "global batch vary inside a group.",
      "HFU: hardware FLOPs of the iteration as the cost model counts them (each block's forward, "
      "its recomputation and a backward of twice the forward; the head's forward and backward) "
      "over (iteration seconds x GPUs x 312 TFLOP/s), averaged over the group's runs without "
      "pipelining (PP 1, column 'PP 1'; a pipeline's bubble would hide the device's speed); "
      "measured with the table's time, predicted with ours. The DP all-reduce and the optimizer "
      "step are inside the iteration, so it is below the GEMMs' own share of peak. ms/mb: the "
      "iteration's time over its microbatches at PP 1, the same runs (a host-bound block takes "
      "about as long whatever its micro batch).",
      "mean err: the group's mean of predicted / measured - 1 (negative: predicted too fast)."};
  return report;
}

}  // namespace stratos
