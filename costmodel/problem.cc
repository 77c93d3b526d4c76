#include "costmodel/problem.h"

#include "costmodel/error.h"
#include "costmodel/stage_config.h"

namespace stratos {

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

std::string StageConfig::Label() const {
  std::string label =
      fmt::format("mesh {}x{} dp{} tp{} zero{} recompute={}", mesh_nodes, mesh_gpus_per_node,
                  data_parallel, tensor_parallel, zero_stage, RecomputeName(recompute));
  if (grad_compression.kind != GradCompression::kNone)
    label += " compression=" + grad_compression.Label();
  return label;
}

}  // namespace stratos
