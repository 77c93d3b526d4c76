#include "costmodel/plan.h"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <climits>

#include "costmodel/cost_model.h"
#include "costmodel/error.h"
#include "costmodel/json_reader.h"

namespace stratos {

using nlohmann::json;

int Plan::NumPipelineRanks() const {
  if (virtual_stages > 1 && NumStages() % virtual_stages == 0) return NumStages() / virtual_stages;
  return NumStages();
}

int Plan::NumDevices() const {
  // In 64 bits, saturated: a plan read from a file may claim any number (ValidatePlan refuses
  // more than the cluster's).
  long long devices = 0;
  for (int r = 0; r < NumPipelineRanks(); ++r) {
    const StageConfig& c = stages[r].config;
    devices += static_cast<long long>(c.mesh_nodes) * c.mesh_gpus_per_node;
  }
  return static_cast<int>(std::min<long long>(devices, INT_MAX));
}

std::string Plan::RankLayers(int rank) const {
  std::string text;
  for (int s = rank; s < NumStages(); s += NumPipelineRanks())
    text += fmt::format("{}{}-{}", text.empty() ? "" : ",", stages[s].first_layer,
                        stages[s].last_layer - 1);
  return text;
}

std::string Plan::Summary() const {
  std::string layers;
  for (const StagePlan& stage : stages)
    layers += fmt::format("{}{}", layers.empty() ? "" : "|", stage.NumLayers());
  std::string text = fmt::format("{} stage{} [{} layers] m={} {}", NumStages(),
                                 NumStages() == 1 ? "" : "s", layers, num_microbatches,
                                 ScheduleName(schedule));
  if (virtual_stages > 1)
    text += fmt::format(" interleaved: {} ranks x {} virtual stages", NumPipelineRanks(),
                        virtual_stages);
  for (int s = 0; s < NumPipelineRanks(); ++s)
    text += fmt::format("; s{}: {}", s, stages[s].config.Label());
  return text;
}

bool SetMeshForDevices(StageConfig& config, int devices, int gpus_per_node) {
  if (devices < 1 || gpus_per_node < 1) return false;
  if (devices <= gpus_per_node) {
    config.mesh_nodes = 1;
    config.mesh_gpus_per_node = devices;
    return true;
  }
  if (devices % gpus_per_node != 0) return false;
  config.mesh_nodes = devices / gpus_per_node;
  config.mesh_gpus_per_node = gpus_per_node;
  return true;
}

std::vector<std::pair<int, int>> SplitLayersEvenly(int num_layers, int num_stages) {
  if (num_stages < 1 || num_stages > num_layers)
    ThrowInputError("plan", "pipeline_parallel", num_stages,
                    fmt::format("must be between 1 and the model's {} layers", num_layers));
  std::vector<std::pair<int, int>> ranges;
  const int base = num_layers / num_stages;
  const int larger = num_layers % num_stages;  // the last `larger` stages get one more layer
  int first = 0;
  for (int s = 0; s < num_stages; ++s) {
    const int size = base + (s >= num_stages - larger ? 1 : 0);
    ranges.push_back({first, first + size});
    first += size;
  }
  return ranges;
}

std::vector<std::pair<int, int>> MegatronStageLayers(const ModelSpec& model, int num_stages) {
  const int L = model.num_layers;
  bool shaped = L >= 1 && model.NumLayers() == L + 2 &&
                model.layers.front().kind == LayerKind::kEmbedding &&
                model.layers.back().kind == LayerKind::kHead;
  for (int l = 1; shaped && l <= L; ++l) shaped = model.layers[l].kind == LayerKind::kTransformer;
  if (!shaped) return SplitLayersEvenly(model.NumLayers(), num_stages);
  if (num_stages < 1 || num_stages > L)
    ThrowInputError("plan", "pipeline_parallel", num_stages,
                    fmt::format("must be between 1 and the model's {} transformer blocks", L));
  std::vector<std::pair<int, int>> ranges = SplitLayersEvenly(L, num_stages);
  for (auto& [first, last] : ranges) {  // block b is layer b + 1
    first += 1;
    last += 1;
  }
  ranges.front().first = 0;               // the embedding
  ranges.back().second = model.NumLayers();  // the head
  return ranges;
}

std::optional<Plan> InterleavePlan(const Plan& plan, int virtual_stages) {
  const int v = virtual_stages;
  const int p = plan.NumStages();
  if (v < 2 || plan.virtual_stages != 1 || p < 2 || plan.schedule != Schedule::kOneFOneB)
    return std::nullopt;
  for (const StagePlan& stage : plan.stages)
    if (stage.NumLayers() < v) return std::nullopt;
  Plan out = plan;
  out.virtual_stages = v;
  out.stages.clear();
  int next = plan.stages.front().first_layer;
  for (int k = 0; k < v; ++k)
    for (int s = 0; s < p; ++s) {
      const int n = plan.stages[s].NumLayers();
      const int size = n / v + (k < n % v ? 1 : 0);
      out.stages.push_back({next, next + size, plan.stages[s].config});
      next += size;
    }
  return out;
}

bool InterleavesExactly(const Problem& problem) {
  if (problem.training.schedule != Schedule::kOneFOneB ||
      problem.training.virtual_pipeline_stages != 1)
    return false;
  const std::vector<LayerSpec>& layers = problem.model.layers;
  for (size_t l = 2; l + 1 < layers.size(); ++l)
    if (layers[l].cost_class != layers[1].cost_class) return false;
  return true;
}

std::vector<int> ExactVirtualStages(const Problem& problem, const std::vector<int>& offered) {
  std::vector<int> counts{1};
  if (problem.cluster.NumGroups() != 1 || !InterleavesExactly(problem)) return counts;
  for (int v : offered)
    if (v > 1) counts.push_back(v);
  std::sort(counts.begin(), counts.end());
  counts.erase(std::unique(counts.begin(), counts.end()), counts.end());
  return counts;
}

void ValidatePlan(const Problem& problem, const Plan& plan, const std::string& where) {
  ValidatePlan(CostModel(problem), plan, where);
}

void ValidatePlan(const CostModel& cost_model, const Plan& plan, const std::string& where) {
  const Problem& problem = cost_model.problem();
  const int num_layers = problem.NumLayers();
  if (plan.global_batch_size != problem.training.global_batch_size)
    ThrowInputError(where, "global_batch_size", plan.global_batch_size,
                    fmt::format("must equal the problem's global batch {}",
                                problem.training.global_batch_size));
  if (plan.num_microbatches < 1)
    ThrowInputError(where, "num_microbatches", plan.num_microbatches, "must be >= 1");
  if (plan.stages.empty()) ThrowInputError(where, "stages", "[]", "must list at least one stage");
  const int v = plan.virtual_stages;
  if (v < 1) ThrowInputError(where, "virtual_stages", v, "must be >= 1");
  if (v > 1) {
    if (plan.NumStages() % v != 0 || plan.NumStages() < 2 * v)
      ThrowInputError(where, "stages", fmt::format("{} entries", plan.NumStages()),
                      fmt::format("must be p x virtual_stages = p x {} with p >= 2 pipeline ranks",
                                  v));
    if (plan.schedule != Schedule::kOneFOneB)
      ThrowInputError(where, "schedule", ScheduleName(plan.schedule),
                      "virtual stages run the interleaved 1F1B schedule: must be \"1f1b\"");
    if (problem.training.virtual_pipeline_stages != 1)
      ThrowInputError(where, "virtual_stages", v,
                      fmt::format("the problem already sets {} virtual pipeline stages; give them "
                                  "in one place",
                                  problem.training.virtual_pipeline_stages));
    const int p = plan.NumPipelineRanks();
    for (int s = p; s < plan.NumStages(); ++s)
      if (!(plan.stages[s].config == plan.stages[s % p].config))
        ThrowInputError(where, fmt::format("stages[{}]", s), plan.stages[s].config.Label(),
                        fmt::format("virtual stage {} runs on pipeline rank {} and must have its "
                                    "configuration ({})",
                                    s, s % p, plan.stages[s % p].config.Label()));
  }
  int expected_first = 0;
  for (int s = 0; s < plan.NumStages(); ++s) {
    const StagePlan& stage = plan.stages[s];
    const std::string key = fmt::format("stages[{}]", s);
    if (stage.first_layer != expected_first)
      ThrowInputError(where, key + ".first_layer", stage.first_layer,
                      fmt::format("must be {} (stages cover the layers once, in order)",
                                  expected_first));
    if (stage.last_layer <= stage.first_layer)
      ThrowInputError(where, key + ".last_layer", stage.last_layer,
                      fmt::format("must be > first_layer = {} (a stage holds at least one layer)",
                                  stage.first_layer));
    if (stage.last_layer > num_layers)
      ThrowInputError(where, key + ".last_layer", stage.last_layer,
                      fmt::format("must be <= the model's {} layers", num_layers));
    expected_first = stage.last_layer;
  }
  if (expected_first != num_layers)
    ThrowInputError(where, fmt::format("stages[{}].last_layer", plan.NumStages() - 1),
                    expected_first,
                    fmt::format("must be {} (the stages must cover all layers)", num_layers));
  if (plan.NumDevices() > problem.NumDevices())
    ThrowInputError(where, "stages", fmt::format("{} devices in all", plan.NumDevices()),
                    fmt::format("the cluster has only {} devices", problem.NumDevices()));
  for (int s = 0; s < plan.NumStages(); ++s) {
    std::string rule = cost_model.CheckConfig(plan.stages[s].config, plan.num_microbatches);
    if (!rule.empty())
      ThrowInputError(where, fmt::format("stages[{}]", s), plan.stages[s].config.Label(), rule);
  }
  const ClusterSpec& cluster = problem.cluster;
  if (cluster.NumGroups() > 1) {
    for (int g = 0; g < cluster.NumGroups(); ++g) {
      long long used = 0;
      for (int r = 0; r < plan.NumPipelineRanks(); ++r)
        if (plan.stages[r].config.node_group == g) used += plan.stages[r].config.NumDevices();
      if (used > cluster.GroupDevices(g))
        ThrowInputError(where, "stages",
                        fmt::format("{} devices in node group {}", used, cluster.GroupName(g)),
                        fmt::format("the group has only {} devices ({})", cluster.GroupDevices(g),
                                    cluster.GroupLabel(g)));
    }
  }
}

json CompressionToJson(const CompressionSpec& spec) {
  switch (spec.kind) {
    case GradCompression::kTopK: {
      json object = {{"kind", "topk"}, {"density", spec.topk_density}};
      if (spec.topk_momentum > 0) object["momentum"] = spec.topk_momentum;
      return object;
    }
    case GradCompression::kPowerSgd:
      return {{"kind", "powersgd"}, {"rank", spec.powersgd_rank}};
    default:
      return GradCompressionName(spec.kind);
  }
}

json PlanToJson(const Plan& plan) {
  json stages = json::array();
  for (const StagePlan& stage : plan.stages) {
    const StageConfig& c = stage.config;
    stages.push_back({{"first_layer", stage.first_layer},
                      {"last_layer", stage.last_layer},
                      {"mesh", {c.mesh_nodes, c.mesh_gpus_per_node}},
                      {"data_parallel", c.data_parallel},
                      {"tensor_parallel", c.tensor_parallel},
                      {"zero_stage", c.zero_stage},
                      {"recompute", RecomputeName(c.recompute)},
                      {"grad_compression", CompressionToJson(c.grad_compression)},
                      {"node_group", c.node_group}});
  }
  json out = {{"schema", "stratos.plan/2"},
              {"global_batch_size", plan.global_batch_size},
              {"num_microbatches", plan.num_microbatches},
              {"schedule", ScheduleName(plan.schedule)},
              {"stages", stages}};
  if (plan.virtual_stages > 1) out["virtual_stages"] = plan.virtual_stages;
  return out;
}

CompressionSpec CompressionFromJson(const json& j, const std::string& where,
                                    const std::string& key) {
  CompressionSpec spec;
  if (j.is_string()) {
    spec.kind = ParseGradCompression(j.get<std::string>(), where, key);
  } else if (j.is_object()) {
    JsonObjectReader object(j, where, key);
    spec.kind = ParseGradCompression(object.String("kind"), where, object.Key("kind"));
    if (spec.kind == GradCompression::kTopK) {
      if (object.Has("density")) spec.topk_density = object.Double("density");
      if (object.Has("momentum")) spec.topk_momentum = object.Double("momentum");
    }
    if (spec.kind == GradCompression::kPowerSgd && object.Has("rank"))
      spec.powersgd_rank = object.Int("rank");
    object.RejectUnknown();
  } else {
    ThrowInputError(where, key, j.dump(),
                    "must be a name (\"none\", \"bf16\", ...) or an object {\"kind\": ...}");
  }
  const std::string rule = CheckCompressionSpec(spec);
  if (!rule.empty()) ThrowInputError(where, key, j.dump(), rule);
  return spec;
}

Plan PlanFromJson(const json& j, const std::string& where) {
  JsonObjectReader top(j, where, "");
  const std::string schema = top.String("schema");
  // Version 2 added each stage's node_group; version 1 files are still read (group 0).
  if (schema != "stratos.plan/2" && schema != "stratos.plan/1")
    ThrowInputError(where, "schema", fmt::format("\"{}\"", schema),
                    "must be \"stratos.plan/2\" (or the older \"stratos.plan/1\")");
  const bool has_groups = schema == "stratos.plan/2";
  Plan plan;
  plan.global_batch_size = top.Int("global_batch_size");
  plan.num_microbatches = top.Int("num_microbatches");
  plan.schedule = ParseSchedule(top.String("schedule"), where);
  if (top.Has("virtual_stages")) plan.virtual_stages = top.Int("virtual_stages");
  const json& stages = top.Get("stages");
  if (!stages.is_array()) ThrowInputError(where, "stages", stages.dump(), "must be an array");
  for (size_t s = 0; s < stages.size(); ++s) {
    JsonObjectReader stage(stages[s], where, fmt::format("stages[{}]", s));
    StagePlan sp;
    sp.first_layer = stage.Int("first_layer");
    sp.last_layer = stage.Int("last_layer");
    const json& mesh = stage.Get("mesh");
    if (!mesh.is_array() || mesh.size() != 2)
      ThrowInputError(where, stage.Key("mesh"), mesh.dump(),
                      "must be [nodes, gpus_per_node], two integers");
    sp.config.mesh_nodes = JsonNumber<int>(mesh[0], where, stage.Key("mesh[0]"));
    sp.config.mesh_gpus_per_node = JsonNumber<int>(mesh[1], where, stage.Key("mesh[1]"));
    sp.config.data_parallel = stage.Int("data_parallel");
    sp.config.tensor_parallel = stage.Int("tensor_parallel");
    sp.config.zero_stage = stage.Int("zero_stage");
    sp.config.recompute = ParseRecompute(stage.String("recompute"), where + ": " + stage.Key(""));
    if (stage.Has("grad_compression"))
      sp.config.grad_compression =
          CompressionFromJson(stage.Get("grad_compression"), where, stage.Key("grad_compression"));
    if (has_groups && stage.Has("node_group")) sp.config.node_group = stage.Int("node_group");
    stage.RejectUnknown();
    plan.stages.push_back(sp);
  }
  // "estimate" and "problem" are informative sections written beside the plan.
  top.RejectUnknown({"estimate", "problem", "algorithm"});
  return plan;
}

Plan ReadPlanFile(const std::string& path) {
  return PlanFromJson(ReadJsonInputFile(path, "plan file"), path);
}

}  // namespace stratos
