#include "costmodel/problem.h"

#include <utility>

#include "costmodel/error.h"
#include "costmodel/stage_config.h"

namespace stratos {

namespace {
constexpr Zero3Gather kZero3Gathers[] = {Zero3Gather::kTensor, Zero3Gather::kLayer,
                                          Zero3Gather::kLayerPrefetch};
}  // namespace

const char* ScheduleName(Schedule schedule) {
  return schedule == Schedule::kGpipe ? "gpipe" : "1f1b";
}

const char* RecomputeName(Recompute recompute) {
  switch (recompute) {
    case Recompute::kNone: return "none";
    case Recompute::kSelective: return "selective";
    default: return "full";
  }
}

const char* Zero3GatherName(Zero3Gather unit) {
  switch (unit) {
    case Zero3Gather::kLayer: return "layer";
    case Zero3Gather::kLayerPrefetch: return "layer-prefetch";
    default: return "tensor";
  }
}

std::vector<std::string> Zero3GatherNames() {
  std::vector<std::string> names;
  for (Zero3Gather unit : kZero3Gathers) names.push_back(Zero3GatherName(unit));
  return names;
}

std::string Zero3GatherRule() {
  const std::vector<std::string> names = Zero3GatherNames();
  std::string rule = "must be ";
  for (size_t i = 0; i < names.size(); ++i) {
    if (i > 0) rule += i + 1 == names.size() ? " or " : ", ";
    rule += fmt::format("\"{}\"", names[i]);
  }
  return rule;
}

Schedule ParseSchedule(const std::string& text, const std::string& where) {
  if (text == "gpipe") return Schedule::kGpipe;
  if (text == "1f1b") return Schedule::kOneFOneB;
  ThrowInputError(where, "schedule", fmt::format("\"{}\"", text), "must be \"1f1b\" or \"gpipe\"");
}

Recompute ParseRecompute(const std::string& text, const std::string& where) {
  if (text == "none") return Recompute::kNone;
  if (text == "selective") return Recompute::kSelective;
  if (text == "full") return Recompute::kFull;
  ThrowInputError(where, "recompute", fmt::format("\"{}\"", text),
                  "must be \"none\", \"selective\" or \"full\"");
}

Zero3Gather ParseZero3Gather(const std::string& text, const std::string& where) {
  for (Zero3Gather unit : kZero3Gathers)
    if (text == Zero3GatherName(unit)) return unit;
  ThrowInputError(where, "zero3_gather", fmt::format("\"{}\"", text), Zero3GatherRule());
}

void ValidateTrainingSpec(const TrainingSpec& training, const std::string& where) {
  if (training.global_batch_size < 1)
    ThrowInputError(where, "training.global_batch_size", training.global_batch_size, "must be >= 1");
  const std::pair<const char*, double> fractions[] = {
      {"training.dp_overlap_fraction", training.dp_overlap_fraction},
      {"training.tp_comm_overlap_fraction", training.tp_comm_overlap_fraction},
      {"training.pp_comm_overlap_fraction", training.pp_comm_overlap_fraction}};
  for (const auto& [key, value] : fractions)
    if (!(value >= 0.0 && value <= 1.0)) ThrowInputError(where, key, value, "must be in [0, 1]");
  if (!(training.buffer_bytes_per_param >= 0.0))
    ThrowInputError(where, "training.buffer_bytes_per_param", training.buffer_bytes_per_param,
                    "must be >= 0");
  if (!(training.grad_buffer_bytes_per_param >= 0.0))
    ThrowInputError(where, "training.grad_buffer_bytes_per_param",
                    training.grad_buffer_bytes_per_param, "must be >= 0");
  if (!(training.tied_embedding_grad_bytes >= 0.0))
    ThrowInputError(where, "training.tied_embedding_grad_bytes",
                    training.tied_embedding_grad_bytes, "must be >= 0");
  if (!(training.loss_transient_bytes_per_logit >= 0.0))
    ThrowInputError(where, "training.loss_transient_bytes_per_logit",
                    training.loss_transient_bytes_per_logit, "must be >= 0");
  if (!(training.dp_bucket_bytes >= 0.0))
    ThrowInputError(where, "training.dp_bucket_bytes", training.dp_bucket_bytes, "must be >= 0");
  if (training.virtual_pipeline_stages < 1)
    ThrowInputError(where, "training.virtual_pipeline_stages", training.virtual_pipeline_stages,
                    "must be >= 1");
}

std::string StageConfig::Label() const {
  std::string label =
      fmt::format("mesh {}x{} dp{} tp{} zero{} recompute={}", mesh_nodes, mesh_gpus_per_node,
                  data_parallel, tensor_parallel, zero_stage, RecomputeName(recompute));
  if (grad_compression.kind != GradCompression::kNone)
    label += " compression=" + grad_compression.Label();
  if (node_group != 0) label += fmt::format(" group={}", node_group);
  return label;
}

}  // namespace stratos
