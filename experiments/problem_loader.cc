#include "experiments/problem_loader.h"

#include <limits>

#include <CLI/CLI.hpp>

#include "costmodel/cluster_io.h"
#include "costmodel/error.h"
#include "costmodel/model_io.h"
#include "costmodel/zoo.h"
#include "experiments/cli_rules.h"

namespace stratos {

void AddProblemFlags(CLI::App* command, ProblemArgs& args) {
  command->add_option("--model", args.model, "zoo model name or file (.toml, HF config.json)")
      ->capture_default_str();
  command->add_option("--cluster", args.cluster, "zoo cluster name or .toml file")
      ->capture_default_str();
  command->add_option("--nodes", args.nodes,
                      "number of nodes, or per node group as a100=4,v100=8 (default: as in the "
                      "cluster file)");
  command->add_option("--global-batch", args.global_batch_size, "global batch size, sequences")
      ->check(cli::IntAtLeast(1))
      ->capture_default_str();
  command->add_option("--seq-length", args.seq_length, "sequence length (default: the model's)")
      ->check(cli::IntAtLeast(1));
  command->add_option("--schedule", args.schedule, "pipeline schedule")
      ->check(cli::OneOf({"1f1b", "gpipe"}))
      ->capture_default_str();
  command->add_option("--dp-overlap", args.dp_overlap,
                      "share of the DP gradient sync hidden behind backward")
      ->check(cli::NumberIn(0, 1))
      ->capture_default_str();
  AddDpBucketFlag(command, args);
  command
      ->add_option("--zero3-gather", args.zero3_gather,
                   "ZeRO-3's parameter all-gathers: one per parameter tensor (DeepSpeed), one per "
                   "layer, or one per layer prefetched under the layer before it (PyTorch FSDP, "
                   "torchtitan)")
      ->check(cli::OneOf(Zero3GatherNames()))
      ->capture_default_str();
}

void AddDpBucketFlag(CLI::App* command, ProblemArgs& args) {
  command
      ->add_option("--dp-bucket-mb", args.dp_bucket_mib,
                   "reduce the DP gradients in buckets of this many MiB under the backward pass "
                   "(PyTorch DDP's bucket_cap_mb, 25; Megatron-Core --overlap-grad-reduce); 0: "
                   "after it, --dp-overlap of it hidden")
      ->check(cli::NumberIn(0, std::numeric_limits<double>::infinity()))
      ->capture_default_str();
}

void SetDpOverlap(const ProblemArgs& args, TrainingSpec* training) {
  training->dp_overlap_fraction = args.dp_overlap;
  training->dp_bucket_bytes = args.dp_bucket_mib * 1024.0 * 1024.0;
}

Problem LoadProblem(const ProblemArgs& args) {
  // The flags' values are checked while parsing (AddProblemFlags); the libraries check the rest
  // (ClusterSpec::WithNodeCounts, ReadModelFile, ValidateTrainingSpec).
  Problem problem;
  problem.model = ReadModelFile(ResolveModelPath(args.model), args.seq_length);
  problem.cluster = ReadClusterFile(ResolveClusterPath(args.cluster));
  if (!args.nodes.empty()) problem.cluster = problem.cluster.WithNodeCounts(args.nodes);
  problem.training.global_batch_size = args.global_batch_size;
  problem.training.schedule = ParseSchedule(args.schedule, "command line: --schedule");
  SetDpOverlap(args, &problem.training);
  problem.training.zero3_gather =
      ParseZero3Gather(args.zero3_gather, "command line: --zero3-gather");
  return problem;
}

}  // namespace stratos
