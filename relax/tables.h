#pragma once
// Cost tables of the relaxation (DESIGN.md §6): every number the continuous surrogate and the
// discrete polish need, read ONCE from the stage terms every searcher uses (costmodel/stage_table.h:
// CostModel::LayerTerms / StageOverhead, with every pair of neighbour groups on a heterogeneous
// cluster), never re-derived. Additivity (cost_model.h) makes these tables exact:
//
//   terms(stage) = sum_c count_c(stage) * layer(c, config, m) + overhead(config, m, first, last)
//
// where c runs over the model's cost classes (LayerSpec::cost_class; all transformer blocks of a
// model share one class). No LibTorch in this header: the discrete code includes it cheaply.
#include <string>
#include <vector>

#include "costmodel/cost_model.h"
#include "costmodel/search_space.h"

namespace stratos {

// The additive scalars of StageTerms that the objective and the memory check use.
struct TermScalars {
  double microbatch_seconds = 0;  // t: StageTerms::MicrobatchSeconds()
  // e (max over stages) = TailSeconds() of the stage's sum: the additive part
  // (StageTerms::AdditiveTailSeconds) and the bucketed DP reduction's S, W and b
  // (StageTerms::dp_bucketed_sync_seconds, ...; 0 without buckets), summed before the max.
  double additive_tail_seconds = 0;
  double bucketed_sync_seconds = 0;
  double backward_window_seconds = 0;
  double last_bucket_seconds = 0;
  double one_time_seconds = 0;    // c: StageTerms::OneTimeSeconds() (summed over stages)
  double state_bytes = 0;
  double activation_bytes = 0;    // of one in-flight microbatch
  double working_bytes = 0;

  // Whether a bucketed DP reduction enters these terms (S, W or b nonzero).
  bool HasBucketedDp() const {
    return bucketed_sync_seconds != 0 || backward_window_seconds != 0 || last_bucket_seconds != 0;
  }
  // e of a stage whose summed terms these are: StageTerms::ExposedTailSeconds().
  double TailSeconds() const {
    return additive_tail_seconds + BucketedDpExposedSeconds(bucketed_sync_seconds,
                                                            backward_window_seconds,
                                                            last_bucket_seconds);
  }
  static TermScalars From(const StageTerms& terms);
};

struct RelaxTables {
  // Shape of the problem.
  int num_layers = 0;            // L
  int num_classes = 0;           // C (dense renumbering of LayerSpec::cost_class)
  int num_configs = 0;           // K = space.configs.size()
  int num_microbatch_options = 0;  // M = space.num_microbatches.size()
  int min_stages = 1;
  int max_stages = 1;            // S
  int num_devices = 0;
  int global_batch_size = 0;
  Schedule schedule = Schedule::kOneFOneB;
  double memory_capacity_bytes = 0;  // per device of group 0 (CostModel::DeviceMemoryCapacityBytes)
  // Node groups (SearchSpace::group_devices): each config's stage runs in configs[k].node_group;
  // one group on a homogeneous cluster.
  int num_groups = 1;
  std::vector<int> group_devices;            // (G) device budget per group
  std::vector<double> group_capacity_bytes;  // (G) memory per device of each group

  std::vector<StageConfig> configs;     // (K) = space.configs
  std::vector<int> num_microbatches;    // (M) = space.num_microbatches
  std::vector<int> layer_class;         // (L) dense class of each layer
  std::vector<int> class_representative;  // (C) first layer of each class
  std::vector<int> class_prefix;        // (L + 1, C) layers of class c among the first l layers

  // Whether config k can run with microbatch option m (CostModel::CheckConfig == ""). (K, M)
  std::vector<char> valid;
  // Microbatch seconds charged per layer (and per stage overhead) for an invalid (k, m): a large
  // finite cost, so that 0 * it = 0 at one-hot parameters and gradients stay finite.
  double invalid_seconds = 0;

  std::vector<TermScalars> layer;     // (C, K, M)
  std::vector<TermScalars> overhead;  // (K, M, 2 first, 2 last)
  // Model chunks per pipeline rank a plan may have (the interleaved 1F1B schedule), ascending,
  // virtual_stages[0] = 1. Counts above 1 only where a rank of v chunks prices exactly as its
  // plain stage with v virtual stages (plan.h InterleavesExactly, one node group): its layers'
  // terms are the plain stage's, its overhead (v times the pipeline sends) the entry below, and
  // its activations in flight ChunkForwardsInFlight / v (cost_model.h).
  std::vector<int> virtual_stages{1};
  // Overheads of a rank with virtual_stages[i] chunks, i >= 1: (V - 1, K, M, 2 first, 2 last).
  std::vector<TermScalars> interleaved_overhead;
  // Heterogeneous clusters only (else empty): the overhead of a stage whose previous / next
  // stage runs in another group (CostModel::StageOverhead's previous_group / next_group), by
  // (K, M, 2 first, 2 last, G + 1 previous, G + 1 next), index 0 = the stage's own group.
  std::vector<TermScalars> cross_overhead;

  // Non-dominated configs (no other config of the same group and mesh size is at least as good
  // in every entry -- t, e, c and each memory term, compared separately -- of every class,
  // overhead (with every pair of neighbour groups) and microbatch option, and valid wherever it
  // is): the objective is nondecreasing in every stage's t, e and c and memory only constrains,
  // so the optimum never needs a dominated config. Ascending indices into configs.
  std::vector<int> undominated_configs;

  bool Valid(int k, int m) const { return valid[static_cast<size_t>(k) * num_microbatch_options + m] != 0; }
  const TermScalars& Layer(int c, int k, int m) const {
    return layer[(static_cast<size_t>(c) * num_configs + k) * num_microbatch_options + m];
  }
  const TermScalars& Overhead(int k, int m, bool first, bool last) const {
    return overhead[((static_cast<size_t>(k) * num_microbatch_options + m) * 2 + (first ? 1 : 0)) *
                        2 +
                    (last ? 1 : 0)];
  }
  // Overhead of a rank with virtual_stages[v_option] chunks (v_option 0: Overhead).
  const TermScalars& Overhead(int k, int m, bool first, bool last, int v_option) const {
    if (v_option == 0) return Overhead(k, m, first, last);
    return interleaved_overhead[(((static_cast<size_t>(v_option - 1) * num_configs + k) *
                                      num_microbatch_options +
                                  m) * 2 + (first ? 1 : 0)) * 2 + (last ? 1 : 0)];
  }
  int NumVirtualStageOptions() const { return static_cast<int>(virtual_stages.size()); }
  // Overhead(k, m, first, last) when the previous / next stage runs in group previous_group /
  // next_group (-1 or k's own group: the same group, as Overhead).
  const TermScalars& OverheadBetween(int k, int m, bool first, bool last, int previous_group,
                                     int next_group) const;
  double CapacityBytes(int k) const { return group_capacity_bytes[configs[k].node_group]; }
  int ClassCount(int first_layer, int last_layer, int c) const {
    return class_prefix[static_cast<size_t>(last_layer) * num_classes + c] -
           class_prefix[static_cast<size_t>(first_layer) * num_classes + c];
  }
  // Index of `config` in configs, -1 if absent.
  int FindConfig(const StageConfig& config) const;
  // Index of m in num_microbatches, -1 if absent.
  int FindMicrobatchOption(int num_microbatches) const;
};

// Reads the tables from one StageTable per microbatch option (C*K*M LayerTerms calls, 4*K*M
// StageOverhead calls, and 4*K*M*(G+1)^2 more on G > 1 node groups), and 4*K*M StageOverhead
// calls for each count above 1 of `virtual_stages` (SpaceOptions::virtual_stages) that the
// tables take: all of them where the problem interleaves exactly on one node group, none
// elsewhere (those searchers then offer their plan interleaved: InterleavingSearcher).
// Throws InputError if the model has no layers.
RelaxTables BuildRelaxTables(const CostModel& cost_model, const SearchSpace& space,
                             const std::vector<int>& virtual_stages = {1});

}  // namespace stratos
