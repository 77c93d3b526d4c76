#pragma once
// The discrete side of the relaxation (DESIGN.md §6, "Discretization"): a compact plan over the
// relaxation's tables, its exact cost from the same tables (equal to costmodel::Evaluate by
// additivity), repair to a valid plan, and polish by local search. No LibTorch here.
#include <chrono>
#include <cstdint>
#include <functional>
#include <limits>
#include <random>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include "costmodel/plan.h"
#include "relax/tables.h"

namespace stratos {

// A plan in table indices.
struct DiscretePlan {
  int microbatch_option = 0;   // index into RelaxTables::num_microbatches
  std::vector<int> boundaries; // (S + 1): 0 = b_0 < b_1 < ... < b_S = L; stage s = [b_s, b_s+1)
  std::vector<int> configs;    // (S) indices into RelaxTables::configs
  // Index into RelaxTables::virtual_stages: each of the S pipeline ranks runs v of them model
  // chunks (the interleaved 1F1B schedule, plan.h InterleavePlan); 0 = plain pipeline.
  int virtual_option = 0;
  int NumStages() const { return static_cast<int>(configs.size()); }
  bool operator==(const DiscretePlan& o) const {
    return microbatch_option == o.microbatch_option && boundaries == o.boundaries &&
           configs == o.configs && virtual_option == o.virtual_option;
  }
};

// The node groups of the plan's runs, in pipeline order ({0} on a homogeneous cluster).
std::vector<int> PlanRunOrder(const RelaxTables& tables, const DiscretePlan& plan);

struct DiscreteCost {
  bool valid = false;  // structure: stage counts, configs valid for m, device budget
  double iteration_seconds = std::numeric_limits<double>::infinity();
  double overflow_bytes = 0;  // sum over stages of (peak memory - capacity) where positive
  bool Fits() const { return valid && overflow_bytes <= 0; }
  // Lexicographic: valid first, then less memory overflow, then faster.
  bool BetterThan(const DiscreteCost& o) const;
};

struct PolishLimits {
  std::chrono::steady_clock::time_point deadline = std::chrono::steady_clock::time_point::max();
  long max_evaluations = 0;  // 0: unbounded
  // Iterated local search: random kicks (2 random moves) from the local optimum, each followed
  // by a new descent, kept when better.
  int kicks = 0;
  std::uint64_t seed = 0;
};

class PlanPolisher {
 public:
  // Keeps a reference to `tables`, which must outlive the polisher.
  explicit PlanPolisher(const RelaxTables& tables);

  // Exact cost from the tables (counts one evaluation). On a heterogeneous cluster a plan is
  // valid only with each group's budget kept and its groups in runs (SearchSpace::GroupsInRuns);
  // each stage's memory is checked against its group's device. Polish keeps each stage's config
  // in its group, except the move that gives every stage one stage's config; Repair keeps each
  // stage in its group and each group's budget, but not the runs rule (Cost checks it).
  DiscreteCost Cost(const DiscretePlan& plan);
  long evaluations() const { return evaluations_; }
  bool OutOfBudget(const PolishLimits& limits) const;

  Plan ToPlan(const DiscretePlan& plan) const;
  // An interleaved plan becomes its ranks (each with its chunks' layer count) and its v, which
  // ToPlan turns back into InterleavePlan's chunks. Throws InputError if the plan uses a config,
  // microbatch count or virtual stage count outside the tables.
  DiscretePlan FromPlan(const Plan& plan) const;

  // Makes `plan` structurally valid (configs valid for its m, stage count within limits, device
  // budget) and, where a config change of the same or a smaller mesh can, fit in memory.
  // Returns false if no valid plan was reached.
  bool Repair(DiscretePlan* plan);

  // Best-improvement local search from `plan` (which must be valid), over: moving a stage
  // boundary by 1, 2, 4, ... layers; one stage's config to a neighbour (another mesh size, or one
  // or two of the DP x TP split, ZeRO stage and recompute); the same change on every stage (on a
  // heterogeneous cluster also on every stage of one node group); another microbatch count;
  // another number of virtual stages (where the tables offer some); merging or splitting stages
  // (one, or every stage -- or every stage of one group -- on half its mesh, keeping its TP or
  // its DP); changing the stage count with uniform stages; and rebalancing the layers for the
  // current configs. Returns the final cost. `on_improvement` is called with every new best
  // fitting cost. Descents are memoized
  // across calls (every plan on a finished descent maps to the local optimum it reaches: the
  // descent is deterministic), and the kicks are skipped when the first descent reaches a local
  // optimum that an earlier call already kicked from.
  DiscreteCost Polish(DiscretePlan* plan, const PolishLimits& limits,
                      const std::function<void(double)>& on_improvement = nullptr);

  // Re-partitions the layers for the plan's stage configs and m: the smallest maximum stage
  // time (bisection) whose greedy left-to-right fill respects memory. False if none does.
  bool Rebalance(DiscretePlan* plan) const;

  // Config k moved to microbatch option m: k itself if valid, else the nearest valid one
  // (mesh size first, then TP, recompute, ZeRO); -1 if none is valid. With max_devices > 0 only
  // configs of at most that many devices.
  int NearestValidConfig(int k, int m, int max_devices = 0) const;

 private:
  // The moves listed at Polish(); `extended` also tries every structural move (same change on
  // every stage, merge, split, stage count) with every microbatch count.
  void Neighbors(const DiscretePlan& plan, bool extended, std::vector<DiscretePlan>* out) const;
  // Moves each stage that overflows memory (every stage if `every_stage`) to the config of
  // the same mesh size that fits and minimizes m t + e + c, its cost were it the bottleneck.
  // Returns whether every stage fits afterwards.
  bool FixMemory(DiscretePlan* plan, bool every_stage = false) const;
  // Config with the same (tp, zero, recompute) as k on mesh size index mesh_index, nearest
  // valid for m (m < 0: valid or not); -1 if none.
  int WithMesh(int k, int mesh_index, int m) const;
  // Config of k on the next smaller mesh size with the same DP degree (TP halved, ZeRO and
  // recompute kept), valid for m (m < 0: valid or not); -1 if none.
  int HalfMeshSameDp(int k, int m) const;
  // Config of node group `group` with these mesh size index, TP, ZeRO, recompute; -1 if none.
  int Lookup(int group, int mesh_index, int tp, int zero, int recompute) const;
  // Index of k's (node group, mesh size) into mesh_configs_.
  int MeshKey(int k) const;
  // previous_group / next_group: the neighbours' node groups (-1: none; the own group: same).
  // v_option: the plan's RelaxTables::virtual_stages index (a rank's overhead with v chunks).
  TermScalars StageScalars(int k, int m, int first_layer, int last_layer, bool first, bool last,
                           int previous_group = -1, int next_group = -1, int v_option = 0) const;
  // Forward passes in flight at stage `stage` (ChunkForwardsInFlight; with v chunks per rank,
  // chunk passes of 1/v of the stage's activations each).
  int InFlight(int m, int num_stages, int stage, int v_option = 0) const;
  // Microbatches' worth of activations in flight: InFlight / v.
  double InFlightMicrobatches(int m, int num_stages, int stage, int v_option = 0) const;

  const RelaxTables& tables_;
  long evaluations_ = 0;
  double capacity_bytes_ = 0;            // with a 1e-9 relative safety margin
  std::vector<int> mesh_sizes_;          // ascending distinct config mesh sizes
  std::vector<int> config_mesh_index_;   // (K)
  std::vector<double> capacity_;         // (K) memory of the config's group, same margin
  std::vector<std::vector<int>> mesh_configs_;  // per (group, mesh size index): its configs
  std::vector<std::vector<int>> config_neighbors_;  // (K) one or two dimensions apart
  std::vector<int> lookup_;  // (group, mesh index, log2 tp, zero, recompute) -> config or -1
  int num_tp_slots_ = 1;
  // NearestValidConfig(k, m) without a device cap, by k * M + m; -2 = not computed yet.
  mutable std::vector<int> nearest_valid_;
  static std::string Key(const DiscretePlan& plan);

  // Descent memo (Polish): plan key -> index into local_optima_ of where its descent ends.
  std::unordered_map<std::string, int> descent_memo_;
  std::vector<std::pair<DiscretePlan, DiscreteCost>> local_optima_;
  std::vector<char> kicked_;  // (local_optima_) whether Polish kicked from it already
  // FixMemory's choice per (layer range, mesh, m, first, last, in-flight count, virtual
  // stages), packed; -1 = no config of the mesh fits.
  mutable std::unordered_map<std::uint64_t, int> fix_memory_cache_;
  // Rebalance results by (configs, microbatch option, virtual stages); empty = no feasible
  // partition.
  mutable std::unordered_map<std::string, std::vector<int>> rebalance_cache_;
};

}  // namespace stratos
