#include "costmodel/cluster_io.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <optional>
#include <sstream>
#include <system_error>
#include <vector>

#include "costmodel/error.h"
#include "costmodel/toml_reader.h"
#include "costmodel/zoo.h"

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

// The table at `key` of `parent`, or nullopt when absent; throws InputError if it is not a table.
std::optional<TomlTableReader> SubTable(const TomlTableReader& parent, const std::string& key) {
  const toml::node* node = parent.Find(key);
  if (node == nullptr) return std::nullopt;
  if (!node->is_table()) {
    parent.Fail(key, fmt::format("must be a table ([{}])", parent.KeyPath(key)));
  }
  return TomlTableReader(*node->as_table(), parent.KeyPath(key), parent.Where());
}

double RequiredNonNegative(const TomlTableReader& t, const char* key) {
  if (t.Find(key) == nullptr) t.Missing(key);
  return *t.NonNegative(key);
}

// [device.matmul_curve]: calibrated GEMM efficiency curve (cluster.h MatmulCurve).
MatmulCurve ReadMatmulCurve(const TomlTableReader& c) {
  c.AllowOnly({"max_efficiency", "half_efficiency_dim", "overhead_us"});
  MatmulCurve curve;
  if (c.Find("max_efficiency") == nullptr) c.Missing("max_efficiency");
  curve.max_efficiency = c.Fraction("max_efficiency");
  curve.half_efficiency_dim = RequiredNonNegative(c, "half_efficiency_dim");
  curve.overhead_seconds = RequiredNonNegative(c, "overhead_us") * kMicrosecond;
  return curve;
}

// [device.layer_curve]: calibrated transformer-block curve (cluster.h LayerCurve).
LayerCurve ReadLayerCurve(const TomlTableReader& c) {
  c.AllowOnly({"forward_scale", "backward_scale", "forward_floor_us", "backward_floor_us",
               "power"});
  LayerCurve curve;
  curve.forward_scale = c.Positive("forward_scale");
  curve.backward_scale = c.Positive("backward_scale");
  curve.forward_floor_seconds = RequiredNonNegative(c, "forward_floor_us") * kMicrosecond;
  curve.backward_floor_seconds = RequiredNonNegative(c, "backward_floor_us") * kMicrosecond;
  curve.power = c.Positive("power");
  if (curve.power < 1.0) c.Fail("power", "must be >= 1");
  return curve;
}

// The cluster files being read through [[device]] from_cluster references, outermost first: a
// reference back to one of them is a cycle.
thread_local std::vector<std::string> from_cluster_stack;

// [[device]] from_cluster = "<zoo cluster or file>" (optional device = "<name>"): that cluster
// file's device, whole. A relative path is taken beside the file that names it first. Errors in
// the referenced file propagate as they are (they name it).
DeviceSpec ReadDeviceFromCluster(const TomlTableReader& d) {
  d.AllowOnly({"from_cluster", "device"});
  const std::string reference = d.RequireString("from_cluster");
  const std::filesystem::path beside =
      std::filesystem::path(d.Where()).parent_path() / std::filesystem::path(reference);
  std::error_code ignored;
  const bool is_beside = std::filesystem::path(reference).is_relative() &&
                         std::filesystem::is_regular_file(beside, ignored);
  std::string path;
  try {
    path = is_beside ? beside.string() : ResolveClusterPath(reference);
  } catch (const InputError&) {
    d.Fail("from_cluster", fmt::format("not a file and not a zoo cluster (zoo: {})",
                                       fmt::join(ZooClusters(), ", ")));
  }
  const std::string canonical = std::filesystem::weakly_canonical(path).string();
  if (std::find(from_cluster_stack.begin(), from_cluster_stack.end(), canonical) !=
      from_cluster_stack.end())
    d.Fail("from_cluster", fmt::format("refers back to {}, which is being read (a cycle)", path));
  const ClusterSpec source = [&] {
    // The file stays on the stack while it is read, and leaves it however the read ends.
    struct StackEntry {
      explicit StackEntry(const std::string& file) { from_cluster_stack.push_back(file); }
      ~StackEntry() { from_cluster_stack.pop_back(); }
    } entry(canonical);
    return ReadClusterFile(path);
  }();
  std::vector<std::string> known;
  for (const DeviceSpec& device : source.devices) known.push_back('"' + device.name + '"');
  const std::optional<std::string> wanted = d.String("device");
  if (!wanted && source.devices.size() > 1)
    d.Fail("from_cluster", fmt::format("{} has {} devices: name one with device = (known: {})",
                                       path, source.devices.size(), fmt::join(known, ", ")));
  const auto found =
      std::find_if(source.devices.begin(), source.devices.end(),
                   [&](const DeviceSpec& device) { return !wanted || device.name == *wanted; });
  if (found == source.devices.end())
    d.Fail("device",
           fmt::format("names no device of {} (known: {})", path, fmt::join(known, ", ")));
  DeviceSpec device = *found;
  device.source = fmt::format("the device of cluster {} ({}): {}", source.name, path,
                              device.source);
  return device;
}

DeviceSpec ReadDevice(const TomlTableReader& d) {
  if (d.Find("from_cluster") != nullptr) return ReadDeviceFromCluster(d);
  d.AllowOnly({"name", "peak_TFLOPS", "memory_GB", "memory_GiB", "hbm_GBps", "matmul_efficiency",
               "measured_matmul_TFLOPS", "reserved_memory_GB", "reserved_memory_GiB",
               "memory_fragmentation", "matmul_curve", "layer_curve", "source"});
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
  device.memory_fragmentation = d.NonNegative("memory_fragmentation").value_or(0.0);
  if (device.memory_fragmentation >= 1.0) d.Fail("memory_fragmentation", "must be < 1");
  if (const std::optional<TomlTableReader> curve = SubTable(d, "matmul_curve")) {
    device.matmul_curve = ReadMatmulCurve(*curve);
  }
  if (const std::optional<TomlTableReader> curve = SubTable(d, "layer_curve")) {
    device.layer_curve = ReadLayerCurve(*curve);
  }
  device.source = d.String("source").value_or("");
  return device;
}

NetworkLevel ReadNetwork(const TomlTableReader& n, int index) {
  std::vector<std::string> known = {"name", "bandwidth_GBps", "latency_us", "efficiency",
                                    "ring_links_per_gpu", "source"};
  for (Collective kind : kAllCollectives) known.push_back(CollectiveName(kind));
  n.AllowOnly(known);
  NetworkLevel level;
  level.name = n.String("name").value_or(index == 0 ? "intra-node" : "inter-node");
  level.bandwidth_bytes_per_second = n.Positive("bandwidth_GBps") * kGB;
  level.latency_seconds = RequiredNonNegative(n, "latency_us") * kMicrosecond;
  level.efficiency = n.Fraction("efficiency");
  if (n.Find("ring_links_per_gpu") != nullptr) {
    level.ring_links_per_gpu = static_cast<int>(*n.Int("ring_links_per_gpu", 1, 1024));
  }
  // [network.<collective>]: calibrated bandwidth and latency of one collective on this level.
  for (Collective kind : kAllCollectives) {
    if (const std::optional<TomlTableReader> fit = SubTable(n, CollectiveName(kind))) {
      fit->AllowOnly({"bandwidth_GBps", "latency_us", "pipeline_us_per_sqrt_MB"});
      LinkFit link;
      link.bandwidth_bytes_per_second = fit->Positive("bandwidth_GBps") * kGB;
      link.latency_seconds = RequiredNonNegative(*fit, "latency_us") * kMicrosecond;
      if (fit->Find("pipeline_us_per_sqrt_MB") != nullptr)
        link.pipeline_seconds_per_sqrt_byte =
            RequiredNonNegative(*fit, "pipeline_us_per_sqrt_MB") * LinkFit::kUsPerSqrtMB;
      level.collective_fits[static_cast<int>(kind)] = link;
    }
  }
  level.source = n.String("source").value_or("");
  return level;
}

// [collective.<name>]: per-collective launch cost and inter-node algorithm.
void ReadCollectives(const TomlTableReader& top, ClusterSpec& cluster) {
  const std::optional<TomlTableReader> table = SubTable(top, "collective");
  if (!table) return;
  std::vector<std::string> names;
  for (Collective kind : kAllCollectives) names.push_back(CollectiveName(kind));
  table->AllowOnly(names);
  for (Collective kind : kAllCollectives) {
    const std::optional<TomlTableReader> c = SubTable(*table, CollectiveName(kind));
    if (!c) continue;
    c->AllowOnly({"launch_us", "inter_node_algorithm"});
    CollectiveCalibration& calibration = cluster.collectives[static_cast<int>(kind)];
    calibration.launch_seconds = c->NonNegative("launch_us").value_or(0.0) * kMicrosecond;
    if (const std::optional<std::string> name = c->String("inter_node_algorithm")) {
      const std::optional<InterNodeAlgorithm> algorithm = ParseInterNodeAlgorithmName(*name);
      if (!algorithm) c->Fail("inter_node_algorithm", "must be \"hierarchical\" or \"ring\"");
      calibration.inter_node_algorithm = *algorithm;
    }
  }
}

// [calibration]: what the calibrated constants were fitted on.
void ReadCalibration(const TomlTableReader& top, ClusterSpec& cluster) {
  const std::optional<TomlTableReader> c = SubTable(top, "calibration");
  if (!c) return;
  c->AllowOnly({"source", "collective_rows", "matmul_rows", "layer_rows"});
  cluster.calibration.source = c->RequireString("source");
  cluster.calibration.collective_rows = static_cast<int>(c->Int("collective_rows", 0).value_or(0));
  cluster.calibration.matmul_rows = static_cast<int>(c->Int("matmul_rows", 0).value_or(0));
  cluster.calibration.layer_rows = static_cast<int>(c->Int("layer_rows", 0).value_or(0));
}

}  // namespace

ClusterSpec ParseClusterToml(std::string_view text, const std::string& where) {
  const toml::table root = ParseTomlText(text, where);
  const TomlTableReader top(root, "", where);
  top.AllowOnly({"cluster", "device", "node_group", "network", "group_link", "collective",
                 "calibration"});

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

  const std::vector<const toml::table*> networks = TablesOf(top, "network");
  std::vector<TomlTableReader> network_readers;
  for (size_t i = 0; i < networks.size(); ++i) {
    network_readers.emplace_back(*networks[i], fmt::format("network[{}]", i), where);
    cluster.networks.push_back(ReadNetwork(network_readers.back(), static_cast<int>(i)));
  }
  // Who uses each level: a node group inside or between its nodes, or a group link.
  std::vector<bool> referenced(networks.size(), false);
  const auto network_named = [&](const TomlTableReader& t, const char* key) {
    const std::string wanted = t.RequireString(key);
    int found = -1;
    std::vector<std::string> known;
    for (size_t i = 0; i < cluster.networks.size(); ++i) {
      known.push_back('"' + cluster.networks[i].name + '"');
      if (cluster.networks[i].name != wanted) continue;
      if (found >= 0)
        t.Fail(key, fmt::format("is ambiguous: network[{}] and network[{}] share the name", found,
                                i));
      found = static_cast<int>(i);
    }
    if (found < 0)
      t.Fail(key, fmt::format("names no [[network]] (known: {})", fmt::join(known, ", ")));
    referenced[found] = true;
    return found;
  };

  const std::vector<const toml::table*> groups = TablesOf(top, "node_group");
  std::vector<TomlTableReader> group_readers;
  for (size_t i = 0; i < groups.size(); ++i) {
    group_readers.emplace_back(*groups[i], fmt::format("node_group[{}]", i), where);
    const TomlTableReader& g = group_readers.back();
    g.AllowOnly({"name", "count", "gpus_per_node", "device", "intra_node_network",
                 "inter_node_network"});
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
    group.name = g.String("name").value_or("");
    if (g.Find("name") != nullptr && group.name.empty()) g.Fail("name", "must not be empty");
    if (g.Find("intra_node_network") != nullptr)
      group.intra_node_network = network_named(g, "intra_node_network");
    if (g.Find("inter_node_network") != nullptr)
      group.inter_node_network = network_named(g, "inter_node_network");
    cluster.node_groups.push_back(std::move(group));
  }
  // Names: given ones must be unique; a group without one goes by its device's name, or by
  // "<device>-<index>" when another group has that name too.
  for (size_t i = 0; i < groups.size(); ++i) {
    const std::string& named = cluster.node_groups[i].name;
    for (size_t j = 0; j < i && !named.empty(); ++j)
      if (cluster.node_groups[j].name == named)
        group_readers[i].Fail("name", fmt::format("duplicate node group name (node_group[{}])", j));
  }
  std::vector<std::string> names;
  for (size_t i = 0; i < groups.size(); ++i) {
    const NodeGroup& group = cluster.node_groups[i];
    int sharing = 0;
    for (const NodeGroup& other : cluster.node_groups)
      sharing += other.name == group.device || (other.name.empty() && other.device == group.device);
    names.push_back(!group.name.empty() ? group.name
                    : sharing > 1       ? fmt::format("{}-{}", group.device, i)
                                        : group.device);
  }
  for (size_t i = 0; i < groups.size(); ++i) cluster.node_groups[i].name = names[i];
  if (cluster.DeviceCount64() > ClusterSpec::kMaxDevices)
    ThrowInputError(where, "node_group",
                    fmt::format("{} devices (count x gpus_per_node)", cluster.DeviceCount64()),
                    fmt::format("must be at most {}", ClusterSpec::kMaxDevices));

  // [[group_link]]: the level between the nodes of two groups.
  if (const toml::node* node = top.Find("group_link")) {
    const toml::array* array = node->as_array();
    if (array == nullptr || !array->is_array_of_tables())
      top.Fail("group_link", "must be an array of tables ([[group_link]])");
    for (size_t i = 0; i < array->size(); ++i) {
      const TomlTableReader l(*array->get(i)->as_table(), fmt::format("group_link[{}]", i), where);
      l.AllowOnly({"groups", "network", "source"});
      const toml::node* pair = l.Find("groups");
      if (pair == nullptr) l.Missing("groups");
      const toml::array* names = pair->as_array();
      if (names == nullptr || names->size() != 2 || !names->is_homogeneous<std::string>())
        l.Fail("groups", "must be an array of two node group names, e.g. [\"a100\", \"v100\"]");
      GroupLink link;
      int* ends[2] = {&link.first_group, &link.second_group};
      for (int e = 0; e < 2; ++e) {
        const std::string group_name = **names->get(e)->as_string();
        *ends[e] = cluster.GroupIndex(group_name);
        if (*ends[e] < 0)
          l.Fail("groups", fmt::format("names no node group \"{}\" (groups: {})", group_name,
                                       cluster.GroupNames()));
      }
      if (link.first_group == link.second_group)
        l.Fail("groups", "must name two different node groups (a group's own nodes talk over its "
                         "inter_node_network)");
      for (size_t j = 0; j < cluster.group_links.size(); ++j) {
        const GroupLink& other = cluster.group_links[j];
        if (std::minmax(other.first_group, other.second_group) ==
            std::minmax(link.first_group, link.second_group))
          l.Fail("groups", fmt::format("links the same two groups as group_link[{}]", j));
      }
      link.network = network_named(l, "network");
      l.String("source");  // type check only: prose
      cluster.group_links.push_back(link);
    }
  }

  // Levels: the first two serve groups that name none; further ones must be named; a level
  // between nodes has no ring links.
  for (int g = 0; g < cluster.NumGroups(); ++g) {
    const NodeGroup& group = cluster.node_groups[g];
    if (group.intra_node_network < 0) referenced[0] = true;
    if (group.inter_node_network < 0 && networks.size() > 1) referenced[1] = true;
  }
  for (size_t i = 2; i < networks.size(); ++i)
    if (!referenced[i])
      network_readers[i].Fail(
          "name", "is not used: a level after the first two must be named by a node_group's "
                  "intra_node_network or inter_node_network or by a group_link's network");
  const auto no_ring_links = [&](int level, const std::string& user) {
    if (cluster.networks[level].ring_links_per_gpu > 0)
      network_readers[level].Fail(
          "ring_links_per_gpu",
          fmt::format("only an intra-node level has ring links; this one is {}", user));
  };
  for (int g = 0; g < cluster.NumGroups(); ++g) {
    const int inter = cluster.node_groups[g].inter_node_network;
    if (inter >= 0) no_ring_links(inter, fmt::format("node_group[{}]'s inter-node level", g));
    if (inter < 0 && networks.size() > 1)
      no_ring_links(1, fmt::format("node_group[{}]'s inter-node level", g));
  }
  for (size_t i = 0; i < cluster.group_links.size(); ++i)
    no_ring_links(cluster.group_links[i].network, fmt::format("group_link[{}]'s level", i));
  ReadCollectives(top, cluster);
  ReadCalibration(top, cluster);
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
