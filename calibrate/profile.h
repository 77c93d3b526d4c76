#pragma once
// The profile database: what `stratos profile` measures on a machine and `stratos calibrate`
// fits the cost model's constants to. A profile is a directory of four files; units are in the
// CSV column names (bytes, seconds, flops; sizes in elements):
//
//   matmul.csv      m,n,k,dtype,flops,seconds
//                   one GEMM (m x k) @ (k x n); flops = 2 m n k; seconds per GEMM.
//   collective.csv  op,dtype,nodes,gpus_per_node,group_size,num_groups,crosses_nodes,bytes,seconds
//                   one collective call on a mesh of `nodes` x `gpus_per_node` GPUs split into
//                   `num_groups` groups of `group_size` ranks that run it at once; op is
//                   all_reduce | all_gather | reduce_scatter | all_to_all | send_recv; bytes is
//                   the buffer each rank holds (all-reduce, all-to-all, send_recv), the gathered
//                   output (all-gather) or the whole input (reduce-scatter); seconds per call.
//                   crosses_nodes = 0: each group sits inside one node. crosses_nodes = 1: each
//                   group spreads evenly over all `nodes` nodes (group_size / nodes ranks on
//                   each), like the data-parallel groups of a stage whose TP ranks are
//                   innermost; all num_groups groups then share each node's NICs.
//   layer.csv       hidden,heads,seq_len,micro_batch,tensor_parallel,dtype,forward_flops,
//                   forward_seconds,backward_seconds
//                   one transformer block on one TP rank (flops of that rank).
//   profile.json    {"schema": "stratos.profile/1", "device": ..., "backend": ...,
//                    "produced_by": ..., "notes": ...(optional)}
//
// dtype is f16 | bf16 | f32 | f64. Files are read strictly (unknown, missing or extra columns,
// malformed or impossible values are errors naming the file, line, column, value and rule) and
// written atomically (temporary file + rename), so a failed write never leaves a half-written
// profile.
#include <optional>
#include <string>
#include <vector>

#include "costmodel/collective.h"

namespace stratos {

struct MatmulRow {
  long long m = 0;
  long long n = 0;
  long long k = 0;
  std::string dtype;
  double flops = 0;    // 2 m n k
  double seconds = 0;  // per GEMM, > 0
};

struct CollectiveRow {
  std::string op;  // all_reduce | all_gather | reduce_scatter | all_to_all | send_recv
  std::string dtype;
  int nodes = 1;  // mesh shape
  int gpus_per_node = 1;
  int group_size = 1;  // ranks per group
  int num_groups = 1;  // groups running the collective at once
  bool crosses_nodes = false;
  double bytes = 0;    // see the file comment
  double seconds = 0;  // per call, > 0

  // Where one group's ranks sit (see crosses_nodes above): nodes spanned, ranks per node, and
  // groups sharing each node's NICs.
  GroupLayout Layout() const;
  // The cost model's collective for `op`, or nullopt for all_to_all / send_recv (not priced).
  std::optional<Collective> Kind() const;
};

struct LayerRow {
  int hidden = 0;
  int heads = 0;
  int seq_len = 0;
  int micro_batch = 0;
  int tensor_parallel = 1;
  std::string dtype;
  double forward_flops = 0;  // of one TP rank
  double forward_seconds = 0;
  double backward_seconds = 0;
};

struct ProfileInfo {
  std::string device;       // e.g. "V100-SXM2-16GB"
  std::string backend;      // e.g. "NCCL 2.10 / cuBLAS", "gloo"
  std::string produced_by;  // command or source that measured it
  std::string notes;        // optional prose
  // How the profiled blocks computed attention: "fused" (scaled_dot_product_attention: no
  // attention scores in memory), "materialized" (softmax of stored scores), "" (not recorded).
  std::string attention;
  // Whether the blocks stored no attention scores: "fused", or not recorded on a CUDA device
  // (every CUDA profile stratos wrote before the key existed ran LibTorch 2.x's fused kernel).
  bool FlashAttention() const {
    return attention == "fused" || (attention.empty() && device.rfind("cuda", 0) == 0);
  }
};

struct Profile {
  ProfileInfo info;
  std::vector<MatmulRow> matmuls;
  std::vector<CollectiveRow> collectives;
  std::vector<LayerRow> layers;
};

// Reads DIR/matmul.csv, DIR/collective.csv, DIR/layer.csv and DIR/profile.json (all four
// required; the CSVs may have no rows). Throws InputError "<file>:<line>: <column> = <value>:
// <rule>" for a bad value, "<file>: ..." for a missing file, a bad header or bad JSON.
Profile ReadProfileDir(const std::string& dir);

// Writes the four files into `dir` (created if missing), each atomically. Throws InputError if a
// file cannot be written. Floats are written with 17 significant digits (exact round trip).
void WriteProfileDir(const Profile& profile, const std::string& dir);


}  // namespace stratos
