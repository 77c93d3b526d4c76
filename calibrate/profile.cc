#include "calibrate/profile.h"

#include <fmt/format.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "calibrate/csv_reading.h"
#include "costmodel/atomic_file.h"
#include "costmodel/error.h"
#include "costmodel/json_reader.h"

namespace stratos {

namespace {

namespace fs = std::filesystem;

constexpr const char* kProfileSchema = "stratos.profile/1";

void RequireDtype(const CsvCell& cell, const std::string& dtype) {
  if (dtype != "f16" && dtype != "bf16" && dtype != "f32" && dtype != "f64") {
    FailCell(cell, fmt::format("\"{}\"", dtype), "must be one of f16, bf16, f32, f64");
  }
}

std::string RequireFile(const std::string& dir, const char* name) {
  const std::string path = (fs::path(dir) / name).string();
  std::error_code error;
  if (!fs::is_regular_file(path, error)) {
    throw InputError(
        fmt::format("{}: missing (a profile directory holds matmul.csv, "
                    "collective.csv, layer.csv and profile.json)",
                    path));
  }
  return path;
}

std::vector<MatmulRow> ReadMatmuls(const std::string& path) {
  std::vector<MatmulRow> rows;
  TranslateCsvErrors(path, [&] {
    CsvReader<6> in(path);
    in.read_header(io::ignore_no_column, "m", "n", "k", "dtype", "flops", "seconds");
    MatmulRow row;
    std::string flops;
    std::string seconds;
    while (in.read_row(row.m, row.n, row.k, row.dtype, flops, seconds)) {
      const unsigned line = in.get_file_line();
      RequireAtLeast(CsvCell{path, line, "m"}, row.m, 1LL);
      RequireAtLeast(CsvCell{path, line, "n"}, row.n, 1LL);
      RequireAtLeast(CsvCell{path, line, "k"}, row.k, 1LL);
      RequireDtype(CsvCell{path, line, "dtype"}, row.dtype);
      row.flops = ParsePositive(CsvCell{path, line, "flops"}, flops);
      const double expected = 2.0 * row.m * row.n * row.k;
      if (std::abs(row.flops / expected - 1.0) > 1e-9) {
        FailCell(CsvCell{path, line, "flops"}, flops,
                 fmt::format("must be 2 m n k = {}", expected));
      }
      row.seconds = ParsePositive(CsvCell{path, line, "seconds"}, seconds);
      rows.push_back(row);
    }
  });
  return rows;
}

bool KnownOp(const std::string& op) {
  return op == "all_reduce" || op == "all_gather" || op == "reduce_scatter" || op == "all_to_all" ||
         op == "send_recv";
}

std::vector<CollectiveRow> ReadCollectives(const std::string& path) {
  std::vector<CollectiveRow> rows;
  TranslateCsvErrors(path, [&] {
    CsvReader<9> in(path);
    in.read_header(io::ignore_no_column, "op", "dtype", "nodes", "gpus_per_node", "group_size",
                   "num_groups", "crosses_nodes", "bytes", "seconds");
    CollectiveRow row;
    int crosses = 0;
    std::string bytes;
    std::string seconds;
    while (in.read_row(row.op, row.dtype, row.nodes, row.gpus_per_node, row.group_size,
                       row.num_groups, crosses, bytes, seconds)) {
      const unsigned line = in.get_file_line();
      if (!KnownOp(row.op)) {
        FailCell(CsvCell{path, line, "op"}, fmt::format("\"{}\"", row.op),
                 "must be one of all_reduce, all_gather, reduce_scatter, all_to_all, send_recv");
      }
      RequireDtype(CsvCell{path, line, "dtype"}, row.dtype);
      RequireAtLeast(CsvCell{path, line, "nodes"}, row.nodes, 1);
      RequireAtLeast(CsvCell{path, line, "gpus_per_node"}, row.gpus_per_node, 1);
      RequireAtLeast(CsvCell{path, line, "group_size"}, row.group_size, 1);
      RequireAtLeast(CsvCell{path, line, "num_groups"}, row.num_groups, 1);
      if (crosses != 0 && crosses != 1) {
        FailCell(CsvCell{path, line, "crosses_nodes"}, fmt::format("{}", crosses),
                 "must be 0 or 1");
      }
      row.crosses_nodes = crosses == 1;
      if (static_cast<long long>(row.group_size) * row.num_groups >
          static_cast<long long>(row.nodes) * row.gpus_per_node) {
        FailCell(CsvCell{path, line, "num_groups"}, fmt::format("{}", row.num_groups),
                 fmt::format("{} groups of {} do not fit the {}x{} mesh", row.num_groups,
                             row.group_size, row.nodes, row.gpus_per_node));
      }
      if (!row.crosses_nodes && row.group_size > row.gpus_per_node) {
        FailCell(CsvCell{path, line, "group_size"}, fmt::format("{}", row.group_size),
                 fmt::format("a group inside one node has at most gpus_per_node = {} ranks "
                             "(or set crosses_nodes = 1)",
                             row.gpus_per_node));
      }
      if (row.crosses_nodes && (row.nodes < 2 || row.group_size % row.nodes != 0 ||
                                row.group_size / row.nodes > row.gpus_per_node)) {
        FailCell(CsvCell{path, line, "group_size"}, fmt::format("{}", row.group_size),
                 fmt::format("a group crossing nodes spreads evenly over all nodes = {}: needs "
                             "nodes >= 2 and group_size = nodes x (1..gpus_per_node)",
                             row.nodes));
      }
      row.bytes = ParseNonNegative(CsvCell{path, line, "bytes"}, bytes);
      row.seconds = ParsePositive(CsvCell{path, line, "seconds"}, seconds);
      rows.push_back(row);
    }
  });
  return rows;
}

std::vector<LayerRow> ReadLayers(const std::string& path) {
  std::vector<LayerRow> rows;
  TranslateCsvErrors(path, [&] {
    CsvReader<9> in(path);
    in.read_header(io::ignore_no_column, "hidden", "heads", "seq_len", "micro_batch",
                   "tensor_parallel", "dtype", "forward_flops", "forward_seconds",
                   "backward_seconds");
    LayerRow row;
    std::string flops;
    std::string forward;
    std::string backward;
    while (in.read_row(row.hidden, row.heads, row.seq_len, row.micro_batch, row.tensor_parallel,
                       row.dtype, flops, forward, backward)) {
      const unsigned line = in.get_file_line();
      RequireAtLeast(CsvCell{path, line, "hidden"}, row.hidden, 1);
      RequireAtLeast(CsvCell{path, line, "heads"}, row.heads, 1);
      RequireAtLeast(CsvCell{path, line, "seq_len"}, row.seq_len, 1);
      RequireAtLeast(CsvCell{path, line, "micro_batch"}, row.micro_batch, 1);
      RequireAtLeast(CsvCell{path, line, "tensor_parallel"}, row.tensor_parallel, 1);
      if (row.hidden % row.heads != 0) {
        FailCell(CsvCell{path, line, "heads"}, fmt::format("{}", row.heads),
                 fmt::format("must divide hidden = {}", row.hidden));
      }
      if (row.heads % row.tensor_parallel != 0) {
        FailCell(CsvCell{path, line, "tensor_parallel"}, fmt::format("{}", row.tensor_parallel),
                 fmt::format("must divide heads = {}", row.heads));
      }
      RequireDtype(CsvCell{path, line, "dtype"}, row.dtype);
      row.forward_flops = ParsePositive(CsvCell{path, line, "forward_flops"}, flops);
      row.forward_seconds = ParsePositive(CsvCell{path, line, "forward_seconds"}, forward);
      row.backward_seconds = ParsePositive(CsvCell{path, line, "backward_seconds"}, backward);
      rows.push_back(row);
    }
  });
  return rows;
}

ProfileInfo ReadInfo(const std::string& path) {
  const nlohmann::json json = ReadJsonInputFile(path, "profile metadata");
  if (!json.is_object()) throw InputError(fmt::format("{}: must be a JSON object", path));
  for (const auto& [key, value] : json.items()) {
    if (key != "schema" && key != "device" && key != "backend" && key != "produced_by" &&
        key != "notes" && key != "attention") {
      throw InputError(fmt::format("{}: {}: unknown key (known keys: schema, device, backend, "
                                   "produced_by, notes, attention)",
                                   path, key));
    }
    if (!value.is_string()) {
      throw InputError(fmt::format("{}: {} = {}: must be a string", path, key, value.dump()));
    }
  }
  auto required = [&](const char* key) {
    if (!json.contains(key))
      throw InputError(fmt::format("{}: {}: missing required key", path, key));
    return json[key].get<std::string>();
  };
  const std::string schema = required("schema");
  if (schema != kProfileSchema) {
    throw InputError(
        fmt::format("{}: schema = \"{}\": must be \"{}\"", path, schema, kProfileSchema));
  }
  ProfileInfo info;
  info.device = required("device");
  info.backend = required("backend");
  info.produced_by = required("produced_by");
  info.notes = json.value("notes", "");
  info.attention = json.value("attention", "");
  if (!info.attention.empty() && info.attention != "fused" && info.attention != "materialized")
    throw InputError(fmt::format("{}: attention = \"{}\": must be \"fused\" or \"materialized\"",
                                 path, info.attention));
  return info;
}

}  // namespace

GroupLayout CollectiveRow::Layout() const {
  GroupLayout layout;
  if (crosses_nodes) {
    layout.nodes = nodes;
    layout.gpus_per_node = group_size / nodes;
    layout.concurrent_groups = num_groups;
  } else {
    layout.nodes = 1;
    layout.gpus_per_node = group_size;
    layout.concurrent_groups = 1;
  }
  return layout;
}

std::optional<Collective> CollectiveRow::Kind() const { return ParseCollectiveName(op); }

Profile ReadProfileDir(const std::string& dir) {
  std::error_code error;
  if (!fs::is_directory(dir, error)) {
    throw InputError(
        fmt::format("{}: not a profile directory (expected matmul.csv, "
                    "collective.csv, layer.csv, profile.json)",
                    dir));
  }
  Profile profile;
  profile.info = ReadInfo(RequireFile(dir, "profile.json"));
  profile.matmuls = ReadMatmuls(RequireFile(dir, "matmul.csv"));
  profile.collectives = ReadCollectives(RequireFile(dir, "collective.csv"));
  profile.layers = ReadLayers(RequireFile(dir, "layer.csv"));
  return profile;
}


void WriteProfileDir(const Profile& profile, const std::string& dir) {
  std::error_code error;
  fs::create_directories(dir, error);
  if (error) {
    throw InputError(fmt::format("{}: cannot create profile directory: {}", dir, error.message()));
  }
  // fmt's "{}" writes the shortest decimal that reads back to the same double.
  std::string matmul = "m,n,k,dtype,flops,seconds\n";
  for (const MatmulRow& r : profile.matmuls) {
    matmul += fmt::format("{},{},{},{},{},{}\n", r.m, r.n, r.k, r.dtype, r.flops, r.seconds);
  }
  std::string collective =
      "op,dtype,nodes,gpus_per_node,group_size,num_groups,crosses_nodes,bytes,seconds\n";
  for (const CollectiveRow& r : profile.collectives) {
    collective +=
        fmt::format("{},{},{},{},{},{},{},{},{}\n", r.op, r.dtype, r.nodes, r.gpus_per_node,
                    r.group_size, r.num_groups, r.crosses_nodes ? 1 : 0, r.bytes, r.seconds);
  }
  std::string layer =
      "hidden,heads,seq_len,micro_batch,tensor_parallel,dtype,forward_flops,forward_seconds,"
      "backward_seconds\n";
  for (const LayerRow& r : profile.layers) {
    layer += fmt::format("{},{},{},{},{},{},{},{},{}\n", r.hidden, r.heads, r.seq_len,
                         r.micro_batch, r.tensor_parallel, r.dtype, r.forward_flops,
                         r.forward_seconds, r.backward_seconds);
  }
  nlohmann::json info = {{"schema", kProfileSchema},
                         {"device", profile.info.device},
                         {"backend", profile.info.backend},
                         {"produced_by", profile.info.produced_by}};
  if (!profile.info.notes.empty()) info["notes"] = profile.info.notes;
  if (!profile.info.attention.empty()) info["attention"] = profile.info.attention;
  const fs::path root(dir);
  WriteFileAtomically((root / "matmul.csv").string(), matmul);
  WriteFileAtomically((root / "collective.csv").string(), collective);
  WriteFileAtomically((root / "layer.csv").string(), layer);
  WriteFileAtomically((root / "profile.json").string(), info.dump(2) + "\n");
}

}  // namespace stratos
