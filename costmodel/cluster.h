#pragma once
// Cluster description: device catalog, node groups and network levels (DESIGN.md §3).
// All quantities are SI (bytes, seconds, FLOP/s, bytes/s); files spell human units and are
// converted once, where they are read (cluster_io.h).
#include <array>
#include <optional>
#include <string>
#include <vector>

namespace stratos {

// Collectives whose cost the model prices (nccl-tests names: all_reduce, all_gather,
// reduce_scatter). Their values index the per-collective arrays below.
enum class Collective { kAllReduce = 0, kAllGather = 1, kReduceScatter = 2 };
constexpr int kNumCollectives = 3;
constexpr std::array<Collective, kNumCollectives> kAllCollectives = {
    Collective::kAllReduce, Collective::kAllGather, Collective::kReduceScatter};
// "all_reduce" | "all_gather" | "reduce_scatter" (the names of cluster files and profiles).
const char* CollectiveName(Collective kind);
// The collective named `name`, or nullopt for any other string.
std::optional<Collective> ParseCollectiveName(const std::string& name);

// How a collective over a group spanning several nodes moves its data (costmodel/collective.h):
//   kHierarchical: a ring inside each node, then a ring over the nodes (each node's NICs carry
//                  (k-1)/k of the buffer per group for k nodes), the NIC traffic of NCCL's
//                  tree all-reduce.
//   kRing:         one flat ring through all n ranks (NCCL's ring; the only algorithm NCCL has
//                  for all-gather and reduce-scatter): the NICs carry (n-1)/n of the buffer.
enum class InterNodeAlgorithm { kHierarchical, kRing };
const char* InterNodeAlgorithmName(InterNodeAlgorithm algorithm);  // "hierarchical" | "ring"
// What NCCL runs between nodes, the default of a cluster file and of `stratos calibrate`: its
// tree for all-reduce (kHierarchical: the tree's NIC traffic), its ring for all-gather and
// reduce-scatter (kRing: NCCL has no tree for them; tuning.cc prices their nRanks - 1 ring steps,
// nNodes - 1 of them between nodes).
constexpr InterNodeAlgorithm DefaultInterNodeAlgorithm(Collective kind) {
  return kind == Collective::kAllReduce ? InterNodeAlgorithm::kHierarchical
                                        : InterNodeAlgorithm::kRing;
}
std::optional<InterNodeAlgorithm> ParseInterNodeAlgorithmName(const std::string& name);

// GEMM efficiency as a function of the GEMM's shape, fitted from matmul profiles by
// `stratos calibrate` (calibrate/matmul_fit.h). One GEMM of shape (m, n, k) takes
//   t = 2 m n k / (peak_flops * max_efficiency) * (1 + half_efficiency_dim / min(m, n, k))
//       + overhead_seconds,
// i.e. a share of peak that saturates in the smallest dimension (half of max_efficiency at
// min(m, n, k) = half_efficiency_dim) plus a fixed cost per GEMM (kernel launch; in profiles
// taken in a loop, the loop's own overhead too).
struct MatmulCurve {
  double max_efficiency = 1.0;     // asymptotic share of peak_flops, in (0, 1]
  double half_efficiency_dim = 0;  // elements, >= 0
  double overhead_seconds = 0;     // per GEMM, >= 0
};

// Transformer-block time as training measures it, fitted from block profiles by
// `stratos calibrate` (calibrate/layer_fit.h). The GEMM curve and the memory roofline give a
// block's device time x (forward and backward apart); on a real device the block takes
//   t = ((scale * x)^power + floor^power)^(1 / power),
// a power mean of the device time, scaled (attention and elementwise kernels run below the GEMM
// curve and the roofline), and a floor: the host's time to launch the block's kernels and run
// autograd, which the device's work hides only when it is longer. power = 1 adds the two; a
// large power takes the larger.
struct LayerCurve {
  double forward_scale = 1.0;  // > 0
  double backward_scale = 1.0;
  double forward_floor_seconds = 0;  // >= 0, per block and microbatch
  double backward_floor_seconds = 0;
  double power = 1.0;  // >= 1

  // ((scale x)^power + floor_seconds^power)^(1 / power), seconds, for a device time of x seconds
  // (a fit tries scales and floors of its own with the curve's power).
  double Combine(double scale, double floor_seconds, double x) const;
  // A forward / backward pass of a block whose device time is x seconds.
  double Forward(double x) const { return Combine(forward_scale, forward_floor_seconds, x); }
  double Backward(double x) const { return Combine(backward_scale, backward_floor_seconds, x); }
};

struct DeviceSpec {
  std::string name;
  double peak_flops = 0;             // dense bf16/fp16 tensor-core peak, FLOP/s (datasheet)
  double memory_bytes = 0;           // device memory
  double hbm_bytes_per_second = 0;   // memory bandwidth
  // Achievable share of peak on large GEMMs (e.g. measured maximum achievable matmul FLOPs /
  // peak, stas00/ml-engineering MAMF table); in (0, 1].
  double matmul_efficiency = 1.0;
  // Memory not available to the model: what the process holds outside the framework's caching
  // allocator (CUDA context and kernel images, library handles, NCCL buffers), bytes.
  double reserved_memory_bytes = 0;
  std::string source;
  // Calibrated keys come last so that positional initializers of the fields above still work.
  // Optional calibrated efficiency curve; when set, the cost model prices each layer's GEMMs
  // with it (costmodel/matmul_efficiency.h) instead of the scalar matmul_efficiency, which
  // remains the fallback for layers without a GEMM shape.
  std::optional<MatmulCurve> matmul_curve = std::nullopt;
  // Optional calibrated block curve; when set, transformer blocks' compute goes through it
  // (cost_model.h LayerComputeSeconds).
  std::optional<LayerCurve> layer_curve = std::nullopt;
  // The caching allocator's overhead over the bytes in tensors at the peak (blocks rounded up,
  // split and cached but not reusable for the request at hand), as a fraction >= 0: a plan
  // whose tensors peak at x bytes needs x (1 + memory_fragmentation) from the allocator.
  double memory_fragmentation = 0;
};

// Nodes of one kind (DESIGN.md §3): several groups make a heterogeneous cluster. A stage's mesh
// lives inside one group (StageConfig::node_group).
struct NodeGroup {
  int count = 0;          // nodes
  int gpus_per_node = 0;
  std::string device;     // name in the device catalog
  // Unique among the cluster's groups; files default it to the device name (cluster_io.h).
  std::string name = "";
  // Indices into ClusterSpec::networks of the group's own levels; -1: the cluster's defaults
  // (networks[0] inside a node, networks[1] between nodes, or networks[0] when there is one).
  int intra_node_network = -1;
  int inter_node_network = -1;
};

// The network level between the nodes of two different groups (e.g. A100 nodes on InfiniBand,
// V100 nodes on Ethernet, Ethernet between them). Without one, two groups talk over the slower
// of their inter-node levels (ClusterSpec::LinkBetween).
struct GroupLink {
  int first_group = 0;   // index into ClusterSpec::node_groups
  int second_group = 0;
  int network = 0;       // index into ClusterSpec::networks
};

// Calibrated alpha-beta constants of one collective on one network level (fitted by
// `stratos calibrate`): achievable bandwidth (already net of any efficiency) and latency per ring
// step, and the pipelining term c of collective.h (seconds per sqrt(step x byte); 0: none).
struct LinkFit {
  double bandwidth_bytes_per_second = 0;
  double latency_seconds = 0;
  double pipeline_seconds_per_sqrt_byte = 0;

  // One us per sqrt(MB), the unit files and reports give the pipelining term in, in seconds per
  // sqrt(byte): sqrt(1e6 bytes) = 1e3 sqrt(byte).
  static constexpr double kUsPerSqrtMB = 1e-6 / 1e3;
};

// One level of the network hierarchy, from inside a node outward.
// Intra-node level: bandwidth is per GPU (achievable bus bandwidth of a ring collective,
// nccl-tests busbw), or per link when ring_links_per_gpu is set. Inter-node level: bandwidth is
// per node (sum over its NICs), shared by the node's GPUs.
struct NetworkLevel {
  std::string name;
  double bandwidth_bytes_per_second = 0;
  double latency_seconds = 0;   // alpha of the alpha-beta model, per ring step
  double efficiency = 1.0;      // achievable share of bandwidth_bytes_per_second, in (0, 1]
  std::string source;
  // Keys added with calibration come last so that positional initializers of the fields above
  // still work.
  // Intra-node level of a direct-connect topology without a switch (e.g. the NVLink hybrid cube
  // mesh of DGX-1 / p3.16xlarge, 6 NVLink2 links per V100): a ring collective over g GPUs of a
  // node drives min(g - 1, ring_links_per_gpu) links per GPU at once (NCCL runs several rings
  // over disjoint links), each of the level's bandwidth. 0 (default): bandwidth is per GPU,
  // whatever g.
  int ring_links_per_gpu = 0;
  // Optional calibrated constants per collective (index: Collective); absent ones use the level's
  // EffectiveBandwidth() and latency_seconds.
  std::array<std::optional<LinkFit>, kNumCollectives> collective_fits = {};

  double EffectiveBandwidth() const { return bandwidth_bytes_per_second * efficiency; }
  // Bandwidth and latency per ring step that `kind` achieves on this level (per link when
  // ring_links_per_gpu is set): its calibrated fit, else EffectiveBandwidth() / latency_seconds.
  double CollectiveBandwidth(Collective kind) const;
  double CollectiveLatency(Collective kind) const;
  // The pipelining coefficient of `kind`'s fit (collective.h), 0 without one.
  double CollectivePipeline(Collective kind) const;
};

// Per-collective constants that do not belong to one network level.
struct CollectiveCalibration {
  double launch_seconds = 0;  // fixed cost of every call (launch, synchronization), >= 0
  // A lone value's default is all-reduce's; a cluster's entries start from
  // DefaultCollectiveCalibrations() (NCCL's ring for all-gather and reduce-scatter).
  InterNodeAlgorithm inter_node_algorithm = InterNodeAlgorithm::kHierarchical;
};
// One CollectiveCalibration per collective (index: Collective): no launch cost and
// DefaultInterNodeAlgorithm.
constexpr std::array<CollectiveCalibration, kNumCollectives> DefaultCollectiveCalibrations() {
  std::array<CollectiveCalibration, kNumCollectives> defaults{};
  for (Collective kind : kAllCollectives)
    defaults[static_cast<int>(kind)].inter_node_algorithm = DefaultInterNodeAlgorithm(kind);
  return defaults;
}

// What a calibrated cluster description was fitted on (empty source: not calibrated).
struct CalibrationInfo {
  std::string source;       // prose: command, profile, split
  int collective_rows = 0;  // profile rows the collective constants were fitted on
  int matmul_rows = 0;      // profile rows the matmul curve was fitted on
  int layer_rows = 0;       // profile rows the layer curve was fitted on
};

struct ClusterSpec {
  std::string name;
  std::string source;  // file it was read from
  std::vector<DeviceSpec> devices;
  std::vector<NodeGroup> node_groups;
  // [0] intra-node, [1] inter-node by default; node groups and group links may name others.
  std::vector<NetworkLevel> networks;
  std::vector<GroupLink> group_links;
  // Per collective (index: Collective); defaults: no launch cost, NCCL's inter-node algorithms.
  std::array<CollectiveCalibration, kNumCollectives> collectives =
      DefaultCollectiveCalibrations();
  CalibrationInfo calibration;

  // Most devices a cluster may have (nodes x GPUs per node over all groups): 2^20, far above
  // today's largest trainings, so that device counts and their products stay in an int.
  static constexpr long long kMaxDevices = 1 << 20;
  int NumNodes() const;
  int NumDevices() const;
  // Nodes x GPUs per node over all groups, in 64 bits (what kMaxDevices bounds).
  long long DeviceCount64() const;
  bool IsHomogeneous() const { return node_groups.size() == 1; }
  int NumGroups() const { return static_cast<int>(node_groups.size()); }
  // Of the first node group (the only one of a homogeneous cluster).
  int GpusPerNode() const;
  const DeviceSpec& Device() const;  // throws InputError if the group's device is not in the catalog
  // The first group's levels (a homogeneous cluster's): networks[0], and networks[1] between
  // nodes, falling back to networks[0] for a single-node cluster without an inter-node level.
  const NetworkLevel& IntraNode() const { return GroupIntraNode(0); }
  const NetworkLevel& InterNode() const { return GroupInterNode(0); }

  // Node group `group` (0-based). Throws InternalError when out of range.
  const NodeGroup& Group(int group) const;
  // Devices of group `group`: count x gpus_per_node.
  int GroupDevices(int group) const;
  // The device of group `group`; throws InputError if it is not in the catalog.
  const DeviceSpec& GroupDevice(int group) const;
  // The network levels of group `group` inside its nodes and between them.
  const NetworkLevel& GroupIntraNode(int group) const;
  const NetworkLevel& GroupInterNode(int group) const;
  // The level a point-to-point send from a node of group `from` to a node of group `to` crosses:
  // the group's inter-node level when from == to; else their [[group_link]], or, without one,
  // the slower (lower EffectiveBandwidth) of the two groups' inter-node levels.
  const NetworkLevel& LinkBetween(int from, int to) const;
  // The group's name (its device's for groups built in code without one).
  const std::string& GroupName(int group) const;
  // The groups' names quoted, for messages: "\"a100\", \"v100\"".
  std::string GroupNames() const;
  // Index of the group named `name`, or -1.
  int GroupIndex(const std::string& name) const;
  // e.g. "a100 (4 x 8 A100-SXM4-80GB)".
  std::string GroupLabel(int group) const;
  // The nodes in one phrase: "4 x dgx-a100-80gb", or for several groups
  // "mixed: a100 (2 x 8 A100), v100 (2 x 8 V100)".
  std::string NodesLabel() const;
  // A homogeneous cluster made of group `group` alone: its node group, its two network levels,
  // the device catalog and the cluster's collective calibration. The cost model prices a stage
  // on the view of its group, so every homogeneous formula applies unchanged.
  ClusterSpec GroupView(int group) const;

  // Returns a copy with the first node group's count set to num_nodes (--nodes). Throws
  // InputError naming --nodes if num_nodes < 1 or the cluster would exceed kMaxDevices.
  ClusterSpec WithNodes(int num_nodes) const;
  // --nodes as the command line gives it: "N" (the first group, as WithNodes) or per group,
  // "a100=4,v100=8" (groups not named keep their count). Throws InputError naming --nodes, the
  // value and the rule (unknown group, count < 1, repeated group, malformed entry).
  ClusterSpec WithNodeCounts(const std::string& spec) const;
};

}  // namespace stratos
