// DeepSpeed: the engine JSON (keys: microsoft/DeepSpeed docs/_pages/config-json.md,
// deepspeed/runtime/config.py), the launcher's hostfile ("<host> slots=<gpus>") and a launch
// script with Megatron-DeepSpeed flags for the model, TP and PP; reading them back.
#include <fmt/format.h>

#include <climits>
#include <filesystem>
#include <nlohmann/json.hpp>

#include "costmodel/error.h"
#include "costmodel/json_reader.h"
#include "interop/targets.h"

namespace stratos {

using nlohmann::json;

namespace {

json DeepSpeedConfig(const TrainingSpec& training, const ParallelLayout& layout) {
  json config = {{"train_batch_size", layout.global_batch_size},
                 {"train_micro_batch_size_per_gpu", layout.micro_batch_size},
                 {"gradient_accumulation_steps", layout.NumMicrobatches()},
                 {"gradient_clipping", 1.0},
                 {"steps_per_print", 10},
                 {"bf16", {{"enabled", layout.bf16}}},
                 {"zero_optimization", {{"stage", layout.zero_stage}}}};
  if (layout.pipeline_parallel > 1)
    config["pipeline"] = {{"pipe_partitioned", true},
                          {"grad_partitioned", true},
                          {"activation_checkpoint_interval",
                           layout.recompute == Recompute::kFull ? 1 : 0}};
  if (layout.recompute == Recompute::kFull)
    config["activation_checkpointing"] = {{"partition_activations", false},
                                          {"contiguous_memory_optimization", false},
                                          {"cpu_checkpointing", false}};
  // ZeRO's reduction in buckets under the backward pass (TrainingSpec::dp_bucket_bytes, in
  // elements of the gradients' dtype); ZeRO-3 overlaps by default, so without buckets it says no.
  json& zero = config["zero_optimization"];
  if (layout.zero_stage >= 1 && training.dp_bucket_bytes > 0) {
    zero["overlap_comm"] = true;
    zero["reduce_bucket_size"] = DpBucketElements(training);
  } else if (layout.zero_stage == 3) {
    zero["overlap_comm"] = false;
  }
  return config;
}

int JsonInt(const json& object, const char* key, const std::string& where, int fallback) {
  if (!object.contains(key)) return fallback;
  return JsonNumber<int>(object.at(key), where, key);
}

// The batch, ZeRO, its gradient buckets and recomputation of a DeepSpeed engine JSON, on a
// layout whose DP is known. ZeRO-1/2/3 with overlap_comm (ZeRO-3's default) reduce the gradients
// in buckets of reduce_bucket_size elements (default 5e8) under the backward pass.
void ReadEngineJson(const json& config, const std::string& where, ImportedConfig& imported) {
  ParallelLayout& layout = imported.layout;
  if (!config.is_object()) ThrowInputError(where, "(top)", config.type_name(), "must be an object");
  const long long dp = layout.data_parallel;
  long long micro = JsonInt(config, "train_micro_batch_size_per_gpu", where, 0);
  long long accumulation = JsonInt(config, "gradient_accumulation_steps", where, 0);
  long long batch = JsonInt(config, "train_batch_size", where, 0);
  // DeepSpeed's rule (runtime/config.py _batch_assertion): batch = micro x accumulation x DP;
  // any two give the third.
  if (micro == 0 && accumulation == 0) accumulation = 1;
  if (micro == 0 && batch > 0 && batch % (accumulation * dp) == 0) micro = batch / (accumulation * dp);
  if (accumulation == 0 && batch > 0 && micro > 0 && batch % (micro * dp) == 0)
    accumulation = batch / (micro * dp);
  if (batch == 0 && micro > 0 && accumulation > 0) batch = micro * accumulation * dp;
  if (micro < 1 || accumulation < 1 || batch != micro * accumulation * dp || batch > INT_MAX)
    ThrowInputError(where, "train_batch_size", batch,
                    fmt::format("must equal train_micro_batch_size_per_gpu x "
                                "gradient_accumulation_steps x DP = {} x {} x {}",
                                micro, accumulation, dp));
  layout.micro_batch_size = static_cast<int>(micro);
  layout.global_batch_size = static_cast<int>(batch);
  if (config.contains("zero_optimization")) {
    const json& zero = config.at("zero_optimization");
    layout.zero_stage = JsonInt(zero, "stage", where + ": zero_optimization", 0);
    if (layout.zero_stage < 0 || layout.zero_stage > 3)
      ThrowInputError(where, "zero_optimization.stage", layout.zero_stage, "must be 0-3");
    if (zero.contains("overlap_comm") && !zero.at("overlap_comm").is_boolean())
      ThrowInputError(where, "zero_optimization.overlap_comm", zero.at("overlap_comm").dump(),
                      "must be true or false");
    if (layout.zero_stage >= 1 && zero.value("overlap_comm", layout.zero_stage == 3)) {
      imported.dp_bucket_params =
          zero.contains("reduce_bucket_size")
              ? JsonNumber<double>(zero.at("reduce_bucket_size"), where + ": zero_optimization",
                                   "reduce_bucket_size")
              : 5e8;
      if (!(imported.dp_bucket_params >= 0))
        ThrowInputError(where, "zero_optimization.reduce_bucket_size", imported.dp_bucket_params,
                        "must be >= 0");
    }
  }
  layout.bf16 = config.contains("bf16") && config.at("bf16").value("enabled", false);
  if (config.contains("fp16") && config.at("fp16").value("enabled", false)) layout.bf16 = true;
  if (config.contains("pipeline") &&
      JsonInt(config.at("pipeline"), "activation_checkpoint_interval", where + ": pipeline", 0) > 0)
    layout.recompute = Recompute::kFull;
}

}  // namespace

std::vector<ExportFile> DeepSpeedFiles(const Problem& problem, const ParallelLayout& layout) {
  std::string hostfile;
  for (int n = 0; n < layout.nodes; ++n)
    hostfile += fmt::format("node{:03d} slots={}\n", n + 1, layout.gpus_per_node);
  std::string launch = fmt::format(
      "#!/bin/bash\n"
      "# DeepSpeed launch of a stratos plan: {} on {} node{} x {} GPUs ({})\n"
      "#   TP {} x PP {} x DP {}, micro-batch {} per GPU, {} gradient accumulation steps, ZeRO-{}\n"
      "# Megatron-DeepSpeed (microsoft/Megatron-DeepSpeed) pretrain_gpt.py carries the model, TP "
      "and PP;\n"
      "# ds_config.json the batch, ZeRO and precision. Edit hostfile to name your nodes.\n\n",
      problem.model.name, layout.nodes, layout.nodes == 1 ? "" : "s", layout.gpus_per_node,
      problem.cluster.name, layout.tensor_parallel, layout.pipeline_parallel,
      layout.data_parallel, layout.micro_batch_size, layout.NumMicrobatches(),
      layout.zero_stage);
  if (!layout.placement_note.empty()) launch += "# " + layout.placement_note + "\n\n";
  launch += BashArrays(MegatronFlagGroups(problem, layout, true));
  launch += fmt::format(
      "deepspeed --hostfile=hostfile --num_nodes={} --num_gpus={} pretrain_gpt.py \\\n"
      "    \"${{MODEL_ARGS[@]}}\" \\\n"
      "    \"${{TRAINING_ARGS[@]}}\" \\\n"
      "    \"${{MODEL_PARALLEL_ARGS[@]}}\" \\\n"
      "    \"${{DATA_ARGS[@]}}\"\n",
      layout.nodes, layout.gpus_per_node);
  return {{"ds_config.json", DeepSpeedConfig(problem.training, layout).dump(2) + "\n", false},
          {"hostfile", hostfile, false},
          {"deepspeed_launch.sh", launch, true}};
}

ImportedConfig ImportDeepSpeed(const std::string& path, const std::string& text, int world_size) {
  const size_t start = text.find_first_not_of(" \t\r\n");
  if (start != std::string::npos && text[start] == '{') {
    // The engine JSON alone: no TP or PP; every process is a DP replica.
    json config;
    try {
      config = json::parse(text);
    } catch (const json::exception& e) {
      throw InputError(fmt::format("{}: JSON parse error: {}", path, e.what()));
    }
    if (world_size <= 0)
      ThrowInputError(path, "world size", "(missing)", "give the cluster (or --nodes)");
    ImportedConfig imported;
    imported.layout.data_parallel = world_size;
    const int micro = JsonInt(config, "train_micro_batch_size_per_gpu", path, 0);
    const int accumulation = JsonInt(config, "gradient_accumulation_steps", path, 0);
    const int batch = JsonInt(config, "train_batch_size", path, 0);
    if (micro > 0 && accumulation > 0 && batch > 0 &&
        batch != static_cast<long long>(micro) * accumulation * world_size)
      ThrowInputError(path, "train_batch_size", batch,
                      fmt::format("gives DP = {} / ({} x {}) = {}, not the cluster's {} GPUs: the "
                                  "engine JSON alone carries no TP or PP; import the "
                                  "Megatron-DeepSpeed launch script that names it",
                                  batch, micro, accumulation,
                                  static_cast<double>(batch) / (static_cast<double>(micro) * accumulation),
                                  world_size));
    ReadEngineJson(config, path, imported);
    imported.layout.blocks.clear();  // filled by the caller from the model: one stage
    return imported;
  }
  // A launch script: the deepspeed launcher's --num_nodes / --num_gpus, Megatron-DeepSpeed
  // flags, and the engine JSON named by --deepspeed_config (relative to the script).
  const std::map<std::string, std::string> flags = FlagValues(ShellWords(text));
  int world = world_size;
  const int nodes = FlagInt(flags, "--num_nodes", path, 0);
  const int gpus = FlagInt(flags, "--num_gpus", path, 0);
  if (static_cast<long long>(nodes) * gpus > ClusterSpec::kMaxDevices)
    ThrowInputError(path, "--num_nodes x --num_gpus", static_cast<long long>(nodes) * gpus,
                    fmt::format("must be at most {}", ClusterSpec::kMaxDevices));
  if (nodes > 0 && gpus > 0) world = nodes * gpus;
  ImportedConfig imported = ImportMegatron(path, text, world);
  if (nodes > 0 && gpus > 0) {
    imported.world_known = true;
    imported.layout.nodes = nodes;
    imported.layout.gpus_per_node = gpus;
  }
  auto config_flag = flags.find("--deepspeed_config");
  if (config_flag == flags.end()) config_flag = flags.find("--deepspeed-config");
  if (config_flag == flags.end())
    ThrowInputError(path, "--deepspeed_config", "(missing)",
                    "a DeepSpeed launch names its engine JSON");
  std::filesystem::path json_path = config_flag->second;
  if (json_path.is_relative()) json_path = std::filesystem::path(path).parent_path() / json_path;
  const std::string json_where = json_path.string();
  const json config = ReadJsonInputFile(json_where, "DeepSpeed config (--deepspeed_config)");
  const Recompute flagged = imported.layout.recompute;
  ReadEngineJson(config, json_where, imported);
  if (flagged != Recompute::kNone) imported.layout.recompute = flagged;
  return imported;
}

}  // namespace stratos
