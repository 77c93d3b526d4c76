#pragma once
// Builds a Problem from the command line's --model / --cluster / --nodes / --global-batch ...
#include <string>

#include "costmodel/problem.h"

namespace CLI {
class App;
}  // namespace CLI

namespace stratos {

struct ProblemArgs {
  std::string model = "gpt3-6.7b";        // zoo name or file (.toml, HF config.json)
  std::string cluster = "dgx-a100-80gb";  // zoo name or file (.toml)
  // Nodes: "N" for the first node group, or per group "a100=4,v100=8"; empty: as in the file.
  std::string nodes = "";
  int global_batch_size = 512;
  int seq_length = 0;                     // 0: the model's
  std::string schedule = "1f1b";
  double dp_overlap = 0.0;                // share of DP sync hidden behind backward
  double dp_bucket_mib = 0.0;             // DP gradient bucket, MiB; 0: no buckets
  std::string zero3_gather = "tensor";    // TrainingSpec::zero3_gather (ParseZero3Gather)
};

// Adds --model, --cluster, --nodes, --global-batch, --seq-length, --schedule, --dp-overlap,
// --dp-bucket-mb and --zero3-gather to `command`, bound to `args`, each value checked while parsing
// (experiments/cli_rules.h).
void AddProblemFlags(CLI::App* command, ProblemArgs& args);
// Adds --dp-bucket-mb alone (commands that take the rest of the problem elsewhere).
void AddDpBucketFlag(CLI::App* command, ProblemArgs& args);
// TrainingSpec::dp_overlap_fraction and dp_bucket_bytes (MiB x 2^20) from `args`.
void SetDpOverlap(const ProblemArgs& args, TrainingSpec* training);

// Throws InputError naming the file for a bad model or cluster file, or the rule a value breaks.
Problem LoadProblem(const ProblemArgs& args);

}  // namespace stratos
