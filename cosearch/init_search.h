#pragma once
// Parallel random initialization (issue "training-side search", part 1; the pipeDejavu notes'
// third idea): K initializations of the runtime's GPT (runtime/gpt.h) -- seeds and schemes --
// train side by side on the same batches; successive halving (cosearch/successive_halving.h)
// stops the worse ones once the steep initial drop of the validation loss is over, and the
// survivor trains on to the step budget.
//
// Every candidate is a whole model in this process (a stage of every layer, a TP group of one)
// with its own Adam (torch::optim::Adam, the runtime's betas and epsilon, no weight decay). The
// batch of step t is the same for every candidate (CharDataset::TrainBatch(data_seed, t)), so
// candidates differ only in how they start. A run of one candidate is the plain single run.
//
// Checkpoints hold the losses so far and the parameters and optimizer state of the live
// candidates; a resumed search replays the recorded losses through the same halving decisions
// and continues bitwise as the uninterrupted one (same LibTorch thread count).
#include <torch/torch.h>

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "cosearch/successive_halving.h"
#include "runtime/gpt.h"

namespace stratos {

struct InitCandidate {
  InitScheme scheme = InitScheme::kGpt2;
  uint64_t seed = 0;  // parameters (GptStage's seed)
  std::string Label() const;  // e.g. "xavier/seed 17"
};

// K candidates: candidate i has scheme schemes[i mod |schemes|] and a seed drawn from
// (seed, i) (distinct per candidate). Candidate 0 is the first scheme's.
// Throws InputError ("init-search.candidates", ...) for k < 1 or no schemes.
std::vector<InitCandidate> MakeInitCandidates(int k, const std::vector<InitScheme>& schemes,
                                              uint64_t seed);

struct InitSearchOptions {
  std::string model = "gpt-tiny";  // runtime model: zoo name or file
  std::string data_path;           // "": tinyshakespeare (DefaultDataPath())
  int batch_size = 8;              // sequences per step
  double learning_rate = 1e-3;     // Adam
  uint64_t data_seed = 1234;       // the batches of every candidate
  int validation_windows = 64;     // fixed validation windows of every evaluation
  std::vector<InitCandidate> candidates;
  HalvingOptions halving;
  // Checkpoints: after every checkpoint_every-th round of evaluation_steps (0: never) into
  // checkpoint_dir/init_search.pt, written under a temporary name and renamed.
  std::string checkpoint_dir;
  int checkpoint_every = 10;
  bool resume = false;  // continue from checkpoint_dir's checkpoint if there is one

  // Throws InputError naming the field ("init-search.batch_size", ...) and the rule.
  void Validate() const;
};

struct InitSearchResult {
  HalvingResult halving;
  int resumed_from_step = 0;  // 0, or the step of the checkpoint the run continued from
  torch::Tensor survivor_parameters;  // the survivor's flat parameters at the end, float32
};

// Runs the search. `after_round` (optional) is SuccessiveHalving's round callback (progress),
// called for replayed rounds too. Throws InputError for bad options, model or data, or a
// checkpoint that belongs to another search (it names the file and the field that differs),
// and std::runtime_error for checkpoint I/O errors.
InitSearchResult RunInitSearch(const InitSearchOptions& options,
                               const HalvingRoundCallback& after_round = nullptr);

}  // namespace stratos
