#pragma once
// `stratos init-search` (issue "training-side search", part 1): parallel random initialization
// with successive halving (cosearch/init_search.h), compared honestly with one default
// initialization at equal total compute over several outer seeds, and priced on a real cluster.
#include <string>

#include "experiments/problem_loader.h"

namespace stratos {

struct InitSearchArgs {
  std::string model = "gpt-tiny";  // runtime model trained for real
  int candidates = 8;
  std::string schemes = "gpt2,normal,xavier,kaiming";  // cycled over the candidates
  int outer_seeds = 5;
  int seed = 1;                    // outer seeds seed, seed + 1, ...
  int step_budget = 1000;          // steps the survivor trains
  int eta = 2;
  int evaluation_steps = 10;
  int plateau_window = 3;
  double plateau_drop = 0.02;
  int max_first_rung_steps = 200;
  int batch_size = 8;
  double learning_rate = 1e-3;
  int validation_windows = 64;
  double target_loss = 0;          // 0: automatic (the highest final loss of all compared runs)
  // The cluster view: the problem whose plans price "n candidates on N / n devices each".
  ProblemArgs cluster_target = {"gpt3-2.7b", "p3.16xlarge", "16", 512};
  bool cluster_view = true;
  int jobs = 0;                    // outer seeds trained at once; 0: this machine's hardware threads
  int threads = 1;                 // LibTorch intra-op threads (gpt-tiny's GEMMs are too small
                                   // to gain from more)
  std::string output_dir = "out/init-search";
  int checkpoint_every = 10;       // rounds of evaluation_steps between checkpoints; 0: none
  bool resume = false;
  bool progress = true;
};

// For each outer seed (--jobs at once): the search over `candidates` initializations (checkpointed in
// DIR/seed_<s>/search) and the default (gpt2) initialization of its first candidate's seed
// trained alone for as many steps as the whole search spent (DIR/seed_<s>/baseline); a finished
// seed is kept in DIR/seed_<s>/result.json and skipped on --resume. Then the table of compute
// (steps over all runs) to the target validation loss, mean and spread over seeds, the cluster
// view (simulated time on the target cluster), DIR/summary.json, DIR/curves.csv and the plot
// DIR/loss_vs_compute.png. Returns 0. Throws InputError for bad input.
int RunInitSearchCommand(const InitSearchArgs& args);

}  // namespace stratos
