#include "costmodel/cluster_io.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <optional>
#include <sstream>
#include <vector>

#include "costmodel/error.h"
#include "costmodel/toml_reader.h"

namespace stratos {

namespace {

constexpr double kGB = 1e9;
constexpr double kGiB = 1024.0 * 1024.0 * 1024.0;
constexpr double kTFLOPS = 1e12;
constexpr double kMicrosecond = 1e-6;
// Upper bound on node_group counts (count, gpus_per_node).
constexpr long long kMaxCount = 1000000;

// The tables of an array of tables ([[key]]); throws InputError if `key` is something else.
std::vector<const toml::table*> TablesOf(const TomlTableReader& top, const char* key) {
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

DeviceSpec ReadDevice(const TomlTableReader& d) {
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

NetworkLevel ReadNetwork(const TomlTableReader& n, int index) {
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
  const toml::table root = ParseTomlText(text, where);
  const TomlTableReader top(root, "", where);
  top.AllowOnly({"cluster", "device", "node_group", "network"});

  ClusterSpec cluster;
  cluster.source = where;
  cluster.name = std::filesystem::path(where).stem().string();
  if (const toml::node* node = top.Find("cluster")) {
    if (!node->is_table()) top.Fail("cluster", "must be a table ([cluster])");
    const TomlTableReader c(*node->as_table(), "cluster", where);
    c.AllowOnly({"name", "source"});
    cluster.name = c.String("name").value_or(cluster.name);
    c.String("source");  // type check only: prose
  }

  const std::vector<const toml::table*> devices = TablesOf(top, "device");
  for (size_t i = 0; i < devices.size(); ++i) {
    const TomlTableReader d(*devices[i], fmt::format("device[{}]", i), where);
    DeviceSpec device = ReadDevice(d);
    for (const DeviceSpec& other : cluster.devices) {
      if (other.name == device.name) d.Fail("name", "duplicate device name");
    }
    cluster.devices.push_back(std::move(device));
  }

  const std::vector<const toml::table*> groups = TablesOf(top, "node_group");
  for (size_t i = 0; i < groups.size(); ++i) {
    const TomlTableReader g(*groups[i], fmt::format("node_group[{}]", i), where);
    g.AllowOnly({"count", "gpus_per_node", "device"});
    NodeGroup group;
    group.count = g.RequireInt("count", 1, kMaxCount);
    group.gpus_per_node = g.RequireInt("gpus_per_node", 1, kMaxCount);
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
    const TomlTableReader n(*networks[i], fmt::format("network[{}]", i), where);
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
