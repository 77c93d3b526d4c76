#pragma once
// Cluster description: device catalog, node groups and network levels (DESIGN.md §3).
// All quantities are SI (bytes, seconds, FLOP/s, bytes/s); files spell human units and are
// converted once, where they are read (cluster_io.h).
#include <string>
#include <vector>

namespace stratos {

struct DeviceSpec {
  std::string name;
  double peak_flops = 0;             // dense bf16/fp16 tensor-core peak, FLOP/s (datasheet)
  double memory_bytes = 0;           // device memory
  double hbm_bytes_per_second = 0;   // memory bandwidth
  // Achievable share of peak on large GEMMs (e.g. measured maximum achievable matmul FLOPs /
  // peak, stas00/ml-engineering MAMF table); in (0, 1].
  double matmul_efficiency = 1.0;
  // Memory not available to the model (CUDA context, NCCL buffers, fragmentation).
  double reserved_memory_bytes = 0;
  std::string source;
};

struct NodeGroup {
  int count = 0;          // nodes
  int gpus_per_node = 0;
  std::string device;     // name in the device catalog
};

// One level of the network hierarchy, from inside a node outward.
// Intra-node level: bandwidth is per GPU (achievable bus bandwidth of a ring collective,
// nccl-tests busbw). Inter-node level: bandwidth is per node (sum over its NICs), shared by the
// node's GPUs.
struct NetworkLevel {
  std::string name;
  double bandwidth_bytes_per_second = 0;
  double latency_seconds = 0;   // alpha of the alpha-beta model, per ring step
  double efficiency = 1.0;      // achievable share of bandwidth_bytes_per_second, in (0, 1]
  std::string source;

  double EffectiveBandwidth() const { return bandwidth_bytes_per_second * efficiency; }
};

struct ClusterSpec {
  std::string name;
  std::string source;  // file it was read from
  std::vector<DeviceSpec> devices;
  std::vector<NodeGroup> node_groups;
  std::vector<NetworkLevel> networks;  // [0] intra-node, [1] inter-node

  int NumNodes() const;
  int NumDevices() const;
  bool IsHomogeneous() const { return node_groups.size() == 1; }
  // Of the first node group (the only one of a homogeneous cluster).
  int GpusPerNode() const;
  const DeviceSpec& Device() const;  // throws InputError if the group's device is not in the catalog
  const NetworkLevel& IntraNode() const { return networks.at(0); }
  // Falls back to the intra-node level for single-node clusters without an inter-node level.
  const NetworkLevel& InterNode() const { return networks.size() > 1 ? networks[1] : networks[0]; }
  // Returns a copy with the first node group's count set to num_nodes (--nodes).
  ClusterSpec WithNodes(int num_nodes) const;
};

}  // namespace stratos
