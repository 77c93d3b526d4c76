#include "costmodel/pipeline_sim.h"

#include <algorithm>
#include <nlohmann/json.hpp>

#include "costmodel/error.h"

namespace stratos {

namespace {

struct Op {
  char pass;
  int microbatch;
};

// Per-stage order of passes. GPipe: all forwards, then all backwards. 1F1B: p - s - 1 warm-up
// forwards, then alternate one forward and one backward, then the remaining backwards.
std::vector<Op> StageOrder(Schedule schedule, int p, int s, int m) {
  std::vector<Op> order;
  if (schedule == Schedule::kGpipe) {
    for (int i = 0; i < m; ++i) order.push_back({'F', i});
    for (int i = 0; i < m; ++i) order.push_back({'B', i});
    return order;
  }
  const int warmup = std::min(p - s - 1, m);
  int next_forward = 0, next_backward = 0;
  for (; next_forward < warmup; ++next_forward) order.push_back({'F', next_forward});
  while (next_forward < m) {
    order.push_back({'F', next_forward++});
    order.push_back({'B', next_backward++});
  }
  while (next_backward < m) order.push_back({'B', next_backward++});
  return order;
}

}  // namespace

SimResult SimulatePipeline(const std::vector<SimStage>& stages, int m, Schedule schedule) {
  if (stages.empty()) throw InputError("SimulatePipeline: stages = []: must not be empty");
  if (m < 1) ThrowInputError("SimulatePipeline", "num_microbatches", m, "must be >= 1");
  const int p = static_cast<int>(stages.size());
  const double kUnset = -1.0;
  std::vector<std::vector<double>> forward_end(p, std::vector<double>(m, kUnset));
  std::vector<std::vector<double>> backward_end(p, std::vector<double>(m, kUnset));
  std::vector<std::vector<Op>> orders(p);
  for (int s = 0; s < p; ++s) orders[s] = StageOrder(schedule, p, s, m);
  std::vector<size_t> cursor(p, 0);
  std::vector<double> clock(p, 0.0);
  SimResult result;
  result.busy_seconds.assign(p, 0.0);

  // Repeatedly run, on every stage, the next op of its order whose dependency is done. Every
  // round makes progress: the schedules are deadlock free.
  size_t remaining = 0;
  for (const auto& order : orders) remaining += order.size();
  while (remaining > 0) {
    bool progressed = false;
    for (int s = 0; s < p; ++s) {
      while (cursor[s] < orders[s].size()) {
        const Op op = orders[s][cursor[s]];
        double ready = 0.0;
        if (op.pass == 'F') {
          if (s > 0) ready = forward_end[s - 1][op.microbatch];
        } else {
          const double upstream =
              s + 1 < p ? backward_end[s + 1][op.microbatch] : forward_end[s][op.microbatch];
          const double own_forward = forward_end[s][op.microbatch];
          ready = (upstream == kUnset || own_forward == kUnset) ? kUnset
                                                                 : std::max(upstream, own_forward);
        }
        if (ready == kUnset) break;
        const double start = std::max(clock[s], ready);
        const double duration = op.pass == 'F' ? stages[s].forward_seconds
                                               : stages[s].backward_seconds;
        const double end = start + duration;
        (op.pass == 'F' ? forward_end : backward_end)[s][op.microbatch] = end;
        clock[s] = end;
        result.busy_seconds[s] += duration;
        result.events.push_back({s, op.microbatch, op.pass, start, end});
        ++cursor[s];
        --remaining;
        progressed = true;
      }
    }
    STRATOS_CHECK(progressed, "pipeline schedule deadlocked ({} ops left)", remaining);
  }
  for (int s = 0; s < p; ++s) {
    result.pipeline_seconds = std::max(result.pipeline_seconds, clock[s]);
    const double tail_end = clock[s] + stages[s].tail_seconds;
    if (stages[s].tail_seconds > 0) {
      result.events.push_back({s, -1, 'T', clock[s], tail_end});
      result.busy_seconds[s] += stages[s].tail_seconds;
    }
    result.iteration_seconds = std::max(result.iteration_seconds, tail_end);
  }
  std::stable_sort(result.events.begin(), result.events.end(),
                   [](const SimEvent& a, const SimEvent& b) {
                     return a.stage != b.stage ? a.stage < b.stage
                                               : a.start_seconds < b.start_seconds;
                   });
  return result;
}

std::vector<SimStage> SimStagesFromEstimate(const Estimate& estimate) {
  std::vector<SimStage> stages;
  for (const StageEstimate& se : estimate.stages)
    stages.push_back({se.terms.forward_seconds, se.microbatch_seconds - se.terms.forward_seconds,
                      se.tail_seconds});
  return stages;
}

std::vector<std::string> StageGroupNotes(const Estimate& estimate) {
  std::vector<std::string> notes;
  if (estimate.groups.empty()) return notes;
  for (const StageEstimate& stage : estimate.stages) {
    const GroupUtilization& group = estimate.groups.at(stage.node_group);
    notes.push_back(fmt::format("{} {}", group.name, group.device));
  }
  return notes;
}

nlohmann::json ChromeTrace(const SimResult& result, const std::string& process_name,
                           const std::vector<std::string>& stage_notes) {
  nlohmann::json events = nlohmann::json::array();
  events.push_back({{"name", "process_name"}, {"ph", "M"}, {"pid", 0},
                    {"args", {{"name", process_name}}}});
  int num_stages = 0;
  for (const SimEvent& e : result.events) num_stages = std::max(num_stages, e.stage + 1);
  for (int s = 0; s < num_stages; ++s)
    events.push_back({{"name", "thread_name"}, {"ph", "M"}, {"pid", 0}, {"tid", s},
                      {"args", {{"name", s < static_cast<int>(stage_notes.size())
                                             ? fmt::format("stage {} ({})", s, stage_notes[s])
                                             : fmt::format("stage {}", s)}}}});
  for (const SimEvent& e : result.events) {
    const std::string name = e.pass == 'T' ? "tail (dp sync + optimizer)"
                                           : fmt::format("{}{}", e.pass, e.microbatch);
    events.push_back({{"name", name},
                      {"cat", e.pass == 'F' ? "forward" : e.pass == 'B' ? "backward" : "tail"},
                      {"ph", "X"},
                      {"pid", 0},
                      {"tid", e.stage},
                      {"ts", e.start_seconds * 1e6},
                      {"dur", (e.end_seconds - e.start_seconds) * 1e6}});
  }
  return {{"traceEvents", events}, {"displayTimeUnit", "ms"}};
}

}  // namespace stratos
