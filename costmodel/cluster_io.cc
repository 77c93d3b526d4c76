#include "costmodel/cluster_io.h"

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <toml++/toml.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <optional>
#include <sstream>
#include <vector>

#include "costmodel/error.h"

namespace stratos {

namespace {

constexpr double kGB = 1e9;
constexpr double kGiB = 1024.0 * 1024.0 * 1024.0;
constexpr double kTFLOPS = 1e12;
constexpr double kMicrosecond = 1e-6;

// ---------------------------------------------------------------------------------------------
// TOML table reading with key paths in every error. The same small helper lives in
// model_io.cc: toml++ is a private dependency of costmodel, so it cannot go in a public header;
// a shared private costmodel/toml_reader.{h,cc} would remove the copy.

std::string Repr(const toml::node& node) {
  if (node.is_table()) return "{table}";
  if (node.is_string()) {  // double quotes, as written in the file (toml++ prints 'single')
    std::string quoted = "\"";
    for (char c : node.as_string()->get()) {
      if (c == '"' || c == '\\') quoted += '\\';
      quoted += c;
    }
    return quoted + "\"";
  }
  std::ostringstream out;
  node.visit([&out](const auto& value) { out << value; });
  return out.str();
}

class TableReader {
 public:
  TableReader(const toml::table& table, std::string path, std::string where)
      : table_(table), path_(std::move(path)), where_(std::move(where)) {}

  std::string KeyPath(std::string_view key) const {
    return path_.empty() ? std::string(key) : fmt::format("{}.{}", path_, key);
  }
  const toml::node* Find(std::string_view key) const { return table_.get(key); }
  const std::string& Where() const { return where_; }

  void AllowOnly(const std::vector<std::string>& known) const {
    for (const auto& [key, node] : table_) {
      bool ok = false;
      for (const std::string& k : known) ok = ok || k == key.str();
      if (!ok) {
        throw InputError(fmt::format("{}: {}: unknown key (known keys: {})", where_,
                                     KeyPath(key.str()), fmt::join(known, ", ")));
      }
    }
  }

  [[noreturn]] void Fail(std::string_view key, const std::string& rule) const {
    ThrowInputError(where_, KeyPath(key), Repr(*Find(key)), rule);
  }
  [[noreturn]] void Missing(std::string_view key) const {
    throw InputError(fmt::format("{}: {}: missing required key", where_, KeyPath(key)));
  }

  int RequireInt(std::string_view key, long long min) const {
    const toml::node* node = Find(key);
    if (node == nullptr) Missing(key);
    if (!node->is_integer()) Fail(key, "must be an integer");
    const long long value = node->as_integer()->get();
    if (value < min) Fail(key, fmt::format("must be >= {}", min));
    if (value > 1000000) Fail(key, "must be <= 1000000");
    return static_cast<int>(value);
  }

  // Integer or float, absent -> nullopt.
  std::optional<double> Number(std::string_view key) const {
    const toml::node* node = Find(key);
    if (node == nullptr) return std::nullopt;
    if (!node->is_number()) Fail(key, "must be a number");
    return node->value<double>().value();
  }
  double RequireNumber(std::string_view key) const {
    if (Find(key) == nullptr) Missing(key);
    return *Number(key);
  }
  double Positive(std::string_view key) const {
    const double value = RequireNumber(key);
    if (!(value > 0)) Fail(key, "must be > 0");
    return value;
  }
  std::optional<double> NonNegative(std::string_view key) const {
    const std::optional<double> value = Number(key);
    if (value && !(*value >= 0)) Fail(key, "must be >= 0");
    return value;
  }
  // In (0, 1], default 1.
  double Fraction(std::string_view key) const {
    const double value = Number(key).value_or(1.0);
    if (!(value > 0 && value <= 1)) Fail(key, "must be in (0, 1]");
    return value;
  }

  std::optional<std::string> String(std::string_view key) const {
    const toml::node* node = Find(key);
    if (node == nullptr) return std::nullopt;
    if (!node->is_string()) Fail(key, "must be a string");
    return node->as_string()->get();
  }
  std::string RequireString(std::string_view key) const {
    if (Find(key) == nullptr) Missing(key);
    return *String(key);
  }

  // Exactly one of two keys (e.g. memory_GB / memory_GiB); returns the index of the one present.
  int OneOf(std::string_view first, std::string_view second, bool required) const {
    const bool has_first = Find(first) != nullptr;
    const bool has_second = Find(second) != nullptr;
    if (has_first && has_second)
      Fail(second, fmt::format("give only one of {}, {}", first, second));
    if (!has_first && !has_second) {
      if (!required) return -1;
      throw InputError(fmt::format("{}: {} | {}: missing required key (give one)", where_,
                                   KeyPath(first), KeyPath(second)));
    }
    return has_first ? 0 : 1;
  }

 private:
  const toml::table& table_;
  std::string path_;
  std::string where_;
};

// The tables of an array of tables ([[key]]); throws InputError if `key` is something else.
std::vector<const toml::table*> TablesOf(const TableReader& top, const char* key) {
  std::vector<const toml::table*> tables;
  const toml::node* node = top.Find(key);
  if (node == nullptr) {
    throw InputError(fmt::format("{}: {}: missing required key (at least one [[{}]])", top.Where(),
                                 top.KeyPath(key), key));
  }
  const toml::array* array = node->as_array();
  if (array == nullptr || !array->is_array_of_tables() || array->empty()) {
    top.Fail(key, fmt::format("must be a non-empty array of tables ([[{}]])", key));
  }
  for (const toml::node& element : *array) tables.push_back(element.as_table());
  return tables;
}

DeviceSpec ReadDevice(const TableReader& d) {
  d.AllowOnly({"name", "peak_TFLOPS", "memory_GB", "memory_GiB", "hbm_GBps", "matmul_efficiency",
               "measured_matmul_TFLOPS", "reserved_memory_GB", "reserved_memory_GiB", "source"});
  DeviceSpec device;
  device.name = d.RequireString("name");
  const double peak_tflops = d.Positive("peak_TFLOPS");
  device.peak_flops = peak_tflops * kTFLOPS;
  const int memory_unit = d.OneOf("memory_GB", "memory_GiB", /*required=*/true);
  device.memory_bytes =
      memory_unit == 0 ? d.Positive("memory_GB") * kGB : d.Positive("memory_GiB") * kGiB;
  device.hbm_bytes_per_second = d.Positive("hbm_GBps") * kGB;
  if (d.OneOf("matmul_efficiency", "measured_matmul_TFLOPS", /*required=*/false) == 1) {
    const double measured = d.Positive("measured_matmul_TFLOPS");
    if (measured > peak_tflops) {
      d.Fail("measured_matmul_TFLOPS", fmt::format("must be <= peak_TFLOPS = {}", peak_tflops));
    }
    device.matmul_efficiency = measured / peak_tflops;
  } else {
    device.matmul_efficiency = d.Fraction("matmul_efficiency");
  }
  const int reserved_unit = d.OneOf("reserved_memory_GB", "reserved_memory_GiB", false);
  if (reserved_unit == 0) device.reserved_memory_bytes = *d.NonNegative("reserved_memory_GB") * kGB;
  if (reserved_unit == 1) {
    device.reserved_memory_bytes = *d.NonNegative("reserved_memory_GiB") * kGiB;
  }
  if (device.reserved_memory_bytes >= device.memory_bytes) {
    d.Fail(reserved_unit == 0 ? "reserved_memory_GB" : "reserved_memory_GiB",
           "must be less than the device memory");
  }
  device.source = d.String("source").value_or("");
  return device;
}

NetworkLevel ReadNetwork(const TableReader& n, int index) {
  n.AllowOnly({"name", "bandwidth_GBps", "latency_us", "efficiency", "source"});
  NetworkLevel level;
  level.name = n.String("name").value_or(index == 0 ? "intra-node" : "inter-node");
  level.bandwidth_bytes_per_second = n.Positive("bandwidth_GBps") * kGB;
  if (n.Find("latency_us") == nullptr) n.Missing("latency_us");
  level.latency_seconds = *n.NonNegative("latency_us") * kMicrosecond;
  level.efficiency = n.Fraction("efficiency");
  level.source = n.String("source").value_or("");
  return level;
}

}  // namespace

ClusterSpec ParseClusterToml(std::string_view text, const std::string& where) {
  toml::table root;
  try {
    root = toml::parse(text, where);
  } catch (const toml::parse_error& error) {
    throw InputError(fmt::format("{}:{}:{}: TOML parse error: {}", where, error.source().begin.line,
                                 error.source().begin.column, error.description()));
  }
  const TableReader top(root, "", where);
  top.AllowOnly({"cluster", "device", "node_group", "network"});

  ClusterSpec cluster;
  cluster.source = where;
  cluster.name = std::filesystem::path(where).stem().string();
  if (const toml::node* node = top.Find("cluster")) {
    if (!node->is_table()) top.Fail("cluster", "must be a table ([cluster])");
    const TableReader c(*node->as_table(), "cluster", where);
    c.AllowOnly({"name", "source"});
    cluster.name = c.String("name").value_or(cluster.name);
    c.String("source");  // type check only: prose
  }

  const std::vector<const toml::table*> devices = TablesOf(top, "device");
  for (size_t i = 0; i < devices.size(); ++i) {
    const TableReader d(*devices[i], fmt::format("device[{}]", i), where);
    DeviceSpec device = ReadDevice(d);
    for (const DeviceSpec& other : cluster.devices) {
      if (other.name == device.name) d.Fail("name", "duplicate device name");
    }
    cluster.devices.push_back(std::move(device));
  }

  const std::vector<const toml::table*> groups = TablesOf(top, "node_group");
  for (size_t i = 0; i < groups.size(); ++i) {
    const TableReader g(*groups[i], fmt::format("node_group[{}]", i), where);
    g.AllowOnly({"count", "gpus_per_node", "device"});
    NodeGroup group;
    group.count = g.RequireInt("count", 1);
    group.gpus_per_node = g.RequireInt("gpus_per_node", 1);
    group.device = g.RequireString("device");
    std::vector<std::string> known;
    for (const DeviceSpec& device : cluster.devices) known.push_back('"' + device.name + '"');
    if (std::find(known.begin(), known.end(), '"' + group.device + '"') == known.end()) {
      g.Fail("device",
             fmt::format("not in the device catalog (known: {})", fmt::join(known, ", ")));
    }
    cluster.node_groups.push_back(std::move(group));
  }

  const std::vector<const toml::table*> networks = TablesOf(top, "network");
  if (networks.size() > 2) {
    throw InputError(fmt::format(
        "{}: network[2]: at most 2 network levels (intra-node, inter-node) are supported, got {}",
        where, networks.size()));
  }
  for (size_t i = 0; i < networks.size(); ++i) {
    const TableReader n(*networks[i], fmt::format("network[{}]", i), where);
    cluster.networks.push_back(ReadNetwork(n, static_cast<int>(i)));
  }
  return cluster;
}

ClusterSpec ReadClusterFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in || std::filesystem::is_directory(path)) {
    throw InputError(fmt::format("{}: cannot open cluster file", path));
  }
  std::stringstream buffer;
  buffer << in.rdbuf();
  return ParseClusterToml(buffer.str(), path);
}

}  // namespace stratos
