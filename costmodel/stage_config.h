#pragma once
// One pipeline stage's intra-stage configuration: its mesh and how the mesh is used.
#include <string>

#include "costmodel/compression.h"
#include "costmodel/problem.h"

namespace stratos {

struct StageConfig {
  // Mesh shape as in Alpa: (mesh_nodes, mesh_gpus_per_node). A mesh smaller than a node is
  // (1, 2^k); a larger one is (n, gpus_per_node).
  int mesh_nodes = 1;
  int mesh_gpus_per_node = 1;
  int data_parallel = 1;
  int tensor_parallel = 1;  // TP ranks are innermost (consecutive GPUs of one node)
  int zero_stage = 0;       // 0-3 (Rajbhandari et al. SC'20); only meaningful with DP > 1
  Recompute recompute = Recompute::kNone;
  // How DP gradients travel (costmodel/compression.h); only meaningful with DP > 1.
  CompressionSpec grad_compression;
  // Index of the cluster's node group the mesh lives in (ClusterSpec::node_groups); the stage is
  // priced with that group's device and networks.
  int node_group = 0;

  int NumDevices() const { return mesh_nodes * mesh_gpus_per_node; }
  // e.g. "mesh 2x8 dp8 tp2 zero1 recompute=selective", plus " compression=topk(density=0.01)"
  // when grad_compression is not none and " group=1" when node_group is not 0.
  std::string Label() const;
  bool operator==(const StageConfig& o) const {
    return mesh_nodes == o.mesh_nodes && mesh_gpus_per_node == o.mesh_gpus_per_node &&
           data_parallel == o.data_parallel && tensor_parallel == o.tensor_parallel &&
           zero_stage == o.zero_stage && recompute == o.recompute &&
           grad_compression == o.grad_compression && node_group == o.node_group;
  }
};

}  // namespace stratos
