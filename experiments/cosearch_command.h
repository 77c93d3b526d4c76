#pragma once
// `stratos cosearch` (issue 5): the bilevel co-search of per-stage gradient compression against
// real training of a proxy model, then the comparison of the co-searched plan with fixed plans
// by validation loss against simulated wall-clock time.
#include <string>
#include <vector>

#include "experiments/problem_loader.h"

namespace stratos {

struct CoSearchArgs {
  // The target problem whose iteration time is predicted, communication-bound by default: GPT-2
  // trained data-parallel (DDP) on 8 p3.8xlarge nodes (32 V100, 10 Gb/s between nodes: AMP's
  // p3.8xlarge bandwidths), where the gradient all-reduce is most of the iteration.
  ProblemArgs target = {"gpt2", "p3.8xlarge", "8", 512};
  // The target's plan whose stages choose a compression: "relax" (its throughput-only plan
  // without compression), "data-parallel" (one stage over every device, DDP-style; on several
  // node groups, one stage per group, data parallel inside it) or a plan file.
  std::string base_plan = "data-parallel";
  std::string proxy_model = "gpt-tiny";
  // Gradient compression options of every stage (DESIGN.md §1), a comma list starting with none.
  std::string grad_compressions = "none,bf16,powersgd(rank=1),powersgd(rank=4),topk,terngrad,sign";
  int search_steps = 250;
  int warmup_steps = 50;
  // Global batch options: the proxy's sequences per step; batch_size (one of them) corresponds to
  // the target's global batch, the others to the target batch in the same ratio.
  std::vector<int> batch_sizes = {4, 8, 16};
  int batch_size = 8;
  int dp_replicas = 2;              // data-parallel replicas of the proxy (Gloo ranks in-process)
  double learning_rate = 1e-3;
  double alpha_learning_rate = 0.05;
  std::string lambda = "auto";      // "auto" or a number >= 0
  bool first_order = false;
  int eval_steps = 500;             // retraining steps of the no-compression plan (the others:
                                    // as many as fit in its simulated time)
  int eval_every = 50;
  int eval_windows = 128;
  double target_loss = 0;           // 0: the no-compression plan's loss at 3/4 of its budget
                                    // (the flag takes > 0)
  int seed = 1234;
  int threads = 0;                  // 0: this machine's hardware threads (the flag takes >= 1)
  std::string output_dir = "out/cosearch";
  int checkpoint_every = 100;
  bool resume = false;
  bool progress = true;
};

// Finds the base plan of the target problem (see base_plan) and its copies at each global batch
// option, co-searches the global batch and the per-stage compression, retrains the proxy from
// scratch with the co-searched plan and with three fixed plans (no compression and the smallest
// messages at the reference batch; the throughput-only choice, the fewest predicted seconds per
// sample over batches and compressions) and, where the co-search changed the batch, with each of
// its two choices alone, and prints the table of simulated time to the target loss. Writes
// DIR/summary.json, DIR/curves.csv (plan, step, simulated_seconds, validation_loss,
// global_batch), DIR/alpha.csv, DIR/loss_vs_time.png and checkpoints in DIR/checkpoint.
// Returns 0, or 1 if the target problem has no feasible plan. Throws InputError for bad input
// (naming the flag: e.g. a batch option that does not fit the target or is not a whole multiple).
int RunCoSearch(const CoSearchArgs& args);

}  // namespace stratos
