#include "costmodel/cluster.h"

#include <fmt/format.h>

#include <algorithm>
#include <charconv>
#include <cmath>
#include <string>
#include <vector>

#include "costmodel/error.h"

namespace stratos {

namespace {

std::string Where(const ClusterSpec& cluster) {
  return cluster.source.empty() ? std::string("cluster") : cluster.source;
}

const NodeGroup& FirstGroup(const ClusterSpec& cluster) {
  if (cluster.node_groups.empty()) {
    throw InputError(
        fmt::format("{}: node_group: missing required key (at least one "
                    "[[node_group]])",
                    Where(cluster)));
  }
  return cluster.node_groups.front();
}

// A group's name; groups built in code may leave it empty and go by their device's.
const std::string& NameOf(const NodeGroup& group) {
  return group.name.empty() ? group.device : group.name;
}

}  // namespace

const char* CollectiveName(Collective kind) {
  switch (kind) {
    case Collective::kAllReduce:
      return "all_reduce";
    case Collective::kAllGather:
      return "all_gather";
    case Collective::kReduceScatter:
      return "reduce_scatter";
  }
  return "unknown";
}

std::optional<Collective> ParseCollectiveName(const std::string& name) {
  for (Collective kind : kAllCollectives) {
    if (name == CollectiveName(kind)) return kind;
  }
  return std::nullopt;
}

const char* InterNodeAlgorithmName(InterNodeAlgorithm algorithm) {
  return algorithm == InterNodeAlgorithm::kRing ? "ring" : "hierarchical";
}

std::optional<InterNodeAlgorithm> ParseInterNodeAlgorithmName(const std::string& name) {
  if (name == "hierarchical") return InterNodeAlgorithm::kHierarchical;
  if (name == "ring") return InterNodeAlgorithm::kRing;
  return std::nullopt;
}

double LayerCurve::Combine(double scale, double floor_seconds, double x) const {
  const double device = scale * x;
  if (floor_seconds <= 0) return device;
  if (power == 1.0) return device + floor_seconds;
  const double top = std::max(device, floor_seconds);  // scaled, so that the powers stay finite
  return top * std::pow(std::pow(device / top, power) + std::pow(floor_seconds / top, power),
                        1.0 / power);
}

double NetworkLevel::CollectiveBandwidth(Collective kind) const {
  const std::optional<LinkFit>& fit = collective_fits[static_cast<int>(kind)];
  return fit ? fit->bandwidth_bytes_per_second : EffectiveBandwidth();
}

double NetworkLevel::CollectiveLatency(Collective kind) const {
  const std::optional<LinkFit>& fit = collective_fits[static_cast<int>(kind)];
  return fit ? fit->latency_seconds : latency_seconds;
}

double NetworkLevel::CollectivePipeline(Collective kind) const {
  const std::optional<LinkFit>& fit = collective_fits[static_cast<int>(kind)];
  return fit ? fit->pipeline_seconds_per_sqrt_byte : 0.0;
}

int ClusterSpec::NumNodes() const {
  int nodes = 0;
  for (const NodeGroup& group : node_groups) nodes += group.count;
  return nodes;
}

long long ClusterSpec::DeviceCount64() const {
  long long devices = 0;
  for (const NodeGroup& group : node_groups)
    devices += static_cast<long long>(group.count) * group.gpus_per_node;
  return devices;
}

int ClusterSpec::NumDevices() const { return static_cast<int>(DeviceCount64()); }

int ClusterSpec::GpusPerNode() const { return FirstGroup(*this).gpus_per_node; }

const DeviceSpec& ClusterSpec::Device() const {
  FirstGroup(*this);  // throws for a cluster without groups
  return GroupDevice(0);
}

const NodeGroup& ClusterSpec::Group(int group) const {
  STRATOS_CHECK(group >= 0 && group < NumGroups(), "node group {} of {}", group, NumGroups());
  return node_groups[group];
}

int ClusterSpec::GroupDevices(int group) const {
  const NodeGroup& g = Group(group);
  return g.count * g.gpus_per_node;
}

const DeviceSpec& ClusterSpec::GroupDevice(int group) const {
  const NodeGroup& g = Group(group);
  std::string known;
  for (const DeviceSpec& device : devices) {
    if (device.name == g.device) return device;
    known += fmt::format("{}\"{}\"", known.empty() ? "" : ", ", device.name);
  }
  ThrowInputError(
      Where(*this), fmt::format("node_group[{}].device", group), fmt::format("\"{}\"", g.device),
      fmt::format("not in the device catalog (known: {})", known.empty() ? "none" : known));
}

const NetworkLevel& ClusterSpec::GroupIntraNode(int group) const {
  const NodeGroup& g = Group(group);
  STRATOS_CHECK(!networks.empty(), "cluster {} has no network level", name);
  return networks.at(g.intra_node_network >= 0 ? g.intra_node_network : 0);
}

const NetworkLevel& ClusterSpec::GroupInterNode(int group) const {
  const NodeGroup& g = Group(group);
  STRATOS_CHECK(!networks.empty(), "cluster {} has no network level", name);
  if (g.inter_node_network >= 0) return networks.at(g.inter_node_network);
  return networks.size() > 1 ? networks[1] : networks[0];
}

const NetworkLevel& ClusterSpec::LinkBetween(int from, int to) const {
  if (from == to) return GroupInterNode(from);
  for (const GroupLink& link : group_links)
    if ((link.first_group == from && link.second_group == to) ||
        (link.first_group == to && link.second_group == from))
      return networks.at(link.network);
  const NetworkLevel& a = GroupInterNode(from);
  const NetworkLevel& b = GroupInterNode(to);
  return b.EffectiveBandwidth() < a.EffectiveBandwidth() ? b : a;
}

const std::string& ClusterSpec::GroupName(int group) const { return NameOf(Group(group)); }

std::string ClusterSpec::GroupNames() const {
  std::string names;
  for (const NodeGroup& g : node_groups)
    names += fmt::format("{}\"{}\"", names.empty() ? "" : ", ", NameOf(g));
  return names;
}

int ClusterSpec::GroupIndex(const std::string& group_name) const {
  for (int g = 0; g < NumGroups(); ++g)
    if (NameOf(node_groups[g]) == group_name) return g;
  return -1;
}

std::string ClusterSpec::GroupLabel(int group) const {
  const NodeGroup& g = Group(group);
  return fmt::format("{} ({} x {} {})", NameOf(g), g.count,
                     g.gpus_per_node, g.device);
}

std::string ClusterSpec::NodesLabel() const {
  if (NumGroups() <= 1) return fmt::format("{} x {}", NumNodes(), name);
  std::string label = name + ":";
  for (int g = 0; g < NumGroups(); ++g) label += fmt::format("{} {}", g == 0 ? "" : ",", GroupLabel(g));
  return label;
}

ClusterSpec ClusterSpec::GroupView(int group) const {
  ClusterSpec view = *this;
  view.name = fmt::format("{}/{}", name, NameOf(Group(group)));
  view.node_groups = {Group(group)};
  view.node_groups[0].intra_node_network = 0;
  view.node_groups[0].inter_node_network = 1;
  view.networks = {GroupIntraNode(group), GroupInterNode(group)};
  view.group_links.clear();
  return view;
}

ClusterSpec ClusterSpec::WithNodes(int num_nodes) const {
  if (num_nodes < 1) {
    throw InputError(
        fmt::format("command line: --nodes = {}: must be >= 1 (cluster {})", num_nodes, name));
  }
  ClusterSpec copy = *this;
  if (copy.node_groups.empty()) FirstGroup(copy);  // throws
  copy.node_groups.front().count = num_nodes;
  if (copy.DeviceCount64() > kMaxDevices) {
    throw InputError(fmt::format("command line: --nodes = {}: must give at most {} devices ({} "
                                 "GPUs per node; cluster {})",
                                 num_nodes, kMaxDevices, copy.node_groups.front().gpus_per_node,
                                 name));
  }
  return copy;
}

ClusterSpec ClusterSpec::WithNodeCounts(const std::string& spec) const {
  const auto fail = [&](const std::string& rule) -> void {
    ThrowInputError("command line", "--nodes", fmt::format("\"{}\"", spec),
                    rule + fmt::format(" (cluster {})", name));
  };
  if (spec.find('=') == std::string::npos) {
    int count = 0;
    const auto [end, error] = std::from_chars(spec.data(), spec.data() + spec.size(), count);
    if (error != std::errc() || end != spec.data() + spec.size())
      fail("must be an integer node count, or group=count pairs such as a100=4,v100=8");
    return WithNodes(count);
  }
  ClusterSpec copy = *this;
  std::vector<int> seen;
  size_t begin = 0;
  while (begin <= spec.size()) {
    const size_t comma = std::min(spec.find(',', begin), spec.size());
    const std::string entry = spec.substr(begin, comma - begin);
    const size_t equals = entry.find('=');
    if (equals == std::string::npos)
      fail(fmt::format("entry \"{}\" must be group=count", entry));
    const std::string group_name = entry.substr(0, equals);
    const std::string digits = entry.substr(equals + 1);
    const int group = GroupIndex(group_name);
    if (group < 0)
      fail(fmt::format("names no node group \"{}\" (groups: {})", group_name, GroupNames()));
    if (std::find(seen.begin(), seen.end(), group) != seen.end())
      fail(fmt::format("gives group \"{}\" twice", group_name));
    seen.push_back(group);
    int count = 0;
    const auto [end, error] = std::from_chars(digits.data(), digits.data() + digits.size(), count);
    if (error != std::errc() || end != digits.data() + digits.size() || count < 1)
      fail(fmt::format("count \"{}\" of group \"{}\" must be an integer >= 1", digits,
                       group_name));
    copy.node_groups[group].count = count;
    begin = comma + 1;
  }
  if (copy.DeviceCount64() > kMaxDevices)
    fail(fmt::format("must give at most {} devices", kMaxDevices));
  return copy;
}

}  // namespace stratos
