#include "calibrate/cluster_writer.h"

#include <toml++/toml.h>

#include <sstream>

#include "calibrate/profile.h"
#include "costmodel/atomic_file.h"

namespace stratos {

namespace {

constexpr double kGB = 1e9;
constexpr double kTFLOPS = 1e12;
constexpr double kMicrosecond = 1e-6;

void InsertSource(toml::table& table, const std::string& source) {
  if (!source.empty()) table.insert("source", source);
}

toml::table DeviceTable(const DeviceSpec& device) {
  toml::table table{{"name", device.name},
                    {"peak_TFLOPS", device.peak_flops / kTFLOPS},
                    {"memory_GB", device.memory_bytes / kGB},
                    {"hbm_GBps", device.hbm_bytes_per_second / kGB},
                    {"matmul_efficiency", device.matmul_efficiency}};
  if (device.reserved_memory_bytes > 0) {
    table.insert("reserved_memory_GB", device.reserved_memory_bytes / kGB);
  }
  if (device.memory_fragmentation > 0) {
    table.insert("memory_fragmentation", device.memory_fragmentation);
  }
  if (device.matmul_curve) {
    table.insert(
        "matmul_curve",
        toml::table{{"max_efficiency", device.matmul_curve->max_efficiency},
                    {"half_efficiency_dim", device.matmul_curve->half_efficiency_dim},
                    {"overhead_us", device.matmul_curve->overhead_seconds / kMicrosecond}});
  }
  if (device.layer_curve) {
    const LayerCurve& curve = *device.layer_curve;
    table.insert("layer_curve",
                 toml::table{{"forward_scale", curve.forward_scale},
                             {"backward_scale", curve.backward_scale},
                             {"forward_floor_us", curve.forward_floor_seconds / kMicrosecond},
                             {"backward_floor_us", curve.backward_floor_seconds / kMicrosecond},
                             {"power", curve.power}});
  }
  InsertSource(table, device.source);
  return table;
}

toml::table NetworkTable(const NetworkLevel& level) {
  toml::table table{{"name", level.name},
                    {"bandwidth_GBps", level.bandwidth_bytes_per_second / kGB},
                    {"latency_us", level.latency_seconds / kMicrosecond},
                    {"efficiency", level.efficiency}};
  if (level.ring_links_per_gpu > 0) table.insert("ring_links_per_gpu", level.ring_links_per_gpu);
  for (Collective kind : kAllCollectives) {
    const std::optional<LinkFit>& fit = level.collective_fits[static_cast<int>(kind)];
    if (!fit) continue;
    toml::table fit_table{{"bandwidth_GBps", fit->bandwidth_bytes_per_second / kGB},
                          {"latency_us", fit->latency_seconds / kMicrosecond}};
    if (fit->pipeline_seconds_per_sqrt_byte > 0)
      fit_table.insert("pipeline_us_per_sqrt_MB",
                       fit->pipeline_seconds_per_sqrt_byte / LinkFit::kUsPerSqrtMB);
    table.insert(CollectiveName(kind), fit_table);
  }
  InsertSource(table, level.source);
  return table;
}

}  // namespace

std::string ClusterToToml(const ClusterSpec& cluster, const std::string& header) {
  toml::table root;
  root.insert("cluster", toml::table{{"name", cluster.name}});
  toml::array devices;
  for (const DeviceSpec& device : cluster.devices) devices.push_back(DeviceTable(device));
  root.insert("device", std::move(devices));
  toml::array groups;
  for (const NodeGroup& group : cluster.node_groups) {
    toml::table table{
        {"count", group.count}, {"gpus_per_node", group.gpus_per_node}, {"device", group.device}};
    // A heterogeneous cluster's groups keep their names and levels (a homogeneous one's group is
    // written as before: its name is its device's).
    if (!group.name.empty() && (cluster.NumGroups() > 1 || group.name != group.device))
      table.insert("name", group.name);
    if (group.intra_node_network >= 0)
      table.insert("intra_node_network", cluster.networks.at(group.intra_node_network).name);
    if (group.inter_node_network >= 0)
      table.insert("inter_node_network", cluster.networks.at(group.inter_node_network).name);
    groups.push_back(std::move(table));
  }
  root.insert("node_group", std::move(groups));
  toml::array networks;
  for (const NetworkLevel& level : cluster.networks) networks.push_back(NetworkTable(level));
  root.insert("network", std::move(networks));
  if (!cluster.group_links.empty()) {
    toml::array links;
    for (const GroupLink& link : cluster.group_links)
      links.push_back(toml::table{
          {"groups", toml::array{cluster.GroupName(link.first_group),
                                 cluster.GroupName(link.second_group)}},
          {"network", cluster.networks.at(link.network).name}});
    root.insert("group_link", std::move(links));
  }
  toml::table collectives;
  for (Collective kind : kAllCollectives) {
    const CollectiveCalibration& c = cluster.collectives[static_cast<int>(kind)];
    if (c.launch_seconds == 0 && c.inter_node_algorithm == DefaultInterNodeAlgorithm(kind)) {
      continue;
    }
    collectives.insert(
        CollectiveName(kind),
        toml::table{{"launch_us", c.launch_seconds / kMicrosecond},
                    {"inter_node_algorithm", InterNodeAlgorithmName(c.inter_node_algorithm)}});
  }
  if (!collectives.empty()) root.insert("collective", std::move(collectives));
  if (!cluster.calibration.source.empty()) {
    toml::table calibration{{"source", cluster.calibration.source},
                            {"collective_rows", cluster.calibration.collective_rows},
                            {"matmul_rows", cluster.calibration.matmul_rows}};
    if (cluster.calibration.layer_rows > 0)
      calibration.insert("layer_rows", cluster.calibration.layer_rows);
    root.insert("calibration", std::move(calibration));
  }

  std::ostringstream out;
  std::istringstream header_lines(header);
  std::string line;
  while (std::getline(header_lines, line)) out << (line.empty() ? "#" : "# " + line) << "\n";
  if (!header.empty()) out << "\n";
  out << root << "\n";
  return out.str();
}

void WriteClusterFile(const ClusterSpec& cluster, const std::string& path,
                      const std::string& header) {
  WriteFileAtomically(path, ClusterToToml(cluster, header));
}

}  // namespace stratos
