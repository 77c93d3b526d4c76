#pragma once
// Synthetic problems built in code: the seed's pipeline-partition cases and small random
// problems of the full space, used as regression oracles (DP = exhaustive = relax = ILP).
#include <cstdint>
#include <string>
#include <vector>

#include "costmodel/problem.h"
#include "costmodel/search_space.h"

namespace stratos {

// The seed notebook's problem (../shared/data/seed_pipeline_partition_cases.csv):
// num_layers layers of cost `layer_cost` seconds (forward + backward of one microbatch),
// exactly `num_stages` stages of one device each, a one-time `cut_cost` seconds per stage
// boundary, `num_microbatches` microbatches. Its seed objective
//   (num_microbatches - 1) * max stage cost + sum of cut costs
// equals our pipeline objective minus the constant fill term num_layers * layer_cost, i.e.
//   Estimate::steady_seconds + Estimate::tail_seconds.
struct SeedCase {
  Problem problem;
  SpaceOptions space;  // fixes stage count, one device per stage, the microbatch count
};
SeedCase MakeSeedPartitionCase(int num_layers, int num_stages, int num_microbatches,
                               double layer_cost, double cut_cost);

// One row of ../shared/data/seed_pipeline_partition_cases.csv.
struct SeedCaseRow {
  int num_layers = 0;
  int num_stages = 0;
  int num_microbatches = 0;
  double layer_cost = 0;
  double cut_cost = 0;
  double optimal_cost = 0;       // the seed objective's optimum
  std::vector<int> optimal_split;  // layers per stage of one optimal split
};

// ../shared/data/seed_pipeline_partition_cases.csv, relative to the source tree.
std::string DefaultSeedCasesPath();

// Reads the seed cases. Throws InputError naming the file, the line and the rule for a missing
// file, a wrong header or a malformed row.
std::vector<SeedCaseRow> ReadSeedPartitionCases(const std::string& path = DefaultSeedCasesPath());

// A small random problem of the full space (GPT-like layers of random width on a random
// 1-2 node cluster with tight memory, random batch), small enough for ExhaustiveSearcher.
Problem MakeRandomSmallProblem(std::uint64_t seed);

// A small random problem on a heterogeneous cluster: MakeRandomSmallProblem's model on 2 or 3
// node groups (one node of 1 or 2 GPUs each) whose devices differ in speed and memory, each
// group with its own two network levels, and on about half of them a slow [[group_link]] (10 MB/s
// to 3 GB/s) between the first two. Small enough for ExhaustiveSearcher with at most 3 stages.
Problem MakeRandomSmallHeterogeneousProblem(std::uint64_t seed);

}  // namespace stratos
