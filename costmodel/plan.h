#pragma once
// The discrete plan every searcher returns (DESIGN.md §4), with JSON I/O
// ("schema": "stratos.plan/2") and validation against a problem.
#include <nlohmann/json_fwd.hpp>

#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "costmodel/problem.h"
#include "costmodel/stage_config.h"

namespace stratos {

class CostModel;

struct StagePlan {
  int first_layer = 0;  // inclusive, index into model.layers
  int last_layer = 0;   // exclusive
  StageConfig config;
  int NumLayers() const { return last_layer - first_layer; }
};

struct Plan {
  int global_batch_size = 0;
  int num_microbatches = 1;
  Schedule schedule = Schedule::kOneFOneB;
  // Model chunks per pipeline rank v (the interleaved 1F1B schedule, Narayanan et al. SC'21
  // §2.2.2). With v > 1, `stages` lists the p v virtual stages in model order and virtual stage
  // i runs on pipeline rank i % p with that rank's configuration (Megatron-LM's and
  // torch.distributed.pipelining's "loop" placement). The searchers return v > 1 when
  // space.virtual_stages offers it (InterleavePlan).
  int virtual_stages = 1;
  std::vector<StagePlan> stages;

  // Entries of `stages`: pipeline stages, or virtual stages when virtual_stages > 1.
  int NumStages() const { return static_cast<int>(stages.size()); }
  // Pipeline ranks p = NumStages() / virtual_stages (NumStages() when that does not divide).
  int NumPipelineRanks() const;
  // Devices of the pipeline ranks' meshes.
  int NumDevices() const;
  // The layers pipeline rank `rank` holds, e.g. "0-3" or, interleaved, "0-3,16-19".
  std::string RankLayers(int rank) const;
  // e.g. "4 stages [9|8|8|9 layers] m=64 1f1b; s0: mesh 1x4 dp2 tp2 zero1 recompute=none; ..."
  std::string Summary() const;
};

// Sets config.mesh_nodes and config.mesh_gpus_per_node to the mesh of `devices` devices on
// nodes of gpus_per_node: (1, devices) within a node, (devices / gpus_per_node, gpus_per_node)
// for whole nodes. Returns false (config unchanged) if `devices` is neither.
bool SetMeshForDevices(StageConfig& config, int devices, int gpus_per_node);

// Splits num_layers into num_stages contiguous [first, last) ranges whose sizes differ by at most
// one (the larger ones last, so the stage holding the embedding is not the heaviest).
// Throws InputError if num_stages is not in [1, num_layers].
std::vector<std::pair<int, int>> SplitLayersEvenly(int num_layers, int num_stages);

// Megatron-LM's placement of a transformer over num_stages pipeline stages, as [first, last)
// ranges of model.layers: the L blocks in runs of L / num_stages (Megatron-LM needs num_stages
// to divide L; otherwise the runs differ by at most one, the larger ones last), the embedding
// joined to the first stage and the head to the last. A model whose layers are not [embedding,
// L blocks, head] is split by SplitLayersEvenly. Throws InputError if num_stages is not in
// [1, L] (naming "pipeline_parallel" and the block count).
std::vector<std::pair<int, int>> MegatronStageLayers(const ModelSpec& model, int num_stages);

// The interleaved 1F1B form of a plan with one chunk per pipeline rank (plan.virtual_stages = 1,
// p >= 2 stages): each rank's n_s layers become `virtual_stages` = v chunks of n_s / v layers
// (the first n_s % v chunks one more), and the p v chunks take the model's layers in order,
// chunk k p + s on rank s with its configuration (Megatron-LM's loop placement). Every rank keeps
// its layer count and the first and last layers stay on the first and last rank, so on a model
// whose layers between the first and the last share one cost class (a transformer's blocks) each
// rank prices the same terms as before and only the schedule changes. nullopt when virtual_stages
// < 2, the plan is already interleaved, it has fewer than 2 stages, its schedule is not 1F1B, or
// a stage has fewer than v layers.
std::optional<Plan> InterleavePlan(const Plan& plan, int virtual_stages);

// Whether InterleavePlan leaves every rank's costs as its plain stage's on `problem`: the
// layers between its first and its last share one cost class (a transformer's blocks), the
// schedule is 1F1B and the training does not interleave already. Searchers then price a rank of
// v chunks as their plain stage with v virtual stages (the DP searches them so, exactly).
bool InterleavesExactly(const Problem& problem);

// The virtual stage counts (model chunks per pipeline rank) a searcher prices exactly on
// `problem` out of `offered` (SpaceOptions::virtual_stages): 1, and every count above 1 of
// `offered` where InterleavesExactly holds on a cluster of one node group; ascending, without
// repeats. {1} elsewhere (the searchers then offer their plans interleaved: InterleavingSearcher).
std::vector<int> ExactVirtualStages(const Problem& problem, const std::vector<int>& offered);

// Structural validation: layers covered once and in order, degrees consistent with the mesh,
// meshes fit the cluster, batch divisible; with virtual stages, a whole number of them per rank,
// each with its rank's configuration, the 1F1B schedule and no interleaving also set in
// problem.training (one or the other says how many chunks a rank has). Throws InputError naming `where` (the plan file),
// the key path (e.g. "stages[2].tensor_parallel"), its value and the rule. Does NOT check
// memory; Evaluate() reports per-stage memory and EstimateFits() decides.
void ValidatePlan(const Problem& problem, const Plan& plan, const std::string& where = "plan");
// Same, with a CostModel of the problem already built (searchers validate many plans).
void ValidatePlan(const CostModel& cost_model, const Plan& plan,
                  const std::string& where = "plan");

// JSON I/O, "schema": "stratos.plan/2" ("virtual_stages" is written when > 1 and optional on
// reading, default 1; each stage's "node_group", an index into the cluster's [[node_group]]s, is
// optional on reading, default 0). "stratos.plan/1" files, which have no node_group, are still
// read.
// PlanFromJson throws InputError naming `where`, the key and the rule for unknown
// keys, missing keys, wrong types and a wrong "schema".
nlohmann::json PlanToJson(const Plan& plan);
Plan PlanFromJson(const nlohmann::json& json, const std::string& where);
Plan ReadPlanFile(const std::string& path);

// A stage's "grad_compression": a name ("none", "bf16", "fp16", "topk", "powersgd", "terngrad",
// "sign"; parameters at their defaults) or an object {"kind": "topk", "density": 0.01,
// "momentum": 0.9} / {"kind": "powersgd", "rank": 4}. Optional in plan files (default none), so
// files written before compression existed keep loading. The writer uses the name form for kinds
// without parameters. CompressionFromJson throws InputError naming `where`, `key` and the rule.
nlohmann::json CompressionToJson(const CompressionSpec& spec);
CompressionSpec CompressionFromJson(const nlohmann::json& json, const std::string& where,
                                    const std::string& key);

}  // namespace stratos
