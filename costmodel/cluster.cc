#include "costmodel/cluster.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <string>

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
  const NodeGroup& group = FirstGroup(*this);
  std::string known;
  for (const DeviceSpec& device : devices) {
    if (device.name == group.device) return device;
    known += fmt::format("{}\"{}\"", known.empty() ? "" : ", ", device.name);
  }
  ThrowInputError(
      Where(*this), "node_group[0].device", fmt::format("\"{}\"", group.device),
      fmt::format("not in the device catalog (known: {})", known.empty() ? "none" : known));
}

ClusterSpec ClusterSpec::WithNodes(int num_nodes) const {
  if (num_nodes < 1) {
    throw InputError(fmt::format("--nodes = {}: must be >= 1 (cluster {})", num_nodes, name));
  }
  ClusterSpec copy = *this;
  if (copy.node_groups.empty()) FirstGroup(copy);  // throws
  copy.node_groups.front().count = num_nodes;
  if (copy.DeviceCount64() > kMaxDevices) {
    throw InputError(fmt::format("--nodes = {}: must give at most {} devices ({} GPUs per node; "
                                 "cluster {})",
                                 num_nodes, kMaxDevices, copy.node_groups.front().gpus_per_node,
                                 name));
  }
  return copy;
}

}  // namespace stratos
