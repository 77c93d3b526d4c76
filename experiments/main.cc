// `stratos`: finds how to parallelize the training of a model on a cluster.
#include <CLI/CLI.hpp>
#include <fmt/format.h>
#include <fmt/ranges.h>

#include <functional>

#include "costmodel/compression.h"
#include "costmodel/data_dir.h"
#include "costmodel/error.h"
#include "costmodel/zoo.h"
#include "experiments/cli_rules.h"
#include "experiments/commands.h"
#include "experiments/cosearch_command.h"
#include "experiments/experiment_command.h"
#include "experiments/init_search_command.h"
#include "experiments/profile_command.h"
#include "experiments/run_commands.h"
#include "experiments/runtime_bench.h"
#include "experiments/searchers.h"
#include "interop/interop.h"
#include "runtime/device.h"
#include "runtime/device_info.h"
#include "runtime/kineto_trace.h"

namespace {

using stratos::cli::IntAtLeast;
using stratos::cli::IntIn;
using stratos::cli::NumberAbove;
using stratos::cli::NumberIn;
using stratos::cli::NumberInterval;
using stratos::cli::OneOf;
using stratos::cli::OutputDirectory;

std::vector<std::string> GradCompressionNames() {
  std::vector<std::string> names;
  for (stratos::GradCompression kind : stratos::AllGradCompressions())
    names.push_back(stratos::GradCompressionName(kind));
  return names;
}

// The flags of a uniform plan's gradient compression (evaluate, run, worker).
void AddCompressionFlags(CLI::App* command, std::string& name, double& topk_density,
                         double& topk_momentum, int& powersgd_rank, const char* suffix,
                         CLI::Option* plan) {
  const std::vector<CLI::Option*> options = {
      command
          ->add_option("--grad-compression", name,
                       std::string("DP gradient compression of every stage") + suffix)
          ->check(OneOf(GradCompressionNames())),
      command->add_option("--topk-density", topk_density, "topk: fraction of each gradient sent")
          ->check(NumberInterval(0, 1, "(0, 1]")),
      command
          ->add_option("--topk-momentum", topk_momentum,
                       "topk: DGC momentum correction; 0 = plain error feedback")
          ->check(NumberInterval(0, 1, "[0, 1)")),
      command->add_option("--powersgd-rank", powersgd_rank, "powersgd: rank of the approximation")
          ->check(IntAtLeast(1))};
  for (CLI::Option* option : options) {
    option->capture_default_str();
    if (plan != nullptr) option->excludes(plan);
  }
}

}  // namespace

int main(int argc, char** argv) {
  stratos::UseSingleThreadedBlas();
  CLI::App app{"stratos: finds how to parallelize the training of a deep-learning model on a "
               "cluster (differentiable search beside Alpa's DP and Megatron-style grid search)"};
  app.require_subcommand(1);
  // Before the subcommand or after it (a flag no subcommand knows falls through to here).
  app.fallthrough();
  app.add_option_function<std::string>(
      "--data-dir", [](const std::string& dir) { stratos::SetDataDir(dir); },
      "data directory: zoo (data/), plot script and specs (experiments/); default: "
      "$STRATOS_DATA_DIR, else <bin>/../share/stratos, else the source tree");

  stratos::SearchArgs search;
  CLI::App* search_command = app.add_subcommand(
      "search", "search a plan with one or more searchers and compare them");
  stratos::AddSearchFlags(search_command, search);
  search_command->add_flag(
      "--run", search.run,
      "then train the best plan the runtime runs here (one worker process per device; "
      "OUTPUT_DIR/run) and print predicted against measured; the search prices the runtime's "
      "fp32 training (e.g. --model gpt-tiny --cluster local)");
  search_command->add_option("--run-steps", search.run_steps, "optimizer steps of --run")
      ->check(stratos::cli::IntAtLeast(2))
      ->capture_default_str();

  stratos::SearchArgs compare;
  compare.output_dir = "out/compare";
  CLI::App* compare_command = app.add_subcommand(
      "compare", "search with the same budget for every searcher (default: all) and write the "
                 "anytime curves (anytime.csv); the flags of search");
  stratos::AddSearchFlags(compare_command, compare);

  stratos::EvaluateArgs evaluate;
  CLI::App* evaluate_command = app.add_subcommand(
      "evaluate", "predict iteration time, memory and MFU of one plan");
  stratos::AddProblemFlags(evaluate_command, evaluate.problem);
  CLI::Option* plan_option =
      evaluate_command->add_option("--plan", evaluate.plan_file, "plan JSON (stratos.plan/2)");
  CLI::Option* tp = evaluate_command
                        ->add_option("--tp", evaluate.tensor_parallel,
                                     "tensor-parallel degree (uniform plan)")
                        ->check(IntAtLeast(1));
  evaluate_command->add_option("--pp", evaluate.pipeline_parallel, "pipeline stages")
      ->check(IntAtLeast(1))
      ->needs(tp);
  evaluate_command->add_option("--dp", evaluate.data_parallel, "data-parallel degree")
      ->check(IntAtLeast(1))
      ->needs(tp);
  evaluate_command
      ->add_option("--micro-batch", evaluate.micro_batch_size,
                   "samples per DP replica per microbatch")
      ->check(IntAtLeast(1))
      ->needs(tp);
  evaluate_command
      ->add_option("--virtual-stages", evaluate.virtual_stages,
                   "model chunks per pipeline rank: > 1 is the interleaved 1F1B schedule "
                   "(Megatron-LM's --num-layers-per-virtual-pipeline-stage L / (pp x v))")
      ->check(IntAtLeast(1))
      ->needs(tp)
      ->capture_default_str();
  evaluate_command->add_option("--zero", evaluate.zero_stage, "ZeRO stage")
      ->check(IntIn(0, 3))
      ->capture_default_str();
  evaluate_command->add_option("--recompute", evaluate.recompute, "activation recomputation")
      ->check(OneOf({"none", "selective", "full"}))
      ->capture_default_str();
  AddCompressionFlags(evaluate_command, evaluate.grad_compression, evaluate.topk_density,
                      evaluate.topk_momentum, evaluate.powersgd_rank, "", plan_option);
  evaluate_command
      ->add_option("--stage-groups", evaluate.stage_groups,
                   "node group of each stage on a heterogeneous cluster, e.g. a100,a100,v100 "
                   "(default: stages fill the groups in the cluster's order)")
      ->needs(tp);
  evaluate_command->add_option("--json", evaluate.json_file, "write the estimate as JSON");
  evaluate_command->add_option("--trace", evaluate.trace_file, "write a Chrome trace");
  plan_option->excludes(tp);

  stratos::BenchArgs bench;
  CLI::App* bench_command = app.add_subcommand("bench", "benchmarks");
  bench_command->require_subcommand(1);
  CLI::App* ladder = bench_command->add_subcommand(
      "ladder", "DP vs relax on GPT problems from 24 layers x 8 GPUs to 128 layers x 1024 GPUs");
  ladder->add_option("--output-dir", bench.output_dir)->check(OutputDirectory())->capture_default_str();
  ladder->add_option("--time-limit", bench.time_limit_seconds, "seconds per searcher and rung")
      ->check(NumberAbove(0))
      ->capture_default_str();
  ladder->add_option("--rungs", bench.max_rungs, "run only the first N rungs (default: all)")
      ->check(IntAtLeast(1));
  stratos::AddAlgorithmFlag(ladder, bench.algorithms);
  ladder->add_option("--cluster", bench.cluster, "zoo cluster or file (8 GPUs per node)")
      ->capture_default_str();

  stratos::BenchRuntimeArgs bench_runtime;
  CLI::App* runtime_bench = bench_command->add_subcommand(
      "runtime", "runtime acceptance: measured vs predicted iteration time of 11 plans (MAPE, Spearman) and "
                 "overhead against plain single-process LibTorch training");
  runtime_bench->add_option("--output-dir", bench_runtime.output_dir)->check(OutputDirectory())->capture_default_str();
  runtime_bench->add_option("--steps", bench_runtime.steps, "steps per run (first is warm-up)")
      ->check(IntAtLeast(2))
      ->capture_default_str();

  stratos::RunArgs run;
  CLI::App* run_command = app.add_subcommand(
      "run", "run a plan on this machine: spawn one worker process per device (Gloo on CPU, NCCL on CUDA)");
  stratos::WorkerArgs worker;
  CLI::App* worker_command = app.add_subcommand(
      "worker", "one rank of a run (launched by `stratos run`, torchrun --no-python or srun)");
  for (auto [command, flags] : {std::pair{run_command, &run.flags}, std::pair{worker_command, &worker.flags}}) {
    CLI::Option* plan = command->add_option("--plan", flags->plan_file, "plan JSON (stratos.plan/2)");
    const auto uniform = [&](CLI::Option* option) {
      return option->excludes(plan)->capture_default_str();
    };
    uniform(command->add_option("--pp", flags->pipeline_parallel, "pipeline stages (uniform plan)")->check(IntAtLeast(1)));
    uniform(command->add_option("--dp", flags->data_parallel, "data-parallel degree (uniform plan)")->check(IntAtLeast(1)));
    uniform(command->add_option("--tp", flags->tensor_parallel, "tensor-parallel degree (uniform plan)")->check(IntAtLeast(1)));
    uniform(command->add_option("--micro-batch", flags->micro_batch_size, "samples per DP replica per microbatch")->check(IntAtLeast(1)));
    uniform(command->add_option("--global-batch", flags->global_batch_size, "sequences per step (uniform plan)")->check(IntAtLeast(1)));
    uniform(command->add_option("--schedule", flags->schedule, "pipeline schedule (uniform plan)")->check(OneOf({"1f1b", "gpipe"})));
    uniform(command->add_option("--virtual-stages", flags->virtual_stages, "model chunks per pipeline rank: > 1 runs the interleaved 1F1B schedule (uniform plan)")->check(IntAtLeast(1)));
    uniform(command->add_option("--zero", flags->zero_stage, "ZeRO stage (uniform plan)")->check(IntIn(0, 3)));
    uniform(command->add_option("--recompute", flags->recompute, "activation recomputation (uniform plan)")->check(OneOf({"none", "selective", "full"})));
    AddCompressionFlags(command, flags->grad_compression, flags->topk_density, flags->topk_momentum,
                        flags->powersgd_rank, " (uniform plan)", plan);
    command->add_option("--model", flags->model, "gpt-tiny, zoo model or model file")->capture_default_str();
    command->add_option("--seq-length", flags->seq_length, "sequence length (default: the model's)")->check(IntAtLeast(1));
    command->add_option("--steps", flags->steps, "optimizer steps")->check(IntAtLeast(1))->capture_default_str();
    command->add_option("--lr", flags->learning_rate, "Adam learning rate")->check(NumberAbove(0))->capture_default_str();
    command->add_option("--seed", flags->seed, "seed of weights and batches")->check(IntAtLeast(0))->capture_default_str();
    command->add_option("--data", flags->data_path, "training text file (default: tinyshakespeare)");
    command->add_option("--output-dir", flags->output_dir, "measurement, trace, reports")->check(OutputDirectory())->capture_default_str();
    command->add_option("--checkpoint-dir", flags->checkpoint_dir, "where checkpoints go");
    command->add_option("--checkpoint-every", flags->checkpoint_every, "steps between checkpoints (0: at the end)")->check(IntAtLeast(0));
    command->add_flag("--resume", flags->resume, "continue from the latest checkpoint");
    command->add_option("--timeout", flags->timeout_seconds, "c10d timeout, seconds")->check(NumberAbove(0))->capture_default_str();
    command->add_option("--backend", flags->backend, "process-group backend (auto: NCCL for cuda, Gloo for cpu)")->check(OneOf({"gloo", "nccl", "auto"}))->capture_default_str();
    command->add_option("--device", flags->device, "where the tensors live (cuda: one GPU per worker)")->check(OneOf({"cpu", "cuda"}))->capture_default_str();
    command->add_option("--dtype", flags->dtype, "f32, or bf16 autocast with fp32 master weights (cuda)")->check(OneOf({"f32", "bf16"}))->capture_default_str();
    command->add_flag("--fp32-residual-connection", flags->fp32_residual_connection, "bf16: keep the residual stream, its layer norms and the activations between stages in fp32 (default: bf16, as Megatron-LM)");
    command->add_option("--cluster", flags->cluster, "cluster description (zoo name or file) to predict on and report MFU against (default: this machine's workers)");
    command->add_option("--kineto-step", flags->kineto_step, "trace this step's operators and GPU kernels with Kineto into OUTPUT_DIR/kineto/")->check(IntAtLeast(0));
    command->add_option("--threads", flags->threads, "intra-op threads per worker")->check(IntAtLeast(1))->capture_default_str();
  }
  run_command->add_option("--nproc", run.nproc, "worker processes (default: the plan's devices)")->check(IntAtLeast(1));
  run_command->add_option("--deadline", run.deadline_seconds, "kill workers after this many seconds")->check(NumberAbove(0))->capture_default_str();
  worker_command->add_option("--config", worker.config_file, "run_options.json written by `stratos run`");
  stratos::RunReportArgs run_report;
  CLI::App* run_report_command = app.add_subcommand(
      "run-report", "re-derive a run's reports from its measurement.json, predicted on another cluster");
  run_report_command->add_option("measurement", run_report.measurement_files, "measurement.json of each run")->required()->check(CLI::ExistingFile);
  run_report_command->add_option("--cluster", run_report.cluster, "predict on this cluster (zoo name or file; default: the run's)");
  run_report_command->add_option("--output-dir", run_report.output_dir)->check(OutputDirectory())->capture_default_str();

  stratos::ProfileArgs profile;
  CLI::App* profile_command = app.add_subcommand(
      "profile", "measure GEMMs, transformer blocks and collectives on this machine (profile database)");
  profile_command->add_option("--output-dir", profile.output_dir)->check(OutputDirectory())->capture_default_str();
  profile_command->add_option("--device", profile.device, "where GEMMs run")->check(OneOf({"cpu", "cuda"}))->capture_default_str();
  profile_command->add_option("--dtype", profile.dtype, "GEMM dtype (bf16, f16: cuda)")->check(OneOf({"f32", "bf16", "f16"}))->capture_default_str();
  profile_command->add_option("--parts", profile.parts, "what to profile, comma list")->delimiter(',')->allow_extra_args(false)->check(OneOf({"matmul", "layer", "collective"}))->capture_default_str();
  profile_command->add_option("--nproc", profile.nproc, "worker processes of the collective sweep")->check(IntAtLeast(2))->capture_default_str();
  profile_command->add_option("--repeats", profile.repeats, "timed runs per point (median)")->check(IntAtLeast(1))->capture_default_str();
  profile_command->add_option("--threads", profile.threads, "intra-op threads per process")->check(IntAtLeast(1))->capture_default_str();
  profile_command->add_option("--timeout", profile.timeout_seconds, "c10d timeout, seconds")->check(NumberAbove(0))->capture_default_str();
  profile_command->add_flag("--quick", profile.quick, "a small grid (seconds, for tests)");
  profile_command->add_flag("--collective-worker", profile.collective_worker, "internal: one rank of the collective sweep")->group("");

  // `stratos validate <report>`: the cost model against published measurements.
  stratos::ValidateArgs validate;
  CLI::App* validate_command = stratos::AddValidateCommand(app, validate);

  // `stratos calibrate`, `stratos validate alpa-comm` (experiments/calibrate_command.cc).
  stratos::CalibrationCommands calibration;
  stratos::AddCalibrationCommands(app, validate_command, calibration);

  stratos::CoSearchArgs cosearch;
  CLI::App* cosearch_command = app.add_subcommand(
      "cosearch", "co-search per-stage gradient compression against real training (bilevel), then "
                  "compare with fixed plans by validation loss vs simulated time");
  cosearch_command->add_option("--model", cosearch.target.model, "target model: zoo name or file")->capture_default_str();
  cosearch_command->add_option("--cluster", cosearch.target.cluster, "target cluster: zoo name or file")->capture_default_str();
  cosearch_command->add_option("--nodes", cosearch.target.nodes, "target nodes")->capture_default_str();
  cosearch_command->add_option("--global-batch", cosearch.target.global_batch_size, "target global batch")->check(IntAtLeast(1))->capture_default_str();
  cosearch_command->add_option("--base-plan", cosearch.base_plan, "the target plan whose stages choose a compression: relax, data-parallel (on several node groups: one stage per group, data parallel inside it) or a plan file")->capture_default_str();
  cosearch_command->add_option("--proxy-model", cosearch.proxy_model, "model trained for real (gpt-tiny or a model file)")->capture_default_str();
  cosearch_command->add_option("--grad-compressions", cosearch.grad_compressions, "gradient compression options per stage, comma list starting with none; parameters as labels print them, e.g. powersgd(rank=1), topk(density=0.1)")->capture_default_str();
  cosearch_command->add_option("--search-steps", cosearch.search_steps, "co-search steps")->check(IntAtLeast(2))->capture_default_str();
  cosearch_command->add_option("--warmup-steps", cosearch.warmup_steps, "steps before alpha moves (< --search-steps)")->check(IntAtLeast(1))->capture_default_str();
  cosearch_command->add_option("--batch-sizes", cosearch.batch_sizes, "global batch options as proxy sequences per step (comma list); --batch-size among them is the target's --global-batch, the others scale it")->delimiter(',')->check(IntAtLeast(1))->capture_default_str();
  cosearch_command->add_option("--batch-size", cosearch.batch_size, "proxy sequences per step that correspond to the target's --global-batch (one of --batch-sizes)")->check(IntAtLeast(1))->capture_default_str();
  cosearch_command->add_option("--dp-replicas", cosearch.dp_replicas, "data-parallel replicas of the proxy, each compressing its own gradient (Gloo ranks in this process)")->check(IntIn(1, 8))->capture_default_str();
  cosearch_command->add_option("--lr", cosearch.learning_rate, "proxy Adam learning rate")->check(NumberAbove(0))->capture_default_str();
  cosearch_command->add_option("--alpha-lr", cosearch.alpha_learning_rate, "Adam learning rate on alpha")->check(NumberAbove(0))->capture_default_str();
  cosearch_command->add_option("--lambda", cosearch.lambda, "weight of predicted time: auto or a number >= 0")->capture_default_str();
  cosearch_command->add_flag("--first-order", cosearch.first_order, "validation gradient at theta, not at the look-ahead");
  cosearch_command->add_option("--eval-steps", cosearch.eval_steps, "retraining steps per compared plan")->check(IntAtLeast(1))->capture_default_str();
  cosearch_command->add_option("--eval-every", cosearch.eval_every, "steps between validation losses")->check(IntAtLeast(1))->capture_default_str();
  cosearch_command->add_option("--eval-windows", cosearch.eval_windows, "validation windows of the curves")->check(IntAtLeast(1))->capture_default_str();
  cosearch_command->add_option("--target-loss", cosearch.target_loss, "target validation loss (default: automatic)")->check(NumberAbove(0));
  cosearch_command->add_option("--seed", cosearch.seed)->check(IntAtLeast(0))->capture_default_str();
  cosearch_command->add_option("--threads", cosearch.threads, "intra-op threads (default: this machine's)")->check(IntAtLeast(1));
  cosearch_command->add_option("--output-dir", cosearch.output_dir)->check(OutputDirectory())->capture_default_str();
  cosearch_command->add_option("--checkpoint-every", cosearch.checkpoint_every, "steps between checkpoints (0: none)")->check(IntAtLeast(0))->capture_default_str();
  cosearch_command->add_flag("--resume", cosearch.resume, "continue from OUTPUT_DIR/checkpoint");
  cosearch_command->add_flag("!--no-progress", cosearch.progress, "no progress lines");

  stratos::InitSearchArgs init;
  CLI::App* init_command = app.add_subcommand(
      "init-search", "parallel random initialization: K initializations trained side by side, "
                     "pruned by successive halving once the steep loss drop is over; compared "
                     "with one default initialization at equal compute over several seeds");
  init_command->add_option("--model", init.model, "runtime model trained for real (gpt-tiny or a model file)")->capture_default_str();
  init_command->add_option("--candidates", init.candidates, "initializations K")->check(IntAtLeast(1))->capture_default_str();
  init_command->add_option("--schemes", init.schemes, "initialization schemes cycled over the candidates: gpt2, normal, xavier, kaiming")->capture_default_str();
  init_command->add_option("--outer-seeds", init.outer_seeds, "repetitions (data order and candidate seeds)")->check(IntAtLeast(1))->capture_default_str();
  init_command->add_option("--seed", init.seed, "first outer seed")->check(IntAtLeast(0))->capture_default_str();
  init_command->add_option("--step-budget", init.step_budget, "steps the survivor trains")->check(IntAtLeast(1))->capture_default_str();
  init_command->add_option("--eta", init.eta, "keep 1/eta of the runs at each rung")->check(IntAtLeast(2))->capture_default_str();
  init_command->add_option("--evaluation-steps", init.evaluation_steps, "steps between validation losses")->check(IntAtLeast(1))->capture_default_str();
  init_command->add_option("--plateau-window", init.plateau_window, "evaluations over which the steep drop must have ended")->check(IntAtLeast(1))->capture_default_str();
  init_command->add_option("--plateau-drop", init.plateau_drop, "relative loss drop per evaluation below which the steep drop is over")->check(NumberInterval(0, 1, "(0, 1)"))->capture_default_str();
  init_command->add_option("--max-first-rung", init.max_first_rung_steps, "the first rung at the latest here (steps)")->check(IntAtLeast(1))->capture_default_str();
  init_command->add_option("--batch-size", init.batch_size, "sequences per step")->check(IntAtLeast(1))->capture_default_str();
  init_command->add_option("--lr", init.learning_rate, "Adam learning rate")->check(NumberAbove(0))->capture_default_str();
  init_command->add_option("--validation-windows", init.validation_windows, "validation windows per evaluation")->check(IntAtLeast(1))->capture_default_str();
  init_command->add_option("--target-loss", init.target_loss, "target validation loss (default: the highest final loss of all compared runs)")->check(NumberAbove(0));
  init_command->add_option("--cluster-model", init.cluster_target.model, "cluster view: target model (zoo name or file)")->capture_default_str();
  init_command->add_option("--cluster", init.cluster_target.cluster, "cluster view: target cluster (zoo name or file, one node group)")->capture_default_str();
  init_command->add_option("--nodes", init.cluster_target.nodes, "cluster view: target nodes")->capture_default_str();
  init_command->add_option("--global-batch", init.cluster_target.global_batch_size, "cluster view: target global batch")->check(IntAtLeast(1))->capture_default_str();
  init_command->add_flag("!--no-cluster-view", init.cluster_view, "skip pricing the search on the target cluster");
  init_command->add_option("--jobs", init.jobs, "outer seeds trained at once (default: this machine's hardware threads)")->check(IntAtLeast(1));
  init_command->add_option("--threads", init.threads, "LibTorch intra-op threads per seed")->check(IntAtLeast(1))->capture_default_str();
  init_command->add_option("--output-dir", init.output_dir)->check(OutputDirectory())->capture_default_str();
  init_command->add_option("--checkpoint-every", init.checkpoint_every, "rounds of --evaluation-steps between checkpoints (0: none)")->check(IntAtLeast(0))->capture_default_str();
  init_command->add_flag("--resume", init.resume, "continue from OUTPUT_DIR's checkpoints and finished seeds");
  init_command->add_flag("!--no-progress", init.progress, "no progress lines");

  stratos::ExportArgs export_args;
  CLI::App* export_command = app.add_subcommand(
      "export", "write what Megatron-LM, DeepSpeed, torchtitan or torch.distributed.pipelining "
                "launch a plan with");
  stratos::AddProblemFlags(export_command, export_args.problem);
  // The plan file carries its global batch and schedule.
  export_command->remove_option(export_command->get_option("--global-batch"));
  export_command->remove_option(export_command->get_option("--schedule"));
  export_command->add_option("--plan", export_args.plan_file, "plan JSON (stratos.plan/2)")
      ->required();
  export_command->add_option("--to", export_args.target, "target runtime")
      ->required()
      ->check(OneOf(stratos::TargetNames()));
  export_command->add_option("--output", export_args.output_dir, "output directory")
      ->check(OutputDirectory())
      ->capture_default_str();
  export_command->add_flag("--nearest", export_args.nearest,
                           "export the nearest plan the target runs instead of refusing");
  export_command->add_option("--plan-output", export_args.plan_output,
                             "also write the exported plan (stratos.plan/2)");

  stratos::ImportArgs import_args;
  CLI::App* import_command = app.add_subcommand(
      "import", "read a Megatron-LM, DeepSpeed or torchtitan configuration into a plan and "
                "evaluate it (with --search: beside the best plan found)");
  import_command->add_option("--from", import_args.from, "configuration kind")
      ->required()
      ->check(OneOf({"megatron", "deepspeed", "torchtitan"}));
  import_command
      ->add_option("file", import_args.file,
                   "megatron: launch script or argument list; deepspeed: engine JSON or launch "
                   "script; torchtitan: job TOML")
      ->required();
  import_command->add_option("--model", import_args.problem.model,
                             "zoo model or file (default: the configuration's shape)");
  import_command->add_option("--cluster", import_args.problem.cluster, "zoo cluster or file")
      ->capture_default_str();
  import_command
      ->add_option("--nodes", import_args.problem.nodes,
                   "nodes (default: the configuration's launcher flags, else the cluster's)");
  import_command->add_option("--seq-length", import_args.problem.seq_length, "sequence length")
      ->check(IntAtLeast(1));
  import_command->add_option("--dp-overlap", import_args.problem.dp_overlap,
                             "share of the DP gradient sync hidden behind backward")
      ->check(NumberIn(0, 1))
      ->capture_default_str();
  AddDpBucketFlag(import_command, import_args.problem);
  import_command->get_option("--dp-bucket-mb")
      ->description("reduce the DP gradients in buckets of this many MiB under the backward pass "
                    "(default: as the configuration does, e.g. Megatron-LM's "
                    "--overlap-grad-reduce)");
  import_command->add_flag("--search", import_args.search,
                           "also search the problem and print the best plan beside yours");
  stratos::AddAlgorithmFlag(import_command, import_args.algorithms);
  import_command->add_option("--time-limit", import_args.time_limit_seconds,
                             "seconds per searcher (with --search)")
      ->check(NumberAbove(0))
      ->capture_default_str();
  import_command->add_option("--plan-output", import_args.plan_output,
                             "write the imported plan (stratos.plan/2)");

  // `stratos experiment run | report | options` (experiments/experiment_command.cc).
  stratos::ExperimentCommands experiment;
  stratos::AddExperimentCommands(app, experiment);

  CLI::App* version = app.add_subcommand(
      "version", "print versions, what LibTorch can run on and the data directory");

  // The footer of every help page, computed when printed (after --data-dir is read).
  const std::function<std::string()> footer = [] {
    std::string zoo;
    try {
      zoo = fmt::format("zoo models: {}\nzoo clusters: {}", fmt::join(stratos::ZooModels(), ", "),
                        fmt::join(stratos::ZooClusters(), ", "));
    } catch (const stratos::InputError& e) {
      zoo = fmt::format("zoo: unavailable ({})", e.what());
    }
    return fmt::format("{}\nexit codes: {} success; {} no result (no feasible plan, plan does not "
                       "fit memory, workers failed, experiment stopped early); {} bad input (one "
                       "line names the flag or file, key, value and rule); {} internal error; {} "
                       "every searcher declined the problem",
                       zoo, stratos::kExitSuccess, stratos::kExitNoResult,
                       stratos::kExitInputError, stratos::kExitInternalError,
                       stratos::kExitDeclined);
  };
  std::function<void(CLI::App*)> set_footer = [&](CLI::App* command) {
    command->footer(footer);
    for (CLI::App* sub : command->get_subcommands(std::function<bool(CLI::App*)>{}))
      set_footer(sub);
  };
  set_footer(&app);

  try {
    try {
      app.parse(argc, argv);  // --data-dir throws InputError for a directory that is not one
    } catch (const CLI::ParseError& e) {
      // --help and --help-all print and succeed; every other parse error is bad input.
      if (e.get_exit_code() == static_cast<int>(CLI::ExitCodes::Success)) return app.exit(e);
      throw stratos::InputError("command line: " + stratos::cli::ParseErrorMessage(e));
    }
    if (*search_command) return stratos::RunSearch(search);
    if (*compare_command) return stratos::RunSearch(compare);
    if (*evaluate_command) {
      if (evaluate.plan_file.empty() && evaluate.tensor_parallel == 0)
        throw stratos::InputError("command line: evaluate needs --plan FILE or --tp/--pp/--dp/--micro-batch");
      return stratos::RunEvaluate(evaluate);
    }
    if (*export_command) return stratos::RunExport(export_args);
    if (*import_command) return stratos::RunImport(import_args);
    if (*ladder) return stratos::RunBenchLadder(bench);
    if (*runtime_bench) return stratos::RunBenchRuntime(bench_runtime);
    if (*profile_command) return stratos::RunProfile(profile);
    if (*cosearch_command) return stratos::RunCoSearch(cosearch);
    if (*init_command) return stratos::RunInitSearchCommand(init);
    if (*run_command) return stratos::RunRun(run);
    if (*worker_command) return stratos::RunWorker(worker);
    if (*run_report_command) return stratos::RunRunReport(run_report);
    if (const std::optional<int> code = stratos::RunCalibrationCommands(calibration)) return *code;
    if (const std::optional<int> code = stratos::RunExperimentCommands(experiment)) return *code;
    if (*validate_command) return stratos::RunValidate(validate);
    if (*version) {
      const stratos::RuntimeInfo info = stratos::QueryRuntimeInfo();
      fmt::print("stratos 0.1\nLibTorch {} (CUDA: {}, {} devices; Gloo: {}; NCCL: {}; Kineto: {})\n"
                 "data directory: {}\n",
                 info.torch_version, info.cuda_available ? "yes" : "no", info.cuda_device_count,
                 info.gloo_available ? "yes" : "no", info.nccl_available ? "yes" : "no",
                 stratos::KinetoAvailable() ? "yes" : "no", stratos::DataDir());
      return stratos::kExitSuccess;
    }
  } catch (const stratos::InputError& e) {
    fmt::print(stderr, "stratos: error: {}\n", e.what());
    return stratos::kExitInputError;
  } catch (const std::exception& e) {
    fmt::print(stderr, "stratos: internal error: {}\n", e.what());
    return stratos::kExitInternalError;
  }
  return stratos::kExitSuccess;
}
