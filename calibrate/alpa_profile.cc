#include "calibrate/alpa_profile.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <map>
#include <set>
#include <sstream>
#include <tuple>

#include "calibrate/csv_reading.h"
#include "costmodel/data_dir.h"
#include "costmodel/error.h"

namespace stratos {

namespace {

double DtypeBytes(const CsvCell& cell, const std::string& dtype) {
  if (dtype == "f16" || dtype == "bf16") return 2;
  if (dtype == "f32") return 4;
  if (dtype == "f64") return 8;
  FailCell(cell, fmt::format("\"{}\"", dtype), "must be one of f16, bf16, f32, f64");
}

// "0 1|2 3" -> {{0, 1}, {2, 3}}.
std::vector<std::vector<int>> ParseReplicaGroups(const CsvCell& cell, const std::string& text) {
  std::vector<std::vector<int>> groups;
  std::stringstream groups_in(text);
  std::string group_text;
  while (std::getline(groups_in, group_text, '|')) {
    std::vector<int> group;
    std::stringstream ids(group_text);
    std::string id;
    while (ids >> id) {
      char* end = nullptr;
      const long value = std::strtol(id.c_str(), &end, 10);
      if (end != id.c_str() + id.size() || value < 0) {
        FailCell(cell, fmt::format("\"{}\"", text), "device ids must be integers >= 0");
      }
      group.push_back(static_cast<int>(value));
    }
    groups.push_back(group);
  }
  return groups;
}

// Checks the replica groups against the other columns and the profile format's layout rule.
void CheckReplicaGroups(const CsvCell& cell, const std::string& text, const CollectiveRow& row) {
  const std::vector<std::vector<int>> groups = ParseReplicaGroups(cell, text);
  auto fail = [&](const std::string& rule) { FailCell(cell, fmt::format("\"{}\"", text), rule); };
  if (static_cast<int>(groups.size()) != row.num_groups) {
    fail(fmt::format("{} groups, but num_groups = {}", groups.size(), row.num_groups));
  }
  for (const std::vector<int>& group : groups) {
    if (static_cast<int>(group.size()) != row.group_size) {
      fail(fmt::format("a group of {} ranks, but group_size = {}", group.size(), row.group_size));
    }
    std::map<int, int> ranks_per_node;
    for (int id : group) {
      if (id >= row.nodes * row.gpus_per_node) {
        fail(fmt::format("device {} is outside the {}x{} mesh", id, row.nodes, row.gpus_per_node));
      }
      ++ranks_per_node[id / row.gpus_per_node];
    }
    const bool crosses = ranks_per_node.size() > 1;
    if (crosses != row.crosses_nodes) {
      fail(fmt::format("groups {} nodes, but crosses_nodes = {}",
                       crosses ? "cross" : "do not cross", row.crosses_nodes ? 1 : 0));
    }
    if (crosses) {
      const bool even = static_cast<int>(ranks_per_node.size()) == row.nodes &&
                        std::all_of(ranks_per_node.begin(), ranks_per_node.end(), [&](auto& p) {
                          return p.second == row.group_size / row.nodes;
                        });
      if (!even) {
        fail(
            "a group crossing nodes must spread evenly over all nodes of the mesh (the profile "
            "format's layout rule, calibrate/profile.h)");
      }
    }
  }
}

// Bytes of the buffer the profile format records, from Alpa's element count (see the header).
double CollectiveBytes(const std::string& op, long long elements, int group_size,
                       double dtype_bytes) {
  const long long g = group_size;
  if (op == "all_gather" || op == "reduce_scatter") return (elements / g) * g * dtype_bytes;
  if (op == "all_to_all") return (elements / (g * g)) * g * dtype_bytes;
  return elements * dtype_bytes;  // all_reduce
}

// Indices of rows whose size / seconds equals the running maximum of the smaller sizes' in the
// same series, i.e. rows make_monotonic overwrote. `points` are (size, seconds) per row.
std::set<size_t> MonotonicFilled(const std::vector<std::pair<double, double>>& points) {
  std::vector<size_t> order(points.size());
  for (size_t i = 0; i < order.size(); ++i) order[i] = i;
  std::sort(order.begin(), order.end(),
            [&](size_t a, size_t b) { return points[a].first < points[b].first; });
  std::set<size_t> filled;
  double best = 0;
  for (size_t i : order) {
    const auto [size, seconds] = points[i];
    if (size <= 0) continue;
    const double bandwidth = size / seconds;
    if (best > 0 && std::abs(bandwidth / best - 1.0) < 1e-9) filled.insert(i);
    best = std::max(best, bandwidth);
  }
  return filled;
}

struct RawRow {
  unsigned line = 0;
  std::string series;  // mesh, op, dtype, replica groups
  bool dot = false;
  double size = 0;  // elements (collectives) or FLOPs (dot), Alpa's size
  double seconds = 0;
  CollectiveRow collective;
  MatmulRow matmul;
};

}  // namespace

std::string DefaultAlpaProfilePath() {
  return SharedDataPath("alpa_v100_comm/alpa_v100_comm_1x1_to_2x8.csv");
}

std::string PathForDisplay(const std::string& path) {
  namespace fs = std::filesystem;
  std::error_code error;
  const fs::path source = fs::weakly_canonical(DataDir(), error);
  const fs::path absolute = fs::weakly_canonical(fs::absolute(path, error), error);
  if (error) return path;
  const fs::path relative = absolute.lexically_relative(source);
  if (relative.empty()) return path;
  // Inside the source tree, or in a sibling of it (../shared/...), but not further out.
  auto part = relative.begin();
  if (part != relative.end() && *part == "..") {
    ++part;
    if (part != relative.end() && *part == "..") return path;
  }
  return relative.generic_string();
}

AlpaProfile ReadAlpaProfile(const std::string& path) {
  std::error_code error;
  if (!std::filesystem::is_regular_file(path, error)) {
    throw InputError(fmt::format("{}: cannot open Alpa profile CSV", path));
  }
  AlpaProfile result;
  result.profile.info.device = "V100-SXM2-16GB (AWS p3.16xlarge)";
  result.profile.info.backend = "XLA + NCCL, Alpa's mesh profiler";
  result.profile.info.produced_by =
      fmt::format("Alpa OSDI'22 profiling database (alpa/mesh_profiling.py) read from {}",
                  std::filesystem::path(path).filename().string());
  std::vector<RawRow> raw;
  TranslateCsvErrors(path, [&] {
    CsvReader<10> in(path);
    in.read_header(io::ignore_no_column, "mesh_nodes", "mesh_gpus_per_node", "op", "dtype",
                   "num_groups", "group_size", "crosses_nodes", "elements", "seconds",
                   "replica_groups");
    int nodes = 0, gpus_per_node = 0, num_groups = 0, group_size = 0, crosses = 0;
    long long elements = 0;
    std::string op, dtype, seconds_text, replica_groups;
    while (in.read_row(nodes, gpus_per_node, op, dtype, num_groups, group_size, crosses, elements,
                       seconds_text, replica_groups)) {
      const unsigned line = in.get_file_line();
      ++result.rows_read;
      RequireAtLeast(CsvCell{path, line, "mesh_nodes"}, nodes, 1);
      RequireAtLeast(CsvCell{path, line, "mesh_gpus_per_node"}, gpus_per_node, 1);
      RequireAtLeast(CsvCell{path, line, "elements"}, elements, 0LL);
      const double dtype_bytes = DtypeBytes(CsvCell{path, line, "dtype"}, dtype);
      if (seconds_text == "inf") {
        ++result.inf_rows;
        continue;
      }
      RawRow row;
      row.line = line;
      row.seconds = ParsePositive(CsvCell{path, line, "seconds"}, seconds_text);
      row.size = static_cast<double>(elements);
      row.series = fmt::format("{}x{} {} {} {}", nodes, gpus_per_node, op, dtype, replica_groups);
      if (op == "dot") {
        row.dot = true;
        const long long n = std::llround(std::cbrt(row.size / 2.0));
        if (2.0 * n * n * n != row.size) {
          FailCell(CsvCell{path, line, "elements"}, fmt::format("{}", elements),
                   "a dot row's FLOP count must be 2 n^3 (square n x n x n matmul)");
        }
        row.matmul = MatmulRow{n, n, n, dtype, row.size, row.seconds};
      } else {
        if (op != "all_reduce" && op != "all_gather" && op != "reduce_scatter" &&
            op != "all_to_all") {
          FailCell(CsvCell{path, line, "op"}, fmt::format("\"{}\"", op),
                   "must be one of all_reduce, all_gather, reduce_scatter, all_to_all, dot");
        }
        RequireAtLeast(CsvCell{path, line, "num_groups"}, num_groups, 1);
        RequireAtLeast(CsvCell{path, line, "group_size"}, group_size, 1);
        if (crosses != 0 && crosses != 1) {
          FailCell(CsvCell{path, line, "crosses_nodes"}, fmt::format("{}", crosses),
                   "must be 0 or 1");
        }
        CollectiveRow& c = row.collective;
        c.op = op;
        c.dtype = dtype;
        c.nodes = nodes;
        c.gpus_per_node = gpus_per_node;
        c.group_size = group_size;
        c.num_groups = num_groups;
        c.crosses_nodes = crosses == 1;
        c.bytes = CollectiveBytes(op, elements, group_size, dtype_bytes);
        c.seconds = row.seconds;
        CheckReplicaGroups(CsvCell{path, line, "replica_groups"}, replica_groups, c);
      }
      raw.push_back(std::move(row));
    }
  });

  // make_monotonic works per series (mesh, op, dtype, replica groups) on Alpa's sizes.
  std::map<std::string, std::vector<size_t>> series;
  for (size_t i = 0; i < raw.size(); ++i) series[raw[i].series].push_back(i);
  std::vector<bool> filled(raw.size(), false);
  for (const auto& [key, indices] : series) {
    std::vector<std::pair<double, double>> points;
    for (size_t i : indices) points.emplace_back(raw[i].size, raw[i].seconds);
    for (size_t j : MonotonicFilled(points)) filled[indices[j]] = true;
  }

  std::set<std::tuple<std::string, double, double>> dots_seen;
  for (size_t i = 0; i < raw.size(); ++i) {
    const RawRow& row = raw[i];
    if (!row.dot) {
      (filled[i] ? result.filled_collectives : result.profile.collectives)
          .push_back(row.collective);
      continue;
    }
    if (row.size == 0) {
      ++result.zero_flop_dot_rows;
      continue;
    }
    if (!dots_seen.insert({row.matmul.dtype, row.size, row.seconds}).second) {
      ++result.duplicate_dot_rows;
      continue;
    }
    (filled[i] ? result.filled_matmuls : result.profile.matmuls).push_back(row.matmul);
  }
  return result;
}

}  // namespace stratos
