#pragma once
// Reading cluster descriptions (DESIGN.md §3). Files spell human units in their keys (_TFLOPS,
// _GB, _GiB, _GBps, _us); they are converted here, once, to SI (FLOP/s, bytes, bytes/s, s).
// GB = 1e9 bytes, GiB = 2^30 bytes, GBps = 1e9 bytes/s, TFLOPS = 1e12 FLOP/s, us = 1e-6 s.
#include <string>
#include <string_view>

#include "costmodel/cluster.h"

namespace stratos {

// Reads a cluster TOML file (ParseClusterToml). Throws InputError
// "<path>: cannot open cluster file" if it cannot be read, and the parser's errors otherwise.
ClusterSpec ReadClusterFile(const std::string& path);

// Parses a cluster TOML document; `where` names it in error messages (a file name).
//
//   [cluster]                       # optional table
//   name = "dgx-a100-80gb"          # optional, default: file stem
//   source = "..."                  # optional prose
//   [[device]]                      # catalog, at least one
//   name = "A100-SXM4-80GB"         # unique
//   peak_TFLOPS = 312               # > 0, dense bf16 tensor-core peak (datasheet)
//   memory_GB = 80                  # > 0; exactly one of memory_GB / memory_GiB
//   hbm_GBps = 2039                 # > 0
//   matmul_efficiency = 0.869       # optional, in (0, 1], default 1; or instead:
//   measured_matmul_TFLOPS = 271.2  #   optional, in (0, peak]: efficiency = measured / peak
//   reserved_memory_GiB = 0         # optional, >= 0 (or reserved_memory_GB): outside the allocator
//   memory_fragmentation = 0        # optional, in [0, 1): allocator overhead over tensor bytes
//   source = "..."
//   [device.matmul_curve]           # optional, calibrated (cluster.h MatmulCurve), all 3 keys:
//   max_efficiency = 0.95           #   in (0, 1]
//   half_efficiency_dim = 560       #   >= 0, elements
//   overhead_us = 29                #   >= 0, per GEMM
//   [device.layer_curve]            # optional, calibrated (cluster.h LayerCurve), all 5 keys:
//   forward_scale = 1.1             #   > 0
//   backward_scale = 1.2            #   > 0
//   forward_floor_us = 500          #   >= 0, per block and microbatch
//   backward_floor_us = 1200        #   >= 0
//   power = 3                       #   >= 1
//   [[device]]                      # or a device taken whole from another cluster file, its
//   from_cluster = "dgx-a100-80gb"  #   calibrated constants included: a zoo cluster or a file
//   device = "A100-SXM4-80GB"       #   (beside this one first, then ResolveClusterPath); device:
//                                   #   optional, which of its devices (required when it has
//                                   #   several); no other keys; a file may not refer back to
//                                   #   one that is being read (a cycle)
//   [[node_group]]                  # at least one; several = heterogeneous cluster
//   count = 2                       # >= 1 nodes
//   gpus_per_node = 8               # >= 1
//   device = "A100-SXM4-80GB"       # a catalog device name
//   [[network]]                     # 1 or 2 levels: first intra-node (per-GPU bus bandwidth),
//   name = "NVLink3"                #   second inter-node (per-node total NIC bandwidth)
//   bandwidth_GBps = 232            # > 0
//   latency_us = 5                  # >= 0
//   efficiency = 1.0                # optional, in (0, 1], default 1
//   ring_links_per_gpu = 6          # optional, intra-node level only, >= 1: bandwidth_GBps is
//                                   #   per link (cluster.h NetworkLevel)
//   source = "..."
//   [network.all_reduce]            # optional, calibrated, per collective (all_reduce,
//   bandwidth_GBps = 23             #   all_gather, reduce_scatter): > 0, replaces
//   latency_us = 11                 #   bandwidth x efficiency; >= 0, replaces latency_us
//   pipeline_us_per_sqrt_MB = 0.3   #   optional, >= 0, default 0: collective.h's pipelining term
//   [collective.all_gather]         # optional, per collective:
//   launch_us = 38                  #   >= 0, default 0: fixed cost per call
//   inter_node_algorithm = "ring"   #   "hierarchical" | "ring" (costmodel/collective.h); default:
//                                   #   NCCL's (cluster.h DefaultInterNodeAlgorithm)
//   [calibration]                   # optional: what the calibrated keys were fitted on
//   source = "..."                  #   required in the table
//   collective_rows = 1200          #   optional, >= 0
//   matmul_rows = 18                #   optional, >= 0
//   layer_rows = 48                 #   optional, >= 0
// Throws InputError ("<where>: <key path> = <value>: <rule>") on TOML syntax errors, unknown,
// missing or wrongly typed keys, impossible values, duplicate or unknown device names, more
// than 2 network levels, and a from_cluster reference that names no file or zoo cluster, has no
// such device or closes a cycle (an error inside the referenced file is thrown as it is).
ClusterSpec ParseClusterToml(std::string_view text, const std::string& where);

}  // namespace stratos
