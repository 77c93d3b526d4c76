// Plan <-> ParallelLayout, the target rules every exporter shares, and the nearest exportable plan.
#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <numeric>
#include <optional>

#include "costmodel/error.h"
#include "costmodel/evaluate.h"
#include "interop/interop.h"
#include "interop/targets.h"

namespace stratos {

namespace {

const std::vector<std::pair<Target, const char*>>& TargetTable() {
  static const std::vector<std::pair<Target, const char*>> table = {
      {Target::kMegatron, "megatron"},
      {Target::kDeepSpeed, "deepspeed"},
      {Target::kTorchtitan, "torchtitan"},
      {Target::kTorchPipelining, "torch-pipelining"}};
  return table;
}

// Transformer blocks in layers [first, last) of a transformer-family model.
int BlocksIn(const ModelSpec& model, int first, int last) {
  int blocks = 0;
  for (int l = first; l < last; ++l) blocks += model.layers[l].kind == LayerKind::kTransformer;
  return blocks;
}

// The first field in which `config` differs from `reference`, as "key = value" parts.
std::optional<std::pair<std::string, std::string>> FirstDifference(const StageConfig& config,
                                                                   const StageConfig& reference) {
  if (config.data_parallel != reference.data_parallel)
    return std::make_pair(std::string("data_parallel"), std::to_string(config.data_parallel));
  if (config.tensor_parallel != reference.tensor_parallel)
    return std::make_pair(std::string("tensor_parallel"), std::to_string(config.tensor_parallel));
  if (config.zero_stage != reference.zero_stage)
    return std::make_pair(std::string("zero_stage"), std::to_string(config.zero_stage));
  if (config.recompute != reference.recompute)
    return std::make_pair(std::string("recompute"), std::string(RecomputeName(config.recompute)));
  if (config.mesh_nodes != reference.mesh_nodes ||
      config.mesh_gpus_per_node != reference.mesh_gpus_per_node)
    return std::make_pair(std::string("mesh"),
                          fmt::format("[{}, {}]", config.mesh_nodes, config.mesh_gpus_per_node));
  return std::nullopt;
}

std::string ReferenceValue(const StageConfig& c, const std::string& key) {
  if (key == "data_parallel") return std::to_string(c.data_parallel);
  if (key == "tensor_parallel") return std::to_string(c.tensor_parallel);
  if (key == "zero_stage") return std::to_string(c.zero_stage);
  if (key == "recompute") return RecomputeName(c.recompute);
  return fmt::format("[{}, {}]", c.mesh_nodes, c.mesh_gpus_per_node);
}

// Whether torchtitan refuses DDP here: it replicates (ZeRO-0 DP) only as the sole parallelism
// ("DDP has not supported > 1D parallelism", torchtitan parallelize).
bool TorchtitanDdpRefused(const StageConfig& c, int p) {
  return c.zero_stage == 0 && c.data_parallel > 1 && (c.tensor_parallel > 1 || p > 1);
}

// The ZeRO stage nearest to config.zero_stage that `target` runs with p pipeline ranks.
int NearestZero(Target target, const StageConfig& config, int p) {
  const int zero = config.zero_stage;
  switch (target) {
    case Target::kMegatron:
      return std::min(zero, 1);
    case Target::kDeepSpeed:
      return p > 1 ? std::min(zero, 1) : zero;
    case Target::kTorchtitan:
      return zero == 1 || TorchtitanDdpRefused(config, p) ? 2 : zero;
    case Target::kTorchPipelining:
      return zero;
  }
  return zero;
}

}  // namespace

const char* TargetName(Target target) {
  for (const auto& [t, name] : TargetTable())
    if (t == target) return name;
  return "?";
}

std::vector<std::string> TargetNames() {
  std::vector<std::string> names;
  for (const auto& entry : TargetTable()) names.push_back(entry.second);
  return names;
}

Target ParseTarget(const std::string& text, const std::string& where) {
  for (const auto& [target, name] : TargetTable())
    if (text == name) return target;
  ThrowInputError(where, "target", text,
                  "must be one of megatron, deepspeed, torchtitan, torch-pipelining");
}

TrainingSpec TrainingForTarget(Target target, const TrainingSpec& training) {
  TrainingSpec out = training;
  if (target == Target::kMegatron && training.param_dtype_bytes == 2) out.grad_dtype_bytes = 4;
  if (target == Target::kDeepSpeed) out.zero3_gather = Zero3Gather::kTensor;
  if (target == Target::kTorchtitan) out.zero3_gather = Zero3Gather::kLayerPrefetch;
  return out;
}

std::string TargetTrainingChange(Target target, const TrainingSpec& training) {
  const TrainingSpec out = TrainingForTarget(target, training);
  std::string changes;
  if (out.grad_dtype_bytes != training.grad_dtype_bytes)
    changes = fmt::format(
        "gradients accumulated and reduced in fp32 ({} bytes per parameter, not {}; "
        "Megatron-LM's --bf16 without --grad-reduce-in-bf16)",
        out.grad_dtype_bytes, training.grad_dtype_bytes);
  if (out.zero3_gather != training.zero3_gather)
    changes += fmt::format("{}ZeRO-3 parameters all-gathered {}", changes.empty() ? "" : "; ",
                           out.zero3_gather == Zero3Gather::kTensor
                               ? "a tensor at a time (DeepSpeed's per-parameter gathers)"
                               : "a layer at a time, each under the layer before it (FSDP's "
                                 "per-block units and prefetch)");
  if (changes.empty()) return "";
  return fmt::format("priced as {} runs it: {}", TargetName(target), changes);
}

bool ParallelLayout::EvenBlocks() const {
  if (blocks.empty()) return true;
  for (int b : blocks)
    if (b != blocks.front()) return false;
  return true;
}

void CheckTransformerModel(const ModelSpec& model, Target target, const std::string& where) {
  const bool decoder = model.family == "gpt" || model.family == "llama";
  if (!decoder)
    ThrowInputError(where, "model.family", model.family.empty() ? "explicit" : model.family,
                    fmt::format("{} exports decoder-only transformers (families gpt and llama)",
                                TargetName(target)));
  const int L = model.num_layers;
  bool shaped = model.NumLayers() == L + 2 && model.layers.front().kind == LayerKind::kEmbedding &&
                model.layers.back().kind == LayerKind::kHead;
  for (int l = 1; shaped && l <= L; ++l) shaped = model.layers[l].kind == LayerKind::kTransformer;
  if (!shaped)
    ThrowInputError(where, "model.layers", model.NumLayers(),
                    fmt::format("{} needs the layer list [embedding, {} blocks, head]",
                                TargetName(target), L));
}

ParallelLayout LayoutForTarget(const Problem& problem, const Plan& plan, Target target,
                               const std::string& where) {
  const std::string name = TargetName(target);
  CheckTransformerModel(problem.model, target, where);
  if (target == Target::kTorchtitan) TorchtitanFlavor(problem.model, where);
  ValidatePlan(problem, plan, where);
  const int p = plan.NumPipelineRanks();
  const int v = plan.virtual_stages;
  const StageConfig& first = plan.stages.front().config;
  for (int s = 0; s < plan.NumStages(); ++s) {
    const StageConfig& c = plan.stages[s].config;
    if (auto diff = FirstDifference(c, first))
      ThrowInputError(where, fmt::format("stages[{}].{}", s, diff->first), diff->second,
                      fmt::format("{} runs one configuration in every pipeline stage (stage 0 "
                                  "has {})",
                                  name, ReferenceValue(first, diff->first)));
    if (c.grad_compression.kind != GradCompression::kNone)
      ThrowInputError(where, fmt::format("stages[{}].grad_compression", s),
                      c.grad_compression.Label(),
                      fmt::format("{} has no DP gradient compression", name));
  }
  if (plan.schedule == Schedule::kGpipe &&
      (target == Target::kMegatron || target == Target::kDeepSpeed))
    ThrowInputError(where, "schedule", "gpipe",
                    fmt::format("{} runs 1F1B (PipeDream-Flush) pipelines only", name));
  if (v > 1 && target == Target::kDeepSpeed)
    ThrowInputError(where, "virtual_stages", v,
                    "deepspeed's pipeline engine has no interleaved schedule (one chunk per rank)");
  if (v > 1 && plan.num_microbatches % p != 0)
    ThrowInputError(where, "num_microbatches", plan.num_microbatches,
                    fmt::format("{}'s interleaved 1F1B needs a multiple of the {} pipeline ranks",
                                name, p));
  const int zero = first.zero_stage;
  if (target == Target::kMegatron && zero > 1)
    ThrowInputError(where, "stages[0].zero_stage", zero,
                    "megatron shards only the optimizer state across DP "
                    "(--use-distributed-optimizer = ZeRO-1)");
  if (target == Target::kDeepSpeed && zero > 1 && p > 1)
    ThrowInputError(where, "stages[0].zero_stage", zero,
                    "deepspeed's pipeline engine runs ZeRO stages 0 and 1 only");
  if (target == Target::kTorchtitan && zero == 1)
    ThrowInputError(where, "stages[0].zero_stage", zero,
                    "torchtitan shards with FSDP2 (ZeRO-2 or ZeRO-3) or replicates (ZeRO-0); it "
                    "has no ZeRO-1");
  if (target == Target::kTorchtitan && TorchtitanDdpRefused(first, p))
    ThrowInputError(where, "stages[0].zero_stage", zero,
                    "torchtitan replicates (DDP, ZeRO-0) only without TP or PP; shard with "
                    "ZeRO-2 or ZeRO-3 (FSDP2)");

  ParallelLayout layout;
  layout.tensor_parallel = first.tensor_parallel;
  layout.data_parallel = first.data_parallel;
  layout.pipeline_parallel = p;
  layout.virtual_stages = v;
  layout.global_batch_size = plan.global_batch_size;
  layout.micro_batch_size = plan.global_batch_size / (plan.num_microbatches * first.data_parallel);
  layout.zero_stage = zero;
  layout.recompute = first.recompute;
  layout.schedule = plan.schedule;
  layout.sequence_parallel = problem.training.sequence_parallel && first.tensor_parallel > 1;
  layout.bf16 = problem.training.param_dtype_bytes == 2;
  for (const StagePlan& stage : plan.stages)
    layout.blocks.push_back(BlocksIn(problem.model, stage.first_layer, stage.last_layer));
  if (target == Target::kDeepSpeed && p > 1 && !layout.EvenBlocks()) {
    for (int s = 1; s < p; ++s)
      if (layout.blocks[s] != layout.blocks[0])
        ThrowInputError(where, fmt::format("stages[{}]", s),
                        fmt::format("{} blocks", layout.blocks[s]),
                        fmt::format("deepspeed partitions the blocks evenly "
                                    "(partition_method type:transformer; stage 0 has {})",
                                    layout.blocks[0]));
  }
  const int devices = plan.NumDevices();
  // A plan over several node groups: the targets start the same processes on every node, so the
  // groups' nodes must be alike in GPUs; the ranks follow the nodes' order.
  const ClusterSpec& cluster = problem.cluster;
  const int group = plan.stages.front().config.node_group;
  int gpus_per_node = cluster.Group(group).gpus_per_node;
  std::string runs;
  for (int r = 0; r < p;) {
    const int g = plan.stages[r].config.node_group;
    int end = r;
    while (end + 1 < p && plan.stages[end + 1].config.node_group == g) ++end;
    if (cluster.Group(g).gpus_per_node != gpus_per_node)
      ThrowInputError(where, fmt::format("stages[{}].node_group", r), g,
                      fmt::format("{} starts the same number of processes on every node: node "
                                  "group {} has {} GPUs per node, group {} {}",
                                  name, cluster.GroupName(g), cluster.Group(g).gpus_per_node,
                                  cluster.GroupName(group), gpus_per_node));
    runs += fmt::format("{}pipeline rank{} {} on node group {} ({})", runs.empty() ? "" : "; ",
                        end > r ? "s" : "", end > r ? fmt::format("{}-{}", r, end)
                                                    : std::to_string(r),
                        cluster.GroupName(g), cluster.Group(g).device);
    r = end + 1;
  }
  if (runs.find(';') != std::string::npos)
    layout.placement_note = runs + ": start the nodes of these groups in this order";
  if (devices <= gpus_per_node) {
    layout.nodes = 1;
    layout.gpus_per_node = devices;
  } else if (devices % gpus_per_node == 0) {
    layout.nodes = devices / gpus_per_node;
    layout.gpus_per_node = gpus_per_node;
  } else {
    ThrowInputError(where, "stages", fmt::format("{} devices in all", devices),
                    fmt::format("{} starts the same number of processes on every node: the plan "
                                "must use whole nodes of {} GPUs or part of one",
                                name, gpus_per_node));
  }
  return layout;
}

Plan PlanFromLayout(const Problem& problem, const ParallelLayout& layout,
                    const std::string& where) {
  const ModelSpec& model = problem.model;
  const int p = layout.pipeline_parallel, v = layout.virtual_stages;
  if (p < 1) ThrowInputError(where, "pipeline parallel size", p, "must be >= 1");
  if (v < 1) ThrowInputError(where, "virtual stages", v, "must be >= 1");
  if (v > 1 && p < 2)
    ThrowInputError(where, "virtual stages", v, "interleaving needs at least 2 pipeline ranks");
  if (static_cast<long long>(layout.blocks.size()) != static_cast<long long>(p) * v)
    ThrowInputError(where, "stages", layout.blocks.size(),
                    fmt::format("must be pipeline ranks x virtual stages = {}", p * v));
  const int total = std::accumulate(layout.blocks.begin(), layout.blocks.end(), 0);
  if (total != model.num_layers)
    ThrowInputError(where, "transformer blocks in the stages", total,
                    fmt::format("must equal the model's {} layers", model.num_layers));
  StageConfig config;
  config.data_parallel = layout.data_parallel;
  config.tensor_parallel = layout.tensor_parallel;
  config.zero_stage = layout.zero_stage;
  config.recompute = layout.recompute;
  const long long mesh_devices = static_cast<long long>(layout.data_parallel) * layout.tensor_parallel;
  if (mesh_devices > ClusterSpec::kMaxDevices ||
      !SetMeshForDevices(config, static_cast<int>(mesh_devices), problem.cluster.GpusPerNode()))
    ThrowInputError(where, "data parallel x tensor parallel", mesh_devices,
                    fmt::format("a pipeline rank's devices must fit in a node or fill whole nodes "
                                "of {} GPUs",
                                problem.cluster.GpusPerNode()));
  const long long per_microbatch =
      static_cast<long long>(layout.micro_batch_size) * layout.data_parallel;
  if (layout.micro_batch_size < 1 || layout.global_batch_size % per_microbatch != 0)
    ThrowInputError(where, "micro batch size", layout.micro_batch_size,
                    fmt::format("micro batch x DP = {} must divide the global batch {}",
                                per_microbatch, layout.global_batch_size));
  Plan plan;
  plan.global_batch_size = layout.global_batch_size;
  plan.num_microbatches = static_cast<int>(layout.global_batch_size / per_microbatch);
  plan.schedule = layout.schedule;
  plan.virtual_stages = v;
  int next = 0;
  const int n = p * v;
  for (int i = 0; i < n; ++i) {
    const int first = next;
    next += layout.blocks[i] + (i == 0 ? 1 : 0) + (i == n - 1 ? 1 : 0);
    if (next == first)
      ThrowInputError(where, fmt::format("stage {}", i), "0 blocks",
                      "a stage holds at least one layer (only the first and the last may hold no "
                      "block: they hold the embedding and the head)");
    plan.stages.push_back({first, next, config});
  }
  ValidatePlan(problem, plan, where);
  return plan;
}

std::vector<std::vector<std::string>> StageModules(const ParallelLayout& layout) {
  std::vector<std::vector<std::string>> stages;
  int block = 0;
  const size_t n = layout.blocks.size();
  for (size_t i = 0; i < n; ++i) {
    std::vector<std::string> modules;
    if (i == 0) modules.push_back("tok_embeddings");
    for (int b = 0; b < layout.blocks[i]; ++b) modules.push_back(fmt::format("layers.{}", block++));
    if (i + 1 == n) {
      modules.push_back("norm");
      modules.push_back("output");
    }
    stages.push_back(modules);
  }
  return stages;
}

std::vector<ExportFile> ExportPlan(const Problem& problem, const Plan& plan, Target target,
                                   const std::string& where) {
  const ParallelLayout layout = LayoutForTarget(problem, plan, target, where);
  switch (target) {
    case Target::kMegatron:
      return {MegatronScript(problem, layout)};
    case Target::kDeepSpeed:
      return DeepSpeedFiles(problem, layout);
    case Target::kTorchtitan:
      return {TorchtitanToml(problem, layout, where)};
    case Target::kTorchPipelining:
      return TorchPipeliningFiles(problem, plan, layout);
  }
  return {};
}

NearestPlan NearestPlanForTarget(const Problem& problem, const Plan& plan, Target target,
                                 const std::string& where) {
  CheckTransformerModel(problem.model, target, where);
  if (target == Target::kTorchtitan) TorchtitanFlavor(problem.model, where);
  ValidatePlan(problem, plan, where);
  const int p = plan.NumPipelineRanks();
  Plan base = plan;
  std::vector<std::string> changes;
  if (plan.schedule == Schedule::kGpipe &&
      (target == Target::kMegatron || target == Target::kDeepSpeed)) {
    base.schedule = Schedule::kOneFOneB;
    changes.push_back("schedule: gpipe -> 1f1b");
  }
  std::vector<std::pair<int, int>> ranges;
  for (const StagePlan& stage : plan.stages) ranges.push_back({stage.first_layer, stage.last_layer});
  if (target == Target::kDeepSpeed && (plan.virtual_stages > 1 || p > 1)) {
    // One chunk per rank, the blocks split evenly (embedding with the first, head with the last).
    const int L = problem.model.num_layers;
    if (L % p != 0)
      ThrowInputError(where, "stages", fmt::format("{} pipeline ranks", p),
                      fmt::format("deepspeed partitions the blocks evenly: {} blocks do not split "
                                  "into {} equal stages",
                                  L, p));
    std::vector<std::pair<int, int>> even;
    for (int s = 0; s < p; ++s)
      even.push_back({s == 0 ? 0 : 1 + s * (L / p), s == p - 1 ? L + 2 : 1 + (s + 1) * (L / p)});
    if (even != ranges || plan.virtual_stages > 1) {
      std::string before, after;
      for (const StagePlan& stage : plan.stages)
        before += fmt::format("{}{}", before.empty() ? "" : "|", stage.NumLayers());
      for (auto [a, b] : even) after += fmt::format("{}{}", after.empty() ? "" : "|", b - a);
      changes.push_back(fmt::format("stages: [{}] -> [{}] layers (one even chunk per rank)",
                                    before, after));
    }
    ranges = even;
    base.virtual_stages = 1;
  }
  // One configuration for all ranks: the best of the stages' own, adapted to the target.
  std::optional<Plan> best;
  double best_seconds = 0;
  bool best_fits = false;
  std::string error;
  std::vector<StageConfig> tried;
  // Configurations compared by shape: each stage keeps its node group.
  const auto shape = [](StageConfig config) {
    config.node_group = 0;
    return config;
  };
  for (int s = 0; s < p; ++s) {
    StageConfig config = shape(plan.stages[s].config);
    config.grad_compression = CompressionSpec{};
    config.zero_stage = NearestZero(target, config, p);
    if (std::find(tried.begin(), tried.end(), config) != tried.end()) continue;
    tried.push_back(config);
    Plan candidate = base;
    candidate.stages.clear();
    for (size_t i = 0; i < ranges.size(); ++i) {
      StageConfig placed = config;
      placed.node_group = plan.stages[i % p].config.node_group;
      candidate.stages.push_back({ranges[i].first, ranges[i].second, placed});
    }
    try {
      LayoutForTarget(problem, candidate, target, where);
      const Estimate estimate = Evaluate(problem, candidate);
      // A plan that fits memory beats one that does not; then the faster one.
      if (!best || std::make_pair(!estimate.Fits(), estimate.iteration_seconds) <
                       std::make_pair(!best_fits, best_seconds)) {
        best = candidate;
        best_seconds = estimate.iteration_seconds;
        best_fits = estimate.Fits();
      }
    } catch (const InputError& e) {
      if (error.empty()) error = e.what();
    }
  }
  if (!best) throw InputError(error);
  // Stages that had the same configuration change together: one line per old configuration.
  const StageConfig chosen = shape(best->stages[0].config);
  std::vector<bool> listed(p, false);
  for (int s = 0; s < p; ++s) {
    if (listed[s] || shape(plan.stages[s].config) == chosen) continue;
    std::vector<int> same;
    for (int t = s; t < p; ++t)
      if (shape(plan.stages[t].config) == shape(plan.stages[s].config))
        same.push_back(t), listed[t] = true;
    changes.push_back(fmt::format("stage{} {}: {} -> {}", same.size() == 1 ? "" : "s",
                                  fmt::join(same, ", "), shape(plan.stages[s].config).Label(),
                                  chosen.Label()));
  }
  return {*best, changes};
}

}  // namespace stratos
