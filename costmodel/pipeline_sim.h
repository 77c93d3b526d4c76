#pragma once
// Event-level simulator of GPipe and 1F1B pipeline schedules (Huang et al. NeurIPS'19;
// Narayanan et al. SC'21 §2.2, PipeDream-Flush). Each stage is one executor that runs its
// forward and backward passes in schedule order; a forward of microbatch i on stage s waits for
// that of stage s-1, a backward waits for that of stage s+1. After its last backward a stage runs
// its tail (exposed DP sync, optimizer step). Point-to-point time is part of each pass.
//
// On uniform stages both schedules take (m + p - 1)(f + b), the closed form
// sum_s t_s + (m-1) max_s t_s of cost_model.h.
#include <nlohmann/json_fwd.hpp>

#include <string>
#include <vector>

#include "costmodel/evaluate.h"

namespace stratos {

struct SimStage {
  double forward_seconds = 0;   // one microbatch
  double backward_seconds = 0;  // one microbatch
  double tail_seconds = 0;      // once per iteration, after the last backward
};

struct SimEvent {
  int stage = 0;
  int microbatch = -1;  // -1 for the tail
  char pass = 'F';      // 'F', 'B' or 'T' (tail)
  double start_seconds = 0;
  double end_seconds = 0;
};

struct SimResult {
  double pipeline_seconds = 0;   // end of the last backward over all stages
  double iteration_seconds = 0;  // max over stages of (end of its last backward + its tail)
  std::vector<SimEvent> events;  // in start-time order per stage
  std::vector<double> busy_seconds;  // per stage
};

// Throws InputError if stages is empty or num_microbatches < 1.
SimResult SimulatePipeline(const std::vector<SimStage>& stages, int num_microbatches,
                           Schedule schedule);

// The stages of an Evaluate()d plan: forward = StageTerms::forward_seconds, backward = the rest
// of t_s, tail = e_s.
std::vector<SimStage> SimStagesFromEstimate(const Estimate& estimate);

// Events SimulatePipeline makes: a forward and a backward per stage and microbatch. Commands
// that write traces skip plans with more than kMaxTraceEvents of them (a trace of 2e6 events is
// about 200 MB of JSON; one microbatch per sample of a huge batch would never finish).
constexpr long long kMaxTraceEvents = 2'000'000;
inline long long SimulatedEvents(int num_stages, int num_microbatches) {
  return 2LL * num_stages * num_microbatches;
}

// Chrome trace (chrome://tracing, Perfetto): {"traceEvents": [...]} with one thread per stage,
// times in microseconds. Thread s is named "stage s", followed by " (<stage_notes[s]>)" when
// stage_notes has an entry for it (e.g. the node group and device of a heterogeneous plan).
nlohmann::json ChromeTrace(const SimResult& result, const std::string& process_name,
                           const std::vector<std::string>& stage_notes = {});
// Notes for ChromeTrace from an Evaluate()d plan: "<group> <device>" per stage on a
// heterogeneous cluster, none on a homogeneous one.
std::vector<std::string> StageGroupNotes(const Estimate& estimate);

}  // namespace stratos
