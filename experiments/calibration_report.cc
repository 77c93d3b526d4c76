#include "experiments/calibration_report.h"

#include <fmt/format.h>

#include <cmath>

#include "calibrate/alpa_profile.h"

namespace stratos {

std::string Percent(double fraction) {
  return std::isnan(fraction) ? std::string("-") : fmt::format("{:.1f}%", 100 * fraction);
}

LoadedProfile LoadProfile(const std::string& profile_dir, const std::string& alpa_csv) {
  LoadedProfile loaded;
  if (!profile_dir.empty()) {
    loaded.profile = ReadProfileDir(profile_dir);
    loaded.flag = fmt::format("--profile {}", PathForDisplay(profile_dir));
    loaded.description = fmt::format("profile {} ({}, {}; {})", PathForDisplay(profile_dir),
                                     loaded.profile.info.device, loaded.profile.info.backend,
                                     loaded.profile.info.produced_by);
    return loaded;
  }
  const std::string path = alpa_csv.empty() ? DefaultAlpaProfilePath() : alpa_csv;
  AlpaProfile alpa = ReadAlpaProfile(path);
  loaded.profile = std::move(alpa.profile);
  loaded.flag = fmt::format("--alpa-csv {}", PathForDisplay(path));
  loaded.description = fmt::format(
      "Alpa's V100 profile {} ({} rows read; kept {} collective and {} distinct GEMM "
      "measurements; left out {} rows Alpa's make_monotonic filled in, {} duplicate and {} "
      "zero-FLOP dot rows, {} failed (inf))",
      PathForDisplay(path), alpa.rows_read, loaded.profile.collectives.size(),
      loaded.profile.matmuls.size(), alpa.filled_collectives.size() + alpa.filled_matmuls.size(),
      alpa.duplicate_dot_rows, alpa.zero_flop_dot_rows, alpa.inf_rows);
  loaded.filled_collectives = std::move(alpa.filled_collectives);
  return loaded;
}

std::string CalibrationTable(const CalibrationResult& result) {
  std::string out =
      fmt::format("{:<15} {:<12} {:>9}  {:<5} {:>10} {:>12} {:>11}  {:>21}  {:>21}\n",
                  "collective", "inter-node", "launch", "level", "latency", "bandwidth",
                  "pipelining", "fitted MAPE (max) n", "held-out MAPE (max) n");
  auto errors = [](const ErrorStats& e) {
    return fmt::format("{:>6} ({:>6}) {:>5}", Percent(e.mape), Percent(e.max_ape), e.rows);
  };
  for (const CollectiveReport& report : result.collectives) {
    const CollectiveFit& fit = report.fit;
    bool first = true;
    for (const auto& [level, link] :
         {std::pair{"intra", fit.intra}, std::pair{"inter", fit.inter}}) {
      if (!link) continue;
      const std::string bandwidth =
          fmt::format("{:.4g} GB/s{}", link->bandwidth_bytes_per_second / 1e9,
                      std::string(level) == "intra" && fit.ring_links_per_gpu > 0 ? "*" : " ");
      const double pipelining = link->pipeline_seconds_per_sqrt_byte / LinkFit::kUsPerSqrtMB;
      if (first) {
        out += fmt::format(
            "{:<15} {:<12} {:>6.1f} us  {:<5} {:>7.1f} us {:>12} {:>11.3f}  {}  {}\n",
            CollectiveName(fit.kind), InterNodeAlgorithmName(fit.algorithm),
            fit.launch_seconds * 1e6, level, link->latency_seconds * 1e6, bandwidth, pipelining,
            errors(report.fitted), errors(report.held_out));
      } else {
        out += fmt::format("{:<15} {:<12} {:>9}  {:<5} {:>7.1f} us {:>12} {:>11.3f}\n", "", "",
                           "", level, link->latency_seconds * 1e6, bandwidth, pipelining);
      }
      first = false;
    }
    if (!fit.note.empty()) out += fmt::format("  note: {}\n", fit.note);
  }
  if (!result.collectives.empty())
    out += "  pipelining: c of c sqrt(steps x bytes) per level (costmodel/collective.h), us per "
           "sqrt(MB)\n";
  if (!result.collectives.empty() && result.collectives.front().fit.ring_links_per_gpu > 0) {
    out += fmt::format(
        "  * per NVLink link; a ring over g GPUs of a node drives min(g-1, {}) "
        "links per GPU\n",
        result.collectives.front().fit.ring_links_per_gpu);
  }
  if (result.matmul) {
    const MatmulReport& m = *result.matmul;
    const MatmulCurve& curve = m.choice.fit.curve;
    out += fmt::format(
        "\nmatmul curve ({}, chosen by leave-one-out error on the fitted GEMMs):\n"
        "  max_efficiency {:.3f}, half_efficiency_dim {:.0f}, overhead {:.1f} us per GEMM\n"
        "  fitted MAPE {} (max {}) on {} GEMMs, held-out MAPE {} (max {}) on {}\n",
        MatmulModelName(m.choice.fit.model), curve.max_efficiency, curve.half_efficiency_dim,
        curve.overhead_seconds * 1e6, Percent(m.fitted.mape), Percent(m.fitted.max_ape),
        m.fitted.rows, Percent(m.held_out.mape), Percent(m.held_out.max_ape), m.held_out.rows);
    out += "  leave-one-out MAPE:";
    for (const auto& [model, mape] : m.choice.cross_validation_mape) {
      out += fmt::format(" {} {}", MatmulModelName(model), Percent(mape));
    }
    out += fmt::format("\n  {} GEMMs of other dtypes not used\n", m.other_dtype_rows);
  }
  if (!result.skipped_rows.empty()) {
    out += "\ncollective rows the model does not cover:\n";
    for (const auto& [reason, count] : result.skipped_rows) {
      out += fmt::format("  {:>5}  {}\n", count, reason);
    }
  }
  if (result.layer) {
    const LayerReport& l = *result.layer;
    const LayerCurve& c = l.choice.curve;
    out += fmt::format(
        "\nlayer curve (power {:g}, chosen by leave-one-out error on the fitted blocks):\n"
        "  forward: scale {:.3f}, floor {:.0f} us; backward: scale {:.3f}, floor {:.0f} us\n"
        "  fitted MAPE forward {} (max {}), backward {} (max {}) on {} blocks\n",
        c.power, c.forward_scale, c.forward_floor_seconds * 1e6, c.backward_scale,
        c.backward_floor_seconds * 1e6, Percent(l.forward.mape), Percent(l.forward.max_ape),
        Percent(l.backward.mape), Percent(l.backward.max_ape), l.choice.rows);
    out += "  leave-one-out MAPE:";
    for (const auto& [power, mape] : l.choice.cross_validation_mape)
      out += fmt::format(" power {:g} {}", power, Percent(mape));
    out += fmt::format("\n  {} blocks of other dtypes not used\n", l.other_dtype_rows);
  }
  return out;
}

}  // namespace stratos
