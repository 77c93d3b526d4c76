#pragma once
// Character-level language-model data (tinyshakespeare by default) with a train/validation split
// and deterministic batches: the batch of a step depends only on (seed, step), never on the plan,
// the rank or whether the run was resumed.
#include <torch/torch.h>

#include <cstdint>
#include <string>

namespace stratos {

// The tinyshakespeare text shipped beside the repository (../shared/data/tinyshakespeare.txt).
std::string DefaultDataPath();

class CharDataset {
 public:
  // Reads `path`; the vocabulary is the sorted set of its bytes. The first
  // train_fraction of the tokens is the training split, the rest validation.
  // Throws InputError if the file cannot be read, is shorter than 2 * (seq_length + 1) bytes
  // per split, or train_fraction is not in (0, 1).
  CharDataset(const std::string& path, int seq_length, double train_fraction = 0.9);

  int VocabSize() const { return static_cast<int>(vocab_.size()); }
  int SeqLength() const { return seq_length_; }
  const std::string& Vocabulary() const { return vocab_; }
  int64_t TrainTokens() const { return train_.numel(); }
  int64_t ValidationTokens() const { return validation_.numel(); }

  struct Batch {
    torch::Tensor inputs;   // (batch, seq) int64 token ids
    torch::Tensor targets;  // (batch, seq) int64: inputs shifted by one
  };
  // Samples [first, first + count) of the global batch of `step`: windows starting at offsets
  // drawn uniformly from the training split by a generator seeded with (seed, step).
  Batch TrainBatch(uint64_t seed, int64_t step, int global_batch, int first, int count) const;
  // Fixed validation windows: `count` evenly spaced windows of the validation split.
  Batch ValidationBatch(int count) const;

 private:
  Batch Windows(const torch::Tensor& tokens, const torch::Tensor& starts) const;
  std::string vocab_;
  int seq_length_;
  torch::Tensor train_;       // (n_train,) int64
  torch::Tensor validation_;  // (n_val,) int64
};

}  // namespace stratos
