#include "calibrate/calibrate.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <cstdlib>
#include <sstream>

#include "costmodel/error.h"
#include "costmodel/matmul_efficiency.h"

namespace stratos {

namespace {

[[noreturn]] void FailHoldout(const std::string& text, const std::string& rule) {
  throw InputError(fmt::format("--holdout = {}: {}", text, rule));
}

// A whole-string integer >= 1, or fails with `rule`.
long long ParseCount(const std::string& all, const std::string& text, const std::string& rule) {
  char* end = nullptr;
  const long long value = std::strtoll(text.c_str(), &end, 10);
  if (text.empty() || end != text.c_str() + text.size() || value < 1) FailHoldout(all, rule);
  return value;
}

}  // namespace

bool Holdout::HoldsOut(const CollectiveRow& row) const {
  for (const MeshSelector& s : meshes) {
    if (s.nodes != row.nodes || s.gpus_per_node != row.gpus_per_node) continue;
    if (s.group_size != 0 && s.group_size != row.group_size) continue;
    if (s.where == MeshSelector::Where::kLocal && row.crosses_nodes) continue;
    if (s.where == MeshSelector::Where::kCross && !row.crosses_nodes) continue;
    return true;
  }
  return false;
}

bool Holdout::HoldsOut(const MatmulRow& row) const {
  return matmul_min_dim_above > 0 && std::min({row.m, row.n, row.k}) > matmul_min_dim_above;
}

std::string Holdout::ToString() const {
  std::vector<std::string> parts;
  for (const MeshSelector& s : meshes) {
    std::string part = fmt::format("{}x{}", s.nodes, s.gpus_per_node);
    if (s.group_size != 0) part += fmt::format("/g{}", s.group_size);
    if (s.where == MeshSelector::Where::kLocal) part += "/local";
    if (s.where == MeshSelector::Where::kCross) part += "/cross";
    parts.push_back(part);
  }
  if (matmul_min_dim_above > 0) parts.push_back(fmt::format("gemm>{}", matmul_min_dim_above));
  return parts.empty() ? "none" : fmt::format("{}", fmt::join(parts, ","));
}

Holdout ParseHoldout(const std::string& text) {
  Holdout holdout;
  if (text.empty() || text == "none") return holdout;
  std::stringstream in(text);
  std::string item;
  while (std::getline(in, item, ',')) {
    if (item.rfind("gemm>", 0) == 0) {
      holdout.matmul_min_dim_above = ParseCount(
          text, item.substr(5), fmt::format("'{}': gemm>D needs an integer D >= 1", item));
      continue;
    }
    std::stringstream parts(item);
    std::string mesh;
    std::getline(parts, mesh, '/');
    const size_t x = mesh.find('x');
    if (x == std::string::npos) {
      FailHoldout(text, fmt::format("'{}': expected NxG[/gS][/local|/cross] or gemm>D", item));
    }
    Holdout::MeshSelector selector;
    const std::string mesh_rule = fmt::format("'{}': mesh must be NxG with N, G >= 1", item);
    selector.nodes = static_cast<int>(ParseCount(text, mesh.substr(0, x), mesh_rule));
    selector.gpus_per_node = static_cast<int>(ParseCount(text, mesh.substr(x + 1), mesh_rule));
    std::string qualifier;
    while (std::getline(parts, qualifier, '/')) {
      if (qualifier == "local") {
        selector.where = Holdout::MeshSelector::Where::kLocal;
      } else if (qualifier == "cross") {
        selector.where = Holdout::MeshSelector::Where::kCross;
      } else if (!qualifier.empty() && qualifier[0] == 'g') {
        selector.group_size = static_cast<int>(ParseCount(
            text, qualifier.substr(1), fmt::format("'{}': gS needs a group size S >= 1", item)));
      } else {
        FailHoldout(
            text, fmt::format("'{}': unknown qualifier '{}' (gS, local, cross)", item, qualifier));
      }
    }
    holdout.meshes.push_back(selector);
  }
  return holdout;
}

namespace {

// The device the curves are fitted for: the first node group's (the base is homogeneous).
DeviceSpec& FittedDevice(ClusterSpec& cluster) {
  for (DeviceSpec& d : cluster.devices)
    if (d.name == cluster.node_groups.front().device) return d;
  STRATOS_CHECK(false, "device {} of {}", cluster.node_groups.front().device, cluster.name);
}

}  // namespace

CalibrationResult Calibrate(const ClusterSpec& base, const Profile& profile,
                            const CalibrateOptions& options) {
  if (!base.IsHomogeneous()) {
    throw InputError(fmt::format("{}: calibration needs a homogeneous cluster (one node group)",
                                 base.source.empty() ? base.name : base.source));
  }
  CalibrationResult result;
  result.cluster = base;
  ClusterSpec& cluster = result.cluster;
  cluster.name = options.name.empty() ? base.name + "-calibrated" : options.name;
  const int ring_links = options.ring_links_per_gpu >= 0 ? options.ring_links_per_gpu
                                                         : base.IntraNode().ring_links_per_gpu;

  // Collectives: split the rows the model covers into fitted and held out, per collective.
  std::array<std::vector<CollectiveRow>, kNumCollectives> fit_rows;
  std::array<std::vector<CollectiveRow>, kNumCollectives> held_rows;
  for (const CollectiveRow& row : profile.collectives) {
    const std::string exclusion = CollectiveRowExclusion(row);
    if (!exclusion.empty()) {
      ++result.skipped_rows[exclusion];
      continue;
    }
    const int index = static_cast<int>(*row.Kind());
    (options.holdout.HoldsOut(row) ? held_rows : fit_rows)[index].push_back(row);
  }
  int collective_rows_fitted = 0;
  for (Collective kind : kAllCollectives) {
    const int index = static_cast<int>(kind);
    if (fit_rows[index].empty()) {
      if (!held_rows[index].empty()) {
        throw InputError(
            fmt::format("{}: all {} rows are held out (--holdout = {}); nothing "
                        "left to fit",
                        CollectiveName(kind), held_rows[index].size(), options.holdout.ToString()));
      }
      continue;
    }
    CollectiveReport report;
    report.fit = FitCollective(kind, options.algorithms[index], ring_links, fit_rows[index],
                               options.collective_pipeline);
    ApplyCollectiveFit(report.fit, cluster);
    collective_rows_fitted += report.fit.rows;
    result.collectives.push_back(report);
  }
  // Errors from the finished cluster, through the cost model's own function.
  for (CollectiveReport& report : result.collectives) {
    const int index = static_cast<int>(report.fit.kind);
    auto errors = [&](const std::vector<CollectiveRow>& rows) {
      std::vector<double> predicted, measured;
      for (const CollectiveRow& row : rows) {
        predicted.push_back(PredictCollectiveSeconds(cluster, row));
        measured.push_back(row.seconds);
      }
      return RelativeErrors(predicted, measured);
    };
    report.fitted = errors(fit_rows[index]);
    report.held_out = errors(held_rows[index]);
  }
  // A level's own constants (used by point-to-point sends and anything without a fit of its
  // own) become its first fit in Collective order (all-reduce first): with ring links the old
  // per-GPU bandwidth would be wrong.
  for (size_t level = 0; level < cluster.networks.size(); ++level) {
    NetworkLevel& network = cluster.networks[level];
    for (Collective kind : kAllCollectives) {
      const std::optional<LinkFit>& fit = network.collective_fits[static_cast<int>(kind)];
      if (!fit) continue;
      network.bandwidth_bytes_per_second = fit->bandwidth_bytes_per_second;
      network.latency_seconds = fit->latency_seconds;
      network.efficiency = 1.0;
      network.source = fmt::format("calibrated: the {} fit{} ({})", CollectiveName(kind),
                                   level == 0 && ring_links > 0 ? ", per NVLink link" : "",
                                   base.networks[level].name);
      break;
    }
  }

  // Matmul: the device's efficiency curve from rows of the priced dtype.
  std::vector<MatmulRow> matmul_fit_rows, matmul_held_rows;
  int other_dtype = 0;
  for (const MatmulRow& row : profile.matmuls) {
    if (row.dtype != options.matmul_dtype) {
      ++other_dtype;
      continue;
    }
    (options.holdout.HoldsOut(row) ? matmul_held_rows : matmul_fit_rows).push_back(row);
  }
  int matmul_rows_fitted = 0;
  if (!matmul_fit_rows.empty()) {
    DeviceSpec* device = &FittedDevice(cluster);
    MatmulReport report;
    report.other_dtype_rows = other_dtype;
    report.choice = ChooseMatmulCurve(matmul_fit_rows, device->peak_flops);
    const MatmulCurve& curve = report.choice.fit.curve;
    auto errors = [&](const std::vector<MatmulRow>& rows) {
      std::vector<double> predicted, measured;
      for (const MatmulRow& row : rows) {
        predicted.push_back(PredictMatmulSeconds(curve, device->peak_flops, row));
        measured.push_back(row.seconds);
      }
      return RelativeErrors(predicted, measured);
    };
    report.fitted = errors(matmul_fit_rows);
    report.held_out = errors(matmul_held_rows);
    device->matmul_curve = curve;
    const MatmulRow& largest =
        *std::max_element(matmul_fit_rows.begin(), matmul_fit_rows.end(),
                          [](const MatmulRow& a, const MatmulRow& b) { return a.flops < b.flops; });
    device->matmul_efficiency = MatmulEfficiency(
        *device, GemmShape{static_cast<double>(largest.m), static_cast<double>(largest.n),
                           static_cast<double>(largest.k)});
    device->source = fmt::format(
        "calibrated: matmul_curve ({}) fitted on {} {} GEMMs, matmul_efficiency = the curve at "
        "the largest ({}x{}x{}); {} as in {}",
        MatmulModelName(report.choice.fit.model), report.choice.fit.rows, options.matmul_dtype,
        largest.m, largest.n, largest.k,
        options.memory_from_runs ? "peak_TFLOPS and hbm_GBps" : "peak_TFLOPS, memory and hbm_GBps",
        base.name);
    matmul_rows_fitted = report.choice.fit.rows;
    result.matmul = report;
  }
  // Transformer blocks: the device's block curve, on top of the matmul curve just fitted, from
  // block rows of the same dtype.
  std::vector<LayerRow> layer_rows;
  int other_dtype_layers = 0;
  for (const LayerRow& row : profile.layers)
    (row.dtype == options.matmul_dtype ? layer_rows.push_back(row) : void(++other_dtype_layers));
  if (options.fit_layer_curve && matmul_rows_fitted > 0 && layer_rows.size() >= 4) {
    DeviceSpec* device = &FittedDevice(cluster);
    LayerReport report;
    report.other_dtype_rows = other_dtype_layers;
    // Blocks profiled with a fused attention kernel kept no attention scores in memory.
    const bool flash = profile.info.FlashAttention();
    report.choice = ChooseLayerCurve(layer_rows, *device, flash);
    std::vector<double> forward, backward, measured_forward, measured_backward;
    for (size_t i = 0; i < layer_rows.size(); ++i) {
      measured_forward.push_back(layer_rows[i].forward_seconds);
      measured_backward.push_back(layer_rows[i].backward_seconds);
    }
    for (const auto& [f, b] : PredictLayerRows(layer_rows, *device, report.choice.curve, flash)) {
      forward.push_back(f);
      backward.push_back(b);
    }
    report.forward = RelativeErrors(forward, measured_forward);
    report.backward = RelativeErrors(backward, measured_backward);
    device->layer_curve = report.choice.curve;
    device->source += fmt::format(
        "; layer_curve (power {:g}) fitted on {} {} transformer blocks", report.choice.curve.power,
        report.choice.rows, options.matmul_dtype);
    cluster.calibration.layer_rows = report.choice.rows;
    result.layer = report;
  }
  if (collective_rows_fitted == 0 && matmul_rows_fitted == 0) {
    throw InputError(fmt::format("profile of {}: no collective or {} matmul rows to fit",
                                 profile.info.device, options.matmul_dtype));
  }
  cluster.calibration.source = options.source;
  cluster.calibration.collective_rows = collective_rows_fitted;
  cluster.calibration.matmul_rows = matmul_rows_fitted;
  return result;
}

DeviceSpec SlowedDevice(DeviceSpec device, double slowdown) {
  if (!(slowdown >= 1))
    ThrowInputError("device " + device.name, "slowdown", slowdown, "must be >= 1");
  device.peak_flops /= slowdown;
  device.hbm_bytes_per_second /= slowdown;
  if (device.matmul_curve) device.matmul_curve->overhead_seconds *= slowdown;
  if (device.layer_curve) {
    device.layer_curve->forward_floor_seconds *= slowdown;
    device.layer_curve->backward_floor_seconds *= slowdown;
  }
  return device;
}

}  // namespace stratos
