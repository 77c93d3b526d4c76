#pragma once
// Reader of Alpa's profiling database (Zheng et al. OSDI'22) as dumped to CSV in
// ../shared/data/alpa_v100_comm (AWS p3.16xlarge, V100 meshes 1x1 .. 2x8), turned into profile
// rows (calibrate/profile.h):
//
//   mesh_nodes,mesh_gpus_per_node,op,dtype,num_groups,group_size,crosses_nodes,elements,seconds,
//   replica_groups
//
// How the columns are read follows alpa/mesh_profiling.py (profile_one_hlo_op, profile_dot):
// - collectives: `elements` is Alpa's size; what actually ran is all_reduce: a (size,) buffer;
//   all_gather / reduce_scatter: size rounded down to a multiple of the group size g, the
//   gathered output / scattered input; all_to_all: size rounded down to a multiple of g^2, each
//   rank holding size / g of it. Sizes that round to 0 ran nothing (0 bytes).
// - dot rows: `elements` is the FLOP count 2 n^3 of a square n x n x n matmul (n = 0, 128, ...,
//   8064), `seconds` its time; they are the same on every mesh (profiled on one GPU).
// - `inf` seconds: the measurement failed (skipped and counted).
// - rows Alpa filled in itself: MeshProfilingResult.make_monotonic replaces a time by
//   size / (the best bandwidth of any smaller size) where that is faster, so such a row carries
//   no measurement of its own (a lower bound on the time). They are recognised by
//   size / seconds equal to the running maximum of the earlier sizes' (relative 1e-9) and kept
//   apart.
// replica_groups ("0 1|2 3", device ids, node = id / gpus_per_node) must agree with
// crosses_nodes and with the profile format's layout rule (a group crossing nodes spreads evenly
// over all of them).
#include <string>
#include <vector>

#include "calibrate/profile.h"

namespace stratos {

// <stratos source>/../shared/data/alpa_v100_comm/alpa_v100_comm_1x1_to_2x8.csv
std::string DefaultAlpaProfilePath();

// `path` relative to the stratos source directory when it lies in it or next to it
// ("../shared/data/...", "data/clusters/..."), else `path` unchanged: what files written into
// the repository may say about their inputs (never a path of one machine).
std::string PathForDisplay(const std::string& path);

struct AlpaProfile {
  Profile profile;  // the measured rows: collectives (every op) and dot rows as matmul rows
  std::vector<CollectiveRow> filled_collectives;  // rows make_monotonic filled in
  std::vector<MatmulRow> filled_matmuls;
  int rows_read = 0;           // data lines of the file
  int inf_rows = 0;            // failed measurements
  int zero_flop_dot_rows = 0;  // the n = 0 matmul
  int duplicate_dot_rows = 0;  // dot rows repeated for every mesh (kept once)
};

// Reads the file. Throws InputError "<file>:<line>: <column> = <value>: <rule>" for a malformed
// or inconsistent row (unknown op or dtype, replica groups that disagree with the other columns,
// a dot FLOP count that is not 2 n^3, ...), "<file>: ..." for a missing file or bad header.
AlpaProfile ReadAlpaProfile(const std::string& path);

}  // namespace stratos
