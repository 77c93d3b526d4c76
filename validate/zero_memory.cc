#include "validate/zero_memory.h"

#include <fmt/format.h>

#include <cmath>
#include <cstdlib>

#include "costmodel/cost_model.h"
#include "costmodel/error.h"

namespace stratos {

double OurZeroStateBytes(double psi, int nd, int zero_stage, double k) {
  Problem problem;
  problem.model.name = "zero";
  problem.model.family = "explicit";
  LayerSpec layer;
  layer.name = "all parameters";
  layer.param_count = layer.stored_param_count = psi;
  problem.model.layers = {layer};
  // Enough ideal devices for Nd-way data parallelism: 8 per node.
  const int gpus_per_node = nd < 8 ? nd : 8;
  problem.cluster.name = "ideal";
  problem.cluster.devices.push_back({"ideal", 1e15, 1e15, 1e12, 1.0, 0.0, "ideal"});
  problem.cluster.node_groups.push_back({(nd + gpus_per_node - 1) / gpus_per_node,
                                         gpus_per_node, "ideal"});
  problem.cluster.networks = {{"intra", 1e11, 0, 1, ""}, {"inter", 1e11, 0, 1, ""}};
  problem.training.global_batch_size = nd;
  problem.training.param_dtype_bytes = 2;
  problem.training.grad_dtype_bytes = 2;
  problem.training.optimizer_state_bytes_per_param = k;
  const CostModel cost_model(problem);
  const StageConfig config{nd / gpus_per_node, gpus_per_node, nd, 1, zero_stage,
                           Recompute::kNone, {}};
  const std::string rule = cost_model.CheckConfig(config, 1);
  if (!rule.empty())
    throw InputError(fmt::format("ZeRO row with Nd = {}: {}", nd, rule));
  return cost_model.LayerTerms(0, config, 1).state_bytes;
}

double ZeroFormulaBytes(double psi, int nd, int zero_stage, double k) {
  switch (zero_stage) {
    case 0: return (2 + 2 + k) * psi;
    case 1: return 2 * psi + 2 * psi + k * psi / nd;
    case 2: return 2 * psi + (2 + k) * psi / nd;
    default: return (2 + 2 + k) * psi / nd;
  }
}

double RoundingHalfUnit(const std::string& printed) {
  const size_t e = printed.find_first_of("eE");
  const std::string mantissa = printed.substr(0, e);
  const int exponent = e == std::string::npos ? 0 : std::atoi(printed.c_str() + e + 1);
  const size_t dot = mantissa.find('.');
  const int decimals =
      dot == std::string::npos ? 0 : static_cast<int>(mantissa.size() - dot - 1);
  return 0.5 * std::pow(10.0, exponent - decimals);
}

ValidationReport ValidateZeroMemory(const std::string& reference_path) {
  ValidationReport report;
  report.name = "zero";
  report.title =
      "ZeRO (Rajbhandari et al. SC'20): per-GPU model-state GB of stages 0-3, ours vs the "
      "published and derived table";
  report.columns = {{"stage", "stage", 0},
                    {"psi_params", "Psi", 0},
                    {"nd", "Nd", 0},
                    {"k", "K", 0},
                    {"published_gb", "table GB", 4},
                    {"formula_gb", "formula GB", 4},
                    {"our_gb", "ours GB", 4},
                    {"agrees_up_to_rounding", "agrees", 0},
                    {"value_status", "status", 0}};
  int rows = 0, agree = 0, published_rows = 0, published_agree = 0;
  double worst_formula = 0.0;
  for (const ZeroMemoryRow& row : ReadZeroMemory(reference_path)) {
    const double ours = OurZeroStateBytes(row.psi, row.nd, row.zero_stage, row.k) / 1e9;
    const double formula = ZeroFormulaBytes(row.psi, row.nd, row.zero_stage, row.k) / 1e9;
    const double tolerance = RoundingHalfUnit(row.gb_text) * (1 + 1e-9);
    const bool agrees = std::abs(ours - row.gb) <= tolerance;
    const bool published = row.value_status.rfind("published", 0) == 0;
    worst_formula = std::max(worst_formula, std::abs(ours / formula - 1.0));
    ++rows;
    agree += agrees;
    published_rows += published;
    published_agree += published && agrees;
    report.rows.push_back({{"stage", row.stage},
                           {"psi_params", row.psi},
                           {"nd", row.nd},
                           {"k", row.k},
                           {"published_gb", row.gb},
                           {"printed_gb", row.gb_text},
                           {"formula_gb", formula},
                           {"our_gb", ours},
                           {"agrees_up_to_rounding", agrees},
                           {"value_status", published ? "published" : "derived"}});
  }
  report.summary = {{"rows", rows},
                    {"rows_agreeing", agree},
                    {"published_rows", published_rows},
                    {"published_rows_agreeing", published_agree},
                    {"max_relative_difference_to_formula", worst_formula}};
  report.headline = fmt::format(
      "{} of {} rows agree up to the printed rounding ({} of {} published Figure 1 values); "
      "largest relative difference to the paper's formulas {:.1e}",
      agree, rows, published_agree, published_rows, worst_formula);
  report.assumptions = {
      "our state bytes: CostModel::LayerTerms of one explicit layer holding Psi parameters, "
      "data parallel over Nd ideal GPUs, fp16 parameters and gradients (2 + 2 bytes), K optimizer "
      "bytes per parameter, ZeRO stage of the row (baseline = 0)",
      "agreement up to rounding: |ours - table| <= half a unit of the table's last printed digit "
      "(31.4 -> 0.05, 1.6e+04 -> 500)"};
  return report;
}

}  // namespace stratos
