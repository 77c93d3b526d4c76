#pragma once
// The subcommands of `stratos` (DESIGN.md §10). Each returns the process exit code; bad input
// throws InputError, which main() prints as one line and turns into exit code 2.
#include <string>

#include "experiments/problem_loader.h"

namespace stratos {

struct SearchArgs {
  ProblemArgs problem;
  std::string algorithms = "all";  // comma list or "all"
  double time_limit_seconds = 60;  // per searcher
  int seed = 0;
  int max_stages = 0;              // 0: automatic
  std::string output_dir = "out/search";
  bool progress = true;
};

// `stratos search`: runs the searchers, prints each report and a comparison table, writes
// DIR/summary.json, DIR/plans/<algorithm>.json and DIR/traces/<algorithm>.trace.json.
// Returns 0 if some searcher found a plan, 1 if none did (the reasons are printed).
int RunSearch(const SearchArgs& args);

struct EvaluateArgs {
  ProblemArgs problem;
  std::string plan_file;           // either this ...
  int tensor_parallel = 0;         // ... or a uniform Megatron-style plan
  int pipeline_parallel = 0;
  int data_parallel = 0;
  int micro_batch_size = 0;        // samples per DP replica per microbatch
  int zero_stage = 0;
  std::string recompute = "none";
  std::string grad_compression = "none";  // every stage; costmodel/compression.h
  double topk_density = 0.01;
  double topk_momentum = 0.0;
  int powersgd_rank = 4;
  std::string json_file;           // optional outputs
  std::string trace_file;
};

// `stratos evaluate`: prints the estimate of one plan. Returns 0 if it fits memory, 1 otherwise
// (with a one-line reason naming the stage and the overflow).
int RunEvaluate(const EvaluateArgs& args);

struct BenchArgs {
  std::string output_dir = "out/bench";
  double time_limit_seconds = 900;  // per searcher and rung
  int max_rungs = 0;                // 0: all
  std::string algorithms = "dp,relax";
  std::string cluster = "dgx-a100-80gb";  // zoo name or file; 8 GPUs per node expected
};

// `stratos bench ladder`: DP vs relax (or any searchers) over a ladder of GPT problems
// (24-128 layers, 8-1024 GPUs) on one cluster type: wall seconds, peak memory (of a child process
// per run), each plan's gap to the DP optimum.
// Writes DIR/ladder.csv and DIR/ladder.json.
int RunBenchLadder(const BenchArgs& args);

}  // namespace stratos
