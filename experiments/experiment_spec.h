#pragma once
// Experiment specs (`stratos experiment run SPEC.toml`): problem families x named searcher
// variants x seeds, expanded into cells, each cell one search run.
//
//   [experiment]
//   name = "ablation-relax"          # optional, default: the file stem
//   description = "..."              # optional prose
//   time_limit_seconds = 60          # per cell: the searcher's budget (> 0)
//   memory_limit_GiB = 4             # per cell: address-space limit of its process (> 0)
//   seeds = [0, 1, 2]                # searcher seeds (SearchOptions::seed), default [0]
//
//   [[family]]                       # zoo or file models, crossed (or zipped) with the rest
//   name = "gpt"
//   models = ["gpt3-13b"]            # zoo names or files
//   clusters = ["p3.16xlarge"]       # zoo names or files
//   nodes = [8]                      # optional, default: as in the cluster file; per node group
//                                    # of a heterogeneous cluster: ["h100=4,a100=4", ...]
//   global_batches = [512]           # optional, default [512]
//   seq_lengths = [2048]             # optional, default: the model's
//   schedule = "1f1b"                # optional: 1f1b | gpipe
//   zip = false                      # optional: true pairs the lists element by element (lists
//                                    # of length 1 are broadcast) instead of crossing them
//   training = { dp_bucket_MiB = 25 }  # optional: how the family's problems train (below)
//
//   [[family]]                       # generated instances (costmodel/generators.h)
//   name = "nonuniform"
//   generator = "nonuniform"         # explicit models with log-uniform layers
//   layers = [96]                    #   layer counts (>= 1)
//   instances = 20                   #   instance seeds 0 .. instances-1 (or instance_seeds = [..])
//   spread_decades = 1.5             #   optional
//   clusters = ["p3.16xlarge"]  nodes = [16]  global_batches = [512]
//
//   [[family]]
//   generator = "operator"           # operator-granularity transformers of `models`
//   [[family]]
//   generator = "seed-cases"         # the seed's pipeline-partition cases (rows = [..] optional;
//                                    # each case fixes its own cluster, stages and microbatches)
//
//   [[searcher]]
//   name = "relax-no-gradient"       # the variant's name in results and reports
//   algorithm = "relax"              # relax | dp | ilp | mcmc | grid | local | exhaustive
//   options = { iterations = 1 }     # optional: any option by name (experiments/searchers.h);
//                                    # nested tables give dotted names (space = { max_stages = 4 })
//   time_limit_seconds = 30          # optional: overrides the experiment's for this variant
//
// A family's `training` table sets how its problems train, as search's flags do
// (costmodel/problem.h TrainingSpec; absent keys keep its defaults):
//   dp_overlap = 0.0                  share of the DP gradient sync hidden behind backward [0, 1]
//   dp_bucket_MiB = 0                 DP gradient buckets reduced under the backward pass (0: none)
//   tp_comm_overlap = 0.0             share of the TP collectives hidden behind the GEMMs [0, 1]
//   pp_comm_overlap = 0.0             share of the pipeline sends hidden [0, 1]
//   sequence_parallel = true          Megatron sequence parallelism with TP
//   zero_reduce_every_microbatch = true   ZeRO-2/3 reduce-scatter every microbatch's gradients
//   zero3_gather = "tensor"           ZeRO-3 all-gathers per parameter tensor (DeepSpeed), per
//                                     "layer", or "layer-prefetch" (FSDP)
// Not for generator "seed-cases" (each case fixes its problem).
//
// Cells are expanded in order family, instance, searcher, seed. Every error throws InputError
// naming the file, the key path, the value and the rule.
#include <nlohmann/json.hpp>

#include <cstdint>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "costmodel/problem.h"
#include "costmodel/search_space.h"

namespace stratos {

struct ExperimentFamily {
  std::string name;
  std::string generator;  // "" (models as given), "nonuniform", "operator", "seed-cases"
  std::vector<std::string> models;
  std::vector<std::string> clusters;
  // Node counts (0: as in the cluster file) or per-group counts ("h100=4,a100=4"), as JSON.
  std::vector<nlohmann::json> nodes = {0};
  std::vector<int> global_batches = {512};
  std::vector<int> seq_lengths = {0};     // 0: the model's
  std::vector<int> layers;                // nonuniform
  std::vector<std::uint64_t> instance_seeds;  // nonuniform
  std::vector<int> rows;                  // seed-cases: row indices (empty: all)
  double spread_decades = 1.5;
  std::string schedule = "1f1b";
  bool zip = false;
  // The `training` table's keys and values as given (empty: TrainingSpec's defaults); cells
  // record it in their problem only when it is not empty, so older cells keep their keys.
  nlohmann::json training = nlohmann::json::object();
};

struct ExperimentSearcher {
  std::string name;
  std::string algorithm;
  std::vector<std::pair<std::string, std::string>> options;  // (name, value as text)
  double time_limit_seconds = 0;  // 0: the experiment's
};

// One search run. `problem` describes how to build the problem (BuildCellProblem); `key` is the
// canonical JSON of everything that determines the cell's result, so equal keys mean equal cells
// across spec edits.
struct ExperimentCell {
  int id = 0;
  std::string family;
  std::string instance;  // readable instance name, unique within the family
  nlohmann::json problem;
  std::string searcher;
  std::string algorithm;
  std::vector<std::pair<std::string, std::string>> options;
  int seed = 0;
  double time_limit_seconds = 0;
  std::string key;
};

struct ExperimentSpec {
  std::string name;
  std::string description;
  std::string source;  // the file
  double time_limit_seconds = 60;
  double memory_limit_bytes = 4.0 * 1024 * 1024 * 1024;
  std::vector<int> seeds = {0};
  std::vector<ExperimentFamily> families;
  std::vector<ExperimentSearcher> searchers;

  // Every cell, in order family, instance, searcher, seed. Throws InputError naming the family
  // for an instance that cannot be built (a model or cluster that does not load).
  std::vector<ExperimentCell> Expand() const;
  // 16 hex digits: FNV-1a of the cells' keys and the memory limit, so that comments and layout
  // do not count as a change.
  std::string Hash() const;
};

// Reads and checks a spec (every searcher option is applied to a SearcherSetup, every instance
// built once). Throws InputError "<file>: <key path> = <value>: <rule>".
ExperimentSpec ReadExperimentSpec(const std::string& path);
// `name_or_path` when it is a file; else the shipped spec of that name,
// experiments/specs/<name>.toml in the data directory (costmodel/data_dir.h), when there is one
// ("ablation-relax"); else `name_or_path` unchanged (reading it then names it).
std::string ResolveSpecPath(const std::string& name_or_path);
ExperimentSpec ParseExperimentSpec(std::string_view text, const std::string& where);

// The problem of a cell, and the search space options its instance fixes (seed cases fix the
// stage count, the meshes and the microbatch count; other instances leave the defaults).
struct CellProblem {
  Problem problem;
  SpaceOptions space;
};
CellProblem BuildCellProblem(const nlohmann::json& problem);

// Sets `training` from a family's `training` object (keys as ExperimentSpec documents them; the
// values checked when the spec was read). Throws InputError for an unknown key or a value out of
// range (ValidateTrainingSpec).
void ApplyFamilyTraining(const nlohmann::json& options, TrainingSpec* training);

// FNV-1a 64 of `text` as 16 hex digits (stable across platforms and runs).
std::string StableHash(const std::string& text);

}  // namespace stratos
