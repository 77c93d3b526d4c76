#pragma once
// The runtime's profiler (DESIGN.md §5 calibration, issue 6): measures on this machine's device
// what the cost model's free constants are fitted from — GEMM throughput over shapes, the
// forward and backward time of one transformer block over (hidden, sequence, microbatch, TP
// shard), and collective times over message sizes and group sizes through the runtime's own
// communicator, as the rows of the profile database (calibrate/profile.h) that `stratos profile`
// writes and `stratos calibrate` fits.
//
// Every time is the median of `repeats` timed runs after one untimed warm-up run; on CUDA each
// run is synchronized before the clock is read.
#include <torch/torch.h>

#include <cstdint>
#include <string>
#include <vector>

#include "calibrate/profile.h"
#include "runtime/communicator.h"

namespace stratos {

struct ProfileOptions {
  std::string device = "cpu";  // cpu | cuda
  std::string dtype = "f32";   // f32 | bf16 | f16 (bf16/f16: CUDA only)
  int repeats = 5;             // timed runs per point (median)
  // GEMM (m, n, k) grid: every combination of these sizes.
  std::vector<int64_t> gemm_sizes = {64, 128, 256, 512, 1024};
  // Transformer-block grid: hidden sizes, head dimensions (heads = hidden / head_dim, at least
  // 2), sequence lengths, microbatch sizes and TP shards (1/tp of the heads and ffn columns, one
  // rank's work).
  std::vector<int> layer_hiddens = {64, 128, 256};
  std::vector<int> layer_head_dims = {16, 64};  // 16: gpt-tiny's, the runtime's default model
  std::vector<int> layer_seq_lens = {64, 128};
  std::vector<int> layer_micro_batches = {1, 4};
  std::vector<int> layer_tensor_parallel = {1, 2};
  // Blocks are timed as a stack: the block applied this many times in a row (its output the next
  // input), forward then backward, timed on the device's timeline with no synchronization
  // between blocks, as in training; a row is the stack's time over the count.
  int layer_stack = 1;
  // Collective message sizes, bytes (per rank's buffer).
  std::vector<int64_t> collective_bytes = {1 << 10, 1 << 14, 1 << 17, 1 << 20, 1 << 22};

  // Throws InputError naming the option and the rule.
  void Validate() const;
};

// GEMM throughput over options.gemm_sizes^3 on options.device in options.dtype.
std::vector<MatmulRow> ProfileMatmuls(const ProfileOptions& options);

// One transformer block (runtime/gpt.h's GPT-2 block; on CUDA in f32 or bf16 autocast) of one
// TP rank, per block of a stack of options.layer_stack: forward of a
// (micro_batch, seq_len, hidden) input and backward of its output's sum; forward_flops is the
// cost model's count for that shard (LayerSpec::forward_flops x micro_batch / tensor_parallel).
// Block forward/backward over the layer grid; points whose TP does not divide the heads are
// skipped. Throws InputError for an unsupported device or dtype.
std::vector<LayerRow> ProfileLayers(const ProfileOptions& options);

// Collectives (all_reduce, all_gather, send_recv) on one node of world-size ranks, fp32 buffers
// of options.collective_bytes per rank (all-gather: bytes is the gathered output, as the
// profile database defines it). Times over options.collective_bytes for every group size g that divides the world
// (g >= 2), with world / g groups running at once. Every rank must call it; rows are returned on
// rank 0 (other ranks return an empty vector). Throws CommError if a peer fails.
std::vector<CollectiveRow> ProfileCollectives(const ProfileOptions& options,
                                                 ProcessGroups& groups);

}  // namespace stratos
