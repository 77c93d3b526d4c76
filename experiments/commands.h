#pragma once
// The subcommands of `stratos` (DESIGN.md §10). Each returns the process exit code; bad input
// throws InputError, which main() prints as one line and turns into kExitInputError.
#include <optional>
#include <string>
#include <vector>

#include "experiments/problem_loader.h"

namespace CLI {
class App;
}  // namespace CLI

namespace stratos {

// Exit codes of `stratos` (listed by `stratos --help` and in README.md).
inline constexpr int kExitSuccess = 0;
// The work ran and has no result: no feasible plan, a plan that does not fit memory, workers
// that failed, an experiment run stopped before every cell finished; the reason is printed.
inline constexpr int kExitNoResult = 1;
// Bad input (command line or file): one line on stderr naming the file or flag, the key, the
// value and the rule broken.
inline constexpr int kExitInputError = 2;
// A bug in stratos (a broken invariant or an unexpected exception).
inline constexpr int kExitInternalError = 3;
// Every searcher asked declined the problem (exhaustive search over its plan limit, the ILP
// without CBC): nothing was searched, which says nothing about whether a plan exists.
inline constexpr int kExitDeclined = 4;

struct SearchArgs {
  ProblemArgs problem;
  std::vector<std::string> algorithms = {"all"};  // SearcherNames() or "all" (ExpandAlgorithms)
  double time_limit_seconds = 60;  // per searcher
  double memory_limit_gib = 0;     // per searcher's tables; 0: half the physical memory
  int seed = 0;
  int max_stages = 0;              // 0: automatic (the flag takes >= 1)
  int max_tensor_parallel = 0;     // 0: GPUs per node (the flag takes >= 1)
  std::string virtual_stages = "1";  // comma list: model chunks per rank (space.virtual_stages)
  std::string grad_compressions = "none";  // comma list: per-stage options of the space
  std::string output_dir = "out/search";
  bool progress = true;
  // "name=value" searcher options (--option, repeatable; experiments/searchers.h SearcherSetup).
  std::vector<std::string> option_assignments;
  // --export TARGET: the best plan also exported to DIR/export (interop/interop.h TargetNames).
  std::string export_target;
  // search --run: train the best plan the runtime can run on this machine for run_steps steps
  // (one worker process per device, OUTPUT_DIR/run) and print predicted against measured; the
  // search then prices the runtime's training (RuntimeTraining: fp32 on CPU workers).
  bool run = false;
  int run_steps = 20;
};

// The flags of `search` and `compare`, one spelling for both, bound to `args` (whose values when
// called are the defaults --help shows): the problem (AddProblemFlags), --algo (AddAlgorithmFlag),
// --time-limit, --seed, --max-stages, --grad-compressions, --output-dir, --no-progress, --option.
void AddSearchFlags(CLI::App* command, SearchArgs& args);
// --algo: searcher names or `all`, as a comma list or repeated (--algo relax,dp = --algo relax
// --algo dp); an unknown name is refused while parsing.
void AddAlgorithmFlag(CLI::App* command, std::vector<std::string>& algorithms);

// `stratos search`: runs the searchers, prints each report and a comparison table, writes
// DIR/summary.json, DIR/plans/<algorithm>.json and DIR/traces/<algorithm>.trace.json.
// Returns kExitSuccess if some searcher found a plan, kExitDeclined if every searcher declined
// the problem, kExitNoResult otherwise (the reasons are printed).
int RunSearch(const SearchArgs& args);

struct EvaluateArgs {
  ProblemArgs problem;
  std::string plan_file;           // either this ...
  int tensor_parallel = 0;         // ... or a uniform Megatron-style plan
  int pipeline_parallel = 0;
  int data_parallel = 0;
  int micro_batch_size = 0;        // samples per DP replica per microbatch
  // Model chunks per pipeline rank of the uniform plan: > 1 is the interleaved 1F1B schedule
  // (costmodel/plan.h InterleavePlan of the plain plan).
  int virtual_stages = 1;
  int zero_stage = 0;
  std::string recompute = "none";
  std::string grad_compression = "none";  // every stage; costmodel/compression.h
  double topk_density = 0.01;
  double topk_momentum = 0.0;
  int powersgd_rank = 4;
  // Node group of each stage of the uniform plan, comma-separated names ("a100,a100,v100");
  // empty: stages fill the groups in the cluster's order.
  std::string stage_groups;
  std::string json_file;           // optional outputs
  std::string trace_file;
};

// `stratos evaluate`: prints the estimate of one plan. Returns 0 if it fits memory, 1 otherwise
// (with a one-line reason naming the stage and the overflow).
int RunEvaluate(const EvaluateArgs& args);

// --- plans out and in (experiments/interop_command.cc, interop/interop.h) ---

struct ExportArgs {
  ProblemArgs problem;  // the global batch comes from the plan file
  std::string plan_file;
  std::string target;  // TargetNames()
  std::string output_dir = "out/export";
  bool nearest = false;  // export the nearest plan the target runs instead of refusing
  std::string plan_output;  // optional: the exported plan as stratos.plan/2 JSON
};

// `stratos export`: writes the files `target`'s user launches with into output_dir, as one set
// (an earlier export's files are replaced together; a refused plan leaves them intact). A plan
// the target cannot express throws InputError naming the stage, value and rule, or with
// --nearest is replaced by the nearest plan the target runs (its changes and predicted time
// beside the plan's are printed).
int RunExport(const ExportArgs& args);

struct ImportArgs {
  std::string from;  // megatron | deepspeed | torchtitan
  std::string file;
  // --model: "" takes the shape from the configuration; --cluster, --nodes (empty: from the
  // configuration's torchrun/launcher flags where present, else the cluster file's),
  // --seq-length, --dp-overlap as in search. The global batch and schedule come from the file.
  ProblemArgs problem{"", "dgx-a100-80gb"};
  bool search = false;
  std::vector<std::string> algorithms = {"dp"};
  double time_limit_seconds = 60;
  std::string plan_output;  // optional: the imported plan as stratos.plan/2 JSON
};

// `stratos import`: reads a configuration into a plan, prints its estimate ("your
// configuration: X s/iteration") and, with --search, the best plan the searchers find beside
// it. Returns kExitNoResult if the configuration does not fit memory (without --search) or the
// search finds nothing.
int RunImport(const ImportArgs& args);

struct BenchArgs {
  std::string output_dir = "out/bench";
  double time_limit_seconds = 900;  // per searcher and rung
  int max_rungs = 0;                // 0: all
  std::vector<std::string> algorithms = {"dp", "relax"};
  std::string cluster = "dgx-a100-80gb";  // zoo name or file; 8 GPUs per node expected
};

// `stratos bench ladder`: DP vs relax (or any searchers) over a ladder of GPT problems
// (24-128 layers, 8-1024 GPUs) on one cluster type: wall seconds, peak memory (of a child process
// per run), each plan's gap to the DP optimum.
// Writes DIR/ladder.csv and DIR/ladder.json.
int RunBenchLadder(const BenchArgs& args);

// `stratos validate <report>` (validate_command.cc): the cost model against published
// measurements (validate/validation.h). Prints the report's assumptions, table and headline
// and writes DIR/<report>.json and DIR/<report>.csv. Returns 0 when the report ran, whether or
// not it meets its target (the JSON says).
struct ValidateArgs {
  std::string report;      // set by the chosen subcommand
  std::string output_dir;  // empty: out/validate/<report>
};
// Adds `validate` and one subcommand per report to `app`; returns the `validate` command.
CLI::App* AddValidateCommand(CLI::App& app, ValidateArgs& args);
int RunValidate(const ValidateArgs& args);

// --- calibration (experiments/calibrate_command.cc, experiments/validate_alpa_comm.cc) ---

struct CalibrateArgs {
  std::string profile_dir;  // a profile directory (calibrate/profile.h), or
  std::string alpa_csv;     // an Alpa profile CSV; neither: the shared Alpa V100 profile, or
  // vTrain's single-node A100 runs (validate/vtrain.h): the device's GEMM curve and block curve
  // fitted on every fifth row (what `stratos validate vtrain` fits), nothing else.
  std::string vtrain_csv;
  // Megatron-Core's H100 runs (validate/megatron_h100.h): the device's matmul_efficiency fitted
  // on the smallest and the largest run (what `stratos validate megatron-h100` fits).
  std::string megatron_h100_csv;
  // Base cluster: zoo name or file, or "local": this machine's worker processes as the runtime
  // describes them (LocalCpuCluster), as many as the profile's largest collective mesh, peak =
  // its fastest GEMM of matmul_dtype. "": p3.16xlarge-datasheet, or the datasheet node of the
  // published runs (--vtrain-csv: dgx-a100-80gb-datasheet, --megatron-h100-csv:
  // dgx-h100-datasheet).
  std::string cluster;
  std::string holdout = "none";         // calibrate/calibrate.h ParseHoldout
  int ring_links = -1;                  // -1: the base cluster's
  // GEMM rows of this dtype fit the curve: f16 | bf16 | f32; "": f32 for --cluster local, else
  // f16.
  std::string matmul_dtype;
  std::string name;                     // "": the --save-as name, else <base>-calibrated
  std::string output;                   // "": out/calibrate/cluster.toml unless save_as
  std::string save_as;                  // "": none; else written to UserClusterPath(save_as)
  bool no_layer_curve = false;          // fit no block curve even if the profile has blocks
  bool no_pipelining = false;           // fit no collective pipelining term
  // Fit the T4 on AMP's published layer profile (validate/amp_trials.h AmpCalibratedCluster).
  bool amp_profile = false;
  // A directory of CUDA runs' measurement.json files (`stratos run --device cuda`): the device's
  // memory, the memory outside the allocator and its fragmentation (calibrate/memory_fit.h).
  std::string memory_runs;
  // The same kind of runs taken on another device: only the memory outside the allocator and its
  // fragmentation, the framework's (calibrate/memory_fit.h WithFrameworkMemoryFit).
  std::string framework_memory_runs;
};

// `stratos calibrate`: fits the collective constants and the matmul curve (calibrate/), prints
// the fit table (constants, MAPE on fitted and held-out rows) and writes the calibrated cluster
// file atomically (an earlier file survives a failed run).
int RunCalibrate(const CalibrateArgs& args);

struct ValidateAlpaCommArgs {
  std::string alpa_csv;  // "": the shared Alpa V100 profile
  std::string cluster = "p3.16xlarge-datasheet";  // the base the fit starts from
  int ring_links = 6;    // V100 SXM2 NVLink2 links per GPU (datasheet), not fitted
  std::string output_dir = "out/validate/alpa-comm";
};

// `stratos validate alpa-comm`: validation report 1. Fits on the small meshes (1x2, 1x4) and the
// 2x8 mesh's node-crossing groups of 2, 4 and 8 ranks; predicts the held-out 1x8 mesh and the
// 2x8 mesh's 16-rank groups and node-local groups; matmul curve fitted on GEMMs up to n = 4096,
// predicting larger ones. Prints MAPE per collective overall, per held-out group and per
// message-size range; writes DIR/summary.json, DIR/residuals.csv, DIR/matmul_residuals.csv and
// DIR/calibrated.toml. Returns 0 (the figures are the result, not a pass/fail).
int RunValidateAlpaComm(const ValidateAlpaCommArgs& args);

// The two subcommands above: `calibrate` on `app`, `alpa-comm` under `validate` (the command
// AddValidateCommand returned).
struct CalibrationCommands {
  CLI::App* calibrate = nullptr;
  CLI::App* validate_alpa_comm = nullptr;
  CalibrateArgs calibrate_args;
  ValidateAlpaCommArgs validate_args;
};
void AddCalibrationCommands(CLI::App& app, CLI::App* validate, CalibrationCommands& commands);
// Runs the calibration subcommand that was given and returns its exit code; nullopt if none was.
std::optional<int> RunCalibrationCommands(const CalibrationCommands& commands);

}  // namespace stratos
