// torch.distributed.pipelining: the schedule CSV that PipelineScheduleMulti loads (a row per PP
// rank, a cell per action "<stage><F|B><microbatch>"; pytorch torch/distributed/pipelining/
// schedules.py _Action, _load_csv) and the stage-to-rank map with each stage's modules.
#include <fmt/format.h>

#include <nlohmann/json.hpp>

#include "costmodel/schedule.h"
#include "interop/targets.h"

namespace stratos {

std::vector<ExportFile> TorchPipeliningFiles(const Problem& problem, const Plan& plan,
                                             const ParallelLayout& layout) {
  const int p = layout.pipeline_parallel;
  std::string csv;
  for (int rank = 0; rank < p; ++rank) {
    std::string row;
    for (const StageAction& a :
         RankSchedule(plan.schedule, p, layout.virtual_stages, rank, plan.num_microbatches))
      row += fmt::format("{}{}{}{}", row.empty() ? "" : ",", a.stage,
                         a.op.kind == PipelineOp::kForward ? 'F' : 'B', a.op.microbatch);
    csv += row + "\n";
  }
  nlohmann::json stages = nlohmann::json::array();
  const std::vector<std::vector<std::string>> modules = StageModules(layout);
  for (size_t i = 0; i < modules.size(); ++i)
    stages.push_back({{"stage", i}, {"rank", i % p}, {"modules", modules[i]}});
  const char* schedule = layout.virtual_stages > 1 ? "Interleaved1F1B"
                         : plan.schedule == Schedule::kGpipe ? "GPipe"
                                                             : "1F1B";
  nlohmann::json map = {{"model", problem.model.name},
                        {"pipeline_parallel_degree", p},
                        {"virtual_stages", layout.virtual_stages},
                        {"stage_placement", "loop"},
                        {"num_microbatches", plan.num_microbatches},
                        {"microbatch_size", layout.micro_batch_size},
                        {"schedule", schedule},
                        {"schedule_class", "PipelineScheduleMulti"},
                        {"schedule_csv", "pipeline_schedule.csv"},
                        {"stages", stages}};
  if (!layout.placement_note.empty()) map["node_groups"] = layout.placement_note;
  return {{"pipeline_schedule.csv", csv, false}, {"stage_to_rank.json", map.dump(2) + "\n", false}};
}

}  // namespace stratos
