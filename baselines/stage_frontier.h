#pragma once
// The stage frontiers of Alpa's inter-operator DP (dp_searcher.h), built from the stage terms of
// costmodel/stage_table.h.
#include <cstddef>
#include <cstdint>
#include <vector>

#include "costmodel/search_space.h"
#include "costmodel/stage_table.h"
#include "search/searcher.h"

namespace stratos {

// The stage options of one microbatch count m in the form Alpa's inter-operator DP consumes
// (dp_searcher.h): for every layer range [i, j) and mesh size n, the Pareto frontier of the
// configurations of that mesh size, each with its microbatch time t_s, the DP's additive part
// t_s + c_s, its exposed tail e_s and the in-flight microbatch counts with which it fits in memory
// (decided exactly as Evaluate() does). A configuration is dropped when another one of the same
// cell is no slower (t), no costlier (t + c), has no longer a tail (e) and fits at least as many
// microbatches in flight.
//
// One Pareto-optimal configuration of a (layer range, mesh size) cell:
struct FrontierEntry {
  double t;    // microbatch seconds t_s
  double a;    // t_s + c_s (summed over stages by the objective)
  double e;    // exposed tail e_s (maximized over stages by the objective)
  // (a is t_s / v + c_s with v virtual stages: the objective's sum_s t_s / v + sum_s c_s)
  int level;   // fits in memory with the first `level` in-flight counts of StageFrontier::inflight
  int config;  // index into SearchSpace::configs
};

struct StageFrontier {
  int m = 0;
  Schedule schedule = Schedule::kOneFOneB;
  int virtual_stages = 1;  // v: every stage a pipeline rank of v chunks (interleaved 1F1B)
  int num_layers = 0;
  int num_meshes = 0;
  // Distinct in-flight counts a stage may need, ascending (ChunkForwardsInFlight: microbatches,
  // or with v > 1 microbatch-chunks, each 1/v of the stage's activations); level_of_stages[s]
  // (1-based) is the level a stage with s stages from it to the end needs (1F1B: min(m, s);
  // GPipe: m). With v > 1 the count depends on the number of stages p too: LevelsOfStages(p).
  std::vector<int> inflight;
  std::vector<int> level_of_stages;
  // level_of_stages for plans of exactly `num_stages` stages (v = 1: level_of_stages itself);
  // size num_stages + 1, entry 0 unused. Throws InternalError if a count it needs is not in
  // `inflight` (num_stages above the max_stages the frontier was built for).
  std::vector<int> LevelsOfStages(int num_stages) const;
  // Cell (i, j, n) = layers [i, j) on a mesh of size mesh_sizes[n]. Cells priced identically
  // (ranges of the same cost classes, neither first nor last, e.g. any k transformer layers in
  // the middle of a GPT) share one group: cell_group[cell]. The Pareto frontier of group g
  // (entries t ascending, none dominated in (t, a, e, level)) is entries[group_offsets[g] ..
  // group_offsets[g + 1]); group 0 is empty (cells with j <= i, or where nothing fits).
  std::vector<std::uint32_t> cell_group;
  std::vector<std::uint32_t> group_offsets;
  std::vector<FrontierEntry> entries;
  std::vector<double> t_candidates;  // distinct t of all entries, ascending
  std::vector<double> e_candidates;  // distinct e of all entries, ascending
  // Lower bounds on max_s t_s and on max_s e_s of any plan (volume and single-layer bounds).
  double t_lower_bound = 0;
  double e_lower_bound = 0;

  size_t Cell(int i, int j, int n) const {
    return (static_cast<size_t>(i) * (num_layers + 1) + j) * num_meshes + n;
  }
  double Bytes() const {
    return sizeof(FrontierEntry) * static_cast<double>(entries.capacity()) +
           sizeof(std::uint32_t) *
               static_cast<double>(cell_group.capacity() + group_offsets.capacity()) +
           sizeof(double) * static_cast<double>(t_candidates.capacity() +
                                                e_candidates.capacity());
  }
  int NumGroups() const { return static_cast<int>(group_offsets.size()) - 1; }
  size_t NumCells() const {
    return static_cast<size_t>(num_layers + 1) * (num_layers + 1) * num_meshes;
  }
};

// Builds the frontier of microbatch count `num_microbatches` for plans of up to `max_stages`
// stages. O(L^2 * configs) time (stage terms; shared groups' frontiers are built once); memory
// O(L^2 * mesh sizes) plus the groups' frontiers (FrontierCellBytes). With a deadline, checks it
// once per first layer (Deadline::Expired propagates). Each configuration's memory is checked
// against its node group's devices; the stages send to `next_group` and receive from
// `previous_group` (StageTable), which on a heterogeneous cluster makes one frontier per stage
// position in a run of a node group. With the cost model's training.virtual_pipeline_stages =
// v > 1 (1F1B only) each stage is a pipeline rank of v chunks in a plan of 2 to max_stages
// ranks: entries have a = t / v + c, cells of fewer than v layers are empty, and the in-flight
// counts are those of every such plan (LevelsOfStages).
StageFrontier BuildStageFrontier(const CostModel& cost_model, const SearchSpace& space,
                                 int max_stages, int num_microbatches,
                                 const Deadline* deadline = nullptr, int previous_group = -1,
                                 int next_group = -1);

// Bytes of a frontier's cell index for `num_layers` layers and `num_meshes` mesh sizes: what
// BuildStageFrontier allocates whatever the model (the groups' frontiers come on top).
inline double FrontierCellBytes(int num_layers, int num_meshes) {
  return sizeof(std::uint32_t) * (num_layers + 1.0) * (num_layers + 1.0) * num_meshes;
}

}  // namespace stratos
