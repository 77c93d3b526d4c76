#include "experiments/experiment_report.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <limits>
#include <map>
#include <nlohmann/json.hpp>

#include "costmodel/error.h"
#include "costmodel/statistics.h"
#include "experiments/commands.h"
#include "experiments/output.h"

namespace stratos {

namespace {

namespace fs = std::filesystem;
constexpr double kInf = std::numeric_limits<double>::infinity();
constexpr double kTieTolerance = 1e-6;

struct Row {
  std::string family, instance, searcher;
  int seed = 0;
  std::string status;
  double seconds = kInf;  // predicted iteration seconds, inf without a plan
  double wall_seconds = 0;
  int devices = 0, layers = 0;
  bool proven_optimal = false;
  double gap_best = kInf, gap_optimum = NAN;  // fractions; NAN: no optimum known
  nlohmann::json anytime;
};

std::string Percent(double fraction) {
  if (std::isnan(fraction)) return "-";
  if (!std::isfinite(fraction)) return "no plan";
  return fmt::format("{:.3f}", 100 * fraction);
}

std::string Seconds(double s) { return std::isnan(s) ? "-" : fmt::format("{:.3g}", s); }

}  // namespace

int RunExperimentReport(const ExperimentReportOptions& options) {
  const std::string& dir = options.dir;
  const std::string manifest_path = dir + "/manifest.json";
  if (!fs::exists(manifest_path))
    throw InputError(fmt::format("{}: no experiment here (no manifest.json; run `stratos "
                                 "experiment run SPEC --output-dir {}` first)",
                                 dir, dir));
  const nlohmann::json manifest = ReadJsonFile(manifest_path);
  const std::vector<std::string> families = manifest.at("families");
  const std::vector<std::string> searchers = manifest.at("searchers");
  std::vector<Row> rows;
  size_t total = 0;
  for (const nlohmann::json& cell : manifest.at("cells")) {
    ++total;
    const std::string path = dir + "/cells/" + cell.at("hash").get<std::string>() + ".json";
    if (!fs::exists(path)) continue;
    const nlohmann::json r = ReadJsonFile(path);
    Row row;
    row.family = cell.at("family");
    row.instance = cell.at("instance");
    row.searcher = cell.at("searcher");
    row.seed = cell.at("seed");
    row.status = r.value("status", "error");
    if (r.contains("predicted_iteration_seconds") && r["predicted_iteration_seconds"].is_number())
      row.seconds = r["predicted_iteration_seconds"];
    row.wall_seconds = r.value("wall_seconds", 0.0);
    row.devices = r.value("devices", 0);
    row.layers = r.value("layers", 0);
    row.proven_optimal = r.value("proven_optimal", false);
    row.anytime = r.value("anytime", nlohmann::json::array());
    rows.push_back(std::move(row));
  }

  // Best known and proven optimum per instance.
  std::map<std::string, double> best, optimum;
  auto instance_key = [](const Row& r) { return r.family + "\n" + r.instance; };
  for (const Row& r : rows) {
    const std::string key = instance_key(r);
    if (!best.count(key)) best[key] = kInf;
    best[key] = std::min(best[key], r.seconds);
    if (r.proven_optimal)
      optimum[key] = optimum.count(key) ? std::min(optimum[key], r.seconds) : r.seconds;
  }
  for (Row& r : rows) {
    const std::string key = instance_key(r);
    r.gap_best = std::isfinite(r.seconds) ? r.seconds / best[key] - 1 : kInf;
    if (optimum.count(key)) r.gap_optimum = std::isfinite(r.seconds) ? r.seconds / optimum[key] - 1 : kInf;
  }

  std::string md = fmt::format("# Experiment report: {}\n\n", manifest.value("name", dir));
  if (!manifest.value("description", std::string()).empty())
    md += manifest.value("description", std::string()) + "\n\n";
  md += fmt::format("{} of {} cells finished (spec {}, hash {}). Gaps are in percent: to the best "
                    "plan any variant found for the instance, and to the proven optimum where a "
                    "cell proved one. Wall seconds are the searcher's own.\n\n",
                    rows.size(), total, manifest.value("spec_source", std::string()),
                    manifest.value("spec_hash", std::string()));
  nlohmann::json summary = nlohmann::json::array();
  std::vector<std::string> all_families = families;
  if (families.size() > 1) all_families.push_back("all");
  for (const std::string& family : all_families) {
    std::vector<const Row*> fam;
    for (const Row& r : rows)
      if (family == "all" || r.family == family) fam.push_back(&r);
    if (fam.empty()) continue;
    std::map<std::string, bool> instances, instances_with_optimum;
    for (const Row* r : fam) {
      instances[instance_key(*r)] = true;
      if (!std::isnan(r->gap_optimum)) instances_with_optimum[instance_key(*r)] = true;
    }
    md += fmt::format("## {}\n\n{} instances ({} with a proven optimum), {} cells\n\n", family,
                      instances.size(), instances_with_optimum.size(), fam.size());
    md += "| variant | cells | plans | declined | median gap to best | worst gap to best | median "
          "gap to optimum | worst gap to optimum | within 0.1% / 1% of optimum | median wall s | "
          "max wall s |\n|---|---|---|---|---|---|---|---|---|---|---|\n";
    for (const std::string& searcher : searchers) {
      std::vector<double> gb, go, wall;
      int cells = 0, plans = 0, declined = 0, within01 = 0, within1 = 0;
      for (const Row* r : fam) {
        if (r->searcher != searcher) continue;
        ++cells;
        // A declined cell was not searched: it counts, but not in the gaps and times.
        if (r->status == "declined") {
          ++declined;
          continue;
        }
        if (std::isfinite(r->seconds)) ++plans;
        gb.push_back(r->gap_best);
        wall.push_back(r->wall_seconds);
        if (!std::isnan(r->gap_optimum)) {
          go.push_back(r->gap_optimum);
          if (r->gap_optimum <= 0.001) ++within01;
          if (r->gap_optimum <= 0.01) ++within1;
        }
      }
      if (cells == 0) continue;
      const double worst_best = gb.empty() ? NAN : *std::max_element(gb.begin(), gb.end());
      const double worst_opt = go.empty() ? NAN : *std::max_element(go.begin(), go.end());
      const double max_wall = wall.empty() ? NAN : *std::max_element(wall.begin(), wall.end());
      md += fmt::format("| {} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} |\n", searcher,
                        cells, plans, declined, Percent(Median(gb)), Percent(worst_best),
                        Percent(Median(go)), Percent(worst_opt),
                        go.empty() ? std::string("-") : fmt::format("{} / {} of {}", within01, within1, go.size()),
                        Seconds(Median(wall)), Seconds(max_wall));
      auto finite_or_null = [](double x) {
        return std::isfinite(x) ? nlohmann::json(x) : nlohmann::json(nullptr);
      };
      summary.push_back({{"family", family},
                         {"variant", searcher},
                         {"cells", cells},
                         {"plans", plans},
                         {"declined", declined},
                         {"median_gap_to_best", finite_or_null(Median(gb))},
                         {"worst_gap_to_best", finite_or_null(worst_best)},
                         {"median_gap_to_optimum", finite_or_null(Median(go))},
                         {"worst_gap_to_optimum", finite_or_null(worst_opt)},
                         {"cells_with_optimum", go.size()},
                         {"within_0.1pct_of_optimum", within01},
                         {"within_1pct_of_optimum", within1},
                         {"median_wall_seconds", finite_or_null(Median(wall))},
                         {"max_wall_seconds", finite_or_null(max_wall)}});
    }
    // Win / tie / loss of the row variant against the column variant.
    std::map<std::string, double> value;  // instance \n seed \n searcher -> seconds
    for (const Row* r : fam)
      if (r->status != "declined")
        value[fmt::format("{}\n{}\n{}", instance_key(*r), r->seed, r->searcher)] = r->seconds;
    md += "\nWin / tie / loss of the row variant against the column variant (same instance "
          "and seed; cells a variant declined are left out):\n\n| |";
    for (const std::string& s : searchers) md += " " + s + " |";
    md += "\n|---|";
    for (size_t i = 0; i < searchers.size(); ++i) md += "---|";
    md += "\n";
    for (const std::string& a : searchers) {
      md += "| " + a + " |";
      for (const std::string& b : searchers) {
        if (a == b) {
          md += " |";
          continue;
        }
        int win = 0, tie = 0, loss = 0;
        for (const Row* r : fam) {
          if (r->searcher != a || r->status == "declined") continue;
          const auto other = value.find(fmt::format("{}\n{}\n{}", instance_key(*r), r->seed, b));
          if (other == value.end()) continue;
          const double x = r->seconds, y = other->second;
          if ((!std::isfinite(x) && !std::isfinite(y)) ||
              (std::isfinite(x) && std::isfinite(y) &&
               std::abs(x - y) <= kTieTolerance * std::min(x, y))) {
            ++tie;
          } else if (x < y) {
            ++win;
          } else {
            ++loss;
          }
        }
        md += fmt::format(" {}/{}/{} |", win, tie, loss);
      }
      md += "\n";
    }
    md += "\n";
  }

  // Per-cell rows and anytime traces for the plots.
  std::string rows_csv =
      "family,instance,searcher,seed,status,devices,layers,predicted_iteration_seconds,"
      "gap_to_best,gap_to_optimum,wall_seconds\n";
  std::string anytime_csv = "family,instance,searcher,seed,wall_seconds,best_iteration_seconds,gap_to_best\n";
  auto quote = [](const std::string& s) { return "\"" + s + "\""; };
  for (const Row& r : rows) {
    rows_csv += fmt::format("{},{},{},{},{},{},{},{},{},{},{}\n", quote(r.family), quote(r.instance),
                            quote(r.searcher), r.seed, r.status, r.devices, r.layers,
                            std::isfinite(r.seconds) ? fmt::format("{:.9g}", r.seconds) : "",
                            std::isfinite(r.gap_best) ? fmt::format("{:.9g}", r.gap_best) : "",
                            std::isfinite(r.gap_optimum) ? fmt::format("{:.9g}", r.gap_optimum) : "",
                            r.wall_seconds);
    const double b = best[instance_key(r)];
    for (const nlohmann::json& point : r.anytime)
      anytime_csv += fmt::format("{},{},{},{},{},{},{}\n", quote(r.family), quote(r.instance),
                                 quote(r.searcher), r.seed, point[0].get<double>(),
                                 point[1].get<double>(), point[1].get<double>() / b - 1);
  }
  WriteFileAtomically(dir + "/rows.csv", rows_csv);
  WriteFileAtomically(dir + "/anytime.csv", anytime_csv);
  WriteJsonAtomically(dir + "/report.json", {{"name", manifest.value("name", std::string())},
                                             {"cells_finished", rows.size()},
                                             {"cells", total},
                                             {"summary", summary}});

  if (options.plots) {
    const bool plotted =
        RunPlotScript(fmt::format("experiment '{}'", dir), dir + "/plot.log");
    if (plotted) {
      md += "Plots: `gap_vs_size.png` (gap to the best known plan against devices), "
            "`wall_vs_size.png` (search wall seconds against devices, log-log), `ablation.png` "
            "(median and worst gap per variant and family), `anytime.png` (gap to the best "
            "known plan against wall seconds).\n";
    } else {
      md += fmt::format("Plots skipped: experiments/plot.py did not run (needs python3 with "
                        "matplotlib; see {}/plot.log).\n",
                        dir);
    }
  }
  WriteFileAtomically(dir + "/report.md", md);
  fmt::print("{}", md);
  fmt::print("wrote {}/report.md, report.json, rows.csv, anytime.csv\n", dir);
  return kExitSuccess;
}

}  // namespace stratos
