#pragma once
// The runtime's trainer: one rank of a run that executes a discrete Plan (DESIGN.md §9), on the
// CPU or on one GPU per rank (TrainOptions::device; runtime/device.h).
//
// Rank layout (Megatron-LM): rank = stage_base + dp_rank * TP + tp_rank, TP innermost; stages
// may differ in DP x TP (activations are resharded at their boundaries). Per step: the global
// batch of B sequences is split into m microbatches of B / m, each split over the DP replicas; the
// stage runs its schedule (GPipe, 1F1B or interleaved 1F1B; runtime/pipeline_step.h), each TP rank
// sending 1/tp of the (b, s, h) activations and their gradients between stages and the TP ranks
// all-gathering them (scatter/gather; runtime/pipeline_layout.h); DP gradients are all-reduced
// (ZeRO-1, 2 and 3: reduce-scattered) in buckets launched from gradient-accumulator hooks during
// the last microbatch's backward (overlapped with it); tied word embeddings split over the first
// and last stage have their gradients all-reduced between them (Megatron-LM); then Adam updates the
// parameters, sharded over DP with ZeRO-1/2/3 (each DP rank updates 1/DP of the flat parameter
// vector with its 1/DP of the Adam moments; ZeRO-1/2 all-gather the result, ZeRO-3 gathers each
// layer's parameters when it runs: runtime/data_parallel.h ParameterGatherer).
// A stage whose plan sets grad_compression (and has DP > 1) compresses each bucket's gradients
// instead, with per-parameter error-feedback state, and exchanges the compressed forms
// (runtime/compression.h: half-precision or PowerSGD all-reduces, top-k / TernGrad / sign
// all-gathers); checkpoints carry that state, so a resumed run continues bitwise.
// The loss of a step is the mean token cross entropy of the global batch.
#include <nlohmann/json.hpp>

#include <cstdint>
#include <string>
#include <vector>

#include "costmodel/cluster.h"
#include "costmodel/plan.h"
#include "costmodel/problem.h"
#include "runtime/communicator.h"
#include "runtime/runtime_plan.h"

namespace stratos {

struct TrainOptions {
  // Zoo name or model file; the default, gpt-tiny, is the zoo's runtime model
  // (data/models/gpt-tiny.toml: 4 blocks, hidden 64, 4 heads, seq 64, vocab 72).
  std::string model = "gpt-tiny";
  int seq_length = 0;  // > 0 overrides the model's
  Plan plan;
  int steps = 20;                // optimizer steps to reach (a resumed run continues to it)
  double learning_rate = 1e-3;   // Adam (Kingma & Ba 2015), no weight decay
  double adam_beta1 = 0.9;
  double adam_beta2 = 0.95;
  double adam_epsilon = 1e-8;
  uint64_t seed = 1234;          // parameters and batches
  std::string data_path;         // "" = tinyshakespeare (DefaultDataPath())
  // DP gradient bucket size and whether backward hooks launch the buckets (the defaults are the
  // ones the cost model prices a run with when its record lacks them: RuntimeGradSync).
  int64_t bucket_bytes = RuntimeGradSync{}.bucket_bytes;
  bool overlap_grad_sync = RuntimeGradSync{}.overlap;
  std::string output_dir;        // measurement.json, trace.json, predicted_vs_measured.json
  std::string checkpoint_dir;    // "" = no checkpoints
  int checkpoint_every = 0;      // steps; 0 = only at the end (when checkpoint_dir is set)
  bool resume = false;           // continue from checkpoint_dir's latest checkpoint
  double timeout_seconds = 60;   // rendezvous and every collective
  std::string backend = "auto";  // gloo | nccl | auto (ResolveBackend: follows `device`)
  // Where the tensors live: cpu, or cuda (rank r on GPU LOCAL_RANK mod the GPU count).
  std::string device = "cpu";
  // f32, or bf16 (CUDA only): bf16 autocast with fp32 master weights, gradients and Adam state
  // (runtime/gpt.h).
  std::string dtype = "f32";
  // bf16 only: keep the residual stream, its layer norms and the activations sent between stages
  // in fp32 (Megatron-LM's --fp32-residual-connection) instead of bf16.
  bool fp32_residual_connection = false;
  // Cluster description (zoo name or file) the measurement is predicted on and whose device's
  // peak FLOP/s MFU is reported against; "": this machine's CPU workers (LocalCpuCluster).
  std::string cluster;
  int threads = 1;               // intra-op threads per worker (LibTorch)
  int trace_steps = 3;           // the last N steps go into the Chrome trace
  // >= 0: step whose operators and kernels Kineto traces into
  // output_dir/kineto/rank_<r>.json (runtime/kineto_trace.h); -1: none.
  int kineto_step = -1;
  // Fault injection for tests: rank fault_rank, at the start of step fault_step, exits
  // ("exit", status 17 without cleanup), hangs ("hang") or throws ("throw").
  int fault_rank = -1;
  int fault_step = -1;
  std::string fault_kind = "exit";

  // Throws InputError naming the field and the rule (steps >= 1, learning_rate > 0, ...).
  void Validate() const;
};

nlohmann::json TrainOptionsToJson(const TrainOptions& options);
// Throws InputError naming `where` for unknown keys and wrong types.
TrainOptions TrainOptionsFromJson(const nlohmann::json& json, const std::string& where);

struct TrainResult {
  int first_step = 0;          // 0, or the step resumed from
  std::vector<double> losses;  // mean training loss of steps first_step .. steps - 1
  nlohmann::json measurement;  // on rank 0: the gathered measurement (see WriteRunReports)
};

// Runs this process's rank of the run to options.steps. All ranks must call it with equal
// options. Throws InputError for a plan it cannot run, CommError when a peer fails or times out
// (the message names this rank, its stage/dp/tp coordinates and what it was doing), and
// std::runtime_error for checkpoint I/O errors. Writes the reports on rank 0 when output_dir
// is set.
TrainResult TrainWorker(const TrainOptions& options, ProcessGroups& groups);

// The entry point of `stratos worker`: rendezvous (torchrun environment or `rendezvous`),
// TrainWorker, and on failure one line "rank R (stage s, dp d, tp t) failed while ...: why" on
// stderr and in output_dir/errors/rank_R.txt. Returns 0 on success, 1 on failure.
int RunWorkerProcess(const TrainOptions& options, const RendezvousOptions& rendezvous);

}  // namespace stratos
