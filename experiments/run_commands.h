#pragma once
// `stratos run` (spawn local workers for a plan) and `stratos worker` (one rank, launched by
// `stratos run`, torchrun or srun) — DESIGN.md §9. Both return the process exit code; bad input
// throws InputError (main() prints it and exits with 2).
#include <string>
#include <vector>

#include "costmodel/compression.h"

namespace stratos {

// What to run: a plan file, or a uniform Megatron-style plan from --pp/--dp/--tp/--micro-batch.
struct RunFlags {
  std::string plan_file;           // stratos.plan/2 JSON; empty: uniform plan from the degrees
  int pipeline_parallel = 1;       // uniform plan only
  int data_parallel = 1;
  int tensor_parallel = 1;
  int micro_batch_size = 1;        // samples per DP replica per microbatch
  int global_batch_size = 8;       // uniform plan only (a plan file carries its own)
  std::string schedule = "1f1b";   // uniform plan only: 1f1b | gpipe
  int virtual_stages = 1;          // uniform plan only: > 1 = interleaved 1F1B
  int zero_stage = 0;              // uniform plan only: 0 - 3
  std::string recompute = "none";  // uniform plan only: none | selective | full
  // Uniform plan only, every stage: none | bf16 | fp16 | topk | powersgd | terngrad | sign
  // (costmodel/compression.h), with top-k's density and momentum and PowerSGD's rank.
  std::string grad_compression = "none";
  double topk_density = 0.01;
  double topk_momentum = 0.0;
  int powersgd_rank = 4;
  std::string model = "gpt-tiny";  // zoo name (gpt-tiny: the runtime model) or model file
  int seq_length = 0;              // 0: the model's
  int steps = 20;
  double learning_rate = 1e-3;
  int seed = 1234;
  std::string data_path;           // empty: tinyshakespeare.txt of the shared data
  std::string output_dir = "out/run";
  std::string checkpoint_dir;      // empty: no checkpoints
  int checkpoint_every = 0;        // steps; 0: at the end only
  bool resume = false;
  double timeout_seconds = 60;     // rendezvous and collectives (c10d timeout)
  std::string backend = "auto";    // gloo | nccl | auto (follows --device)
  std::string device = "cpu";      // cpu | cuda
  std::string dtype = "f32";       // f32 | bf16 (cuda)
  bool fp32_residual_connection = false;  // bf16: fp32 residual stream
  std::string cluster;             // predict on / MFU against this cluster; "": local workers
  int threads = 1;                 // intra-op threads per worker
  int kineto_step = -1;            // >= 0: Kineto trace of that step (runtime/kineto_trace.h)
};

// --grad-compression NAME with --topk-density, --topk-momentum, --powersgd-rank (their ranges are
// checked while parsing); throws InputError "command line: --grad-compression = ..." for an
// unknown name.
CompressionSpec CompressionFromCommandLine(const std::string& name, double topk_density,
                                          double topk_momentum, int powersgd_rank);

struct RunArgs {
  RunFlags flags;
  int nproc = 0;                   // 0: the plan's device count; otherwise must equal it
  double deadline_seconds = 3600;  // workers still running then are killed
};

// Validates the plan against the model and this machine's workers (refused before launch),
// spawns the workers (`stratos worker --config DIR/run_options.json`), waits, prints the loss
// trajectory, iteration time, tokens/s and predicted-vs-measured summary. Returns 0 if every
// worker succeeded, 1 otherwise (the per-rank errors are printed from DIR/errors/).
int RunRun(const RunArgs& args);

struct RunReportArgs {
  std::vector<std::string> measurement_files;  // runs' measurement.json files
  std::string cluster;  // predict on this cluster (zoo name or file); "": each run's own
  std::string output_dir = "out/run-report";
};

// `stratos run-report`: re-derives each run's reports (measurement.json, trace.json,
// predicted_vs_measured.json, into OUTPUT_DIR/<i>/) from its measurement.json, predicted on
// `cluster` — e.g. a cluster calibrated after the runs — and prints per run the measured and
// predicted iteration time, the error and MFU, then the mean absolute percentage error over the
// runs; for runs with device memory measurements (CUDA), the measured and predicted peak memory
// of the stage with the largest one, their MAPE, and the medians of the memory held outside the
// caching allocator and of its overhead over the tensors at the peak (output_dir/summary.json).
// Throws InputError for an unreadable or malformed file.
int RunRunReport(const RunReportArgs& args);

struct WorkerArgs {
  RunFlags flags;
  std::string config_file;  // run_options.json written by `stratos run`; overrides flags
};

// One rank: rendezvous from the torchrun environment (RANK, WORLD_SIZE, LOCAL_RANK,
// MASTER_ADDR, MASTER_PORT; or SLURM_PROCID / SLURM_NTASKS), then training. Returns 0 on
// success, 1 on failure (one line naming the rank and what it was doing on stderr).
int RunWorker(const WorkerArgs& args);

}  // namespace stratos
