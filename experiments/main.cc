// `stratos`: finds how to parallelize the training of a model on a cluster.
#include <CLI/CLI.hpp>
#include <fmt/format.h>

#include <functional>

#include "costmodel/data_dir.h"
#include "costmodel/error.h"
#include "costmodel/zoo.h"
#include "experiments/commands.h"
#include "experiments/cosearch_command.h"
#include "experiments/experiment_command.h"
#include "experiments/profile_command.h"
#include "experiments/run_commands.h"
#include "experiments/runtime_bench.h"
#include "experiments/searchers.h"
#include "runtime/device_info.h"

namespace {

void AddProblemOptions(CLI::App* command, stratos::ProblemArgs& args) {
  command->add_option("--model", args.model, "zoo model name or file (.toml, HF config.json)")
      ->capture_default_str();
  command->add_option("--cluster", args.cluster, "zoo cluster name or .toml file")
      ->capture_default_str();
  command->add_option("--nodes", args.nodes, "number of nodes (default: as in the cluster file)");
  command->add_option("--global-batch", args.global_batch_size, "global batch size, sequences")
      ->capture_default_str();
  command->add_option("--seq-length", args.seq_length, "sequence length (default: the model's)");
  command->add_option("--schedule", args.schedule, "pipeline schedule: 1f1b | gpipe")
      ->capture_default_str();
  command->add_option("--dp-overlap", args.dp_overlap,
                      "share of the DP gradient sync hidden behind backward, in [0, 1]")
      ->capture_default_str();
}

}  // namespace

int main(int argc, char** argv) {
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
  AddProblemOptions(search_command, search.problem);
  search_command
      ->add_option("--algo", search.algorithms,
                   fmt::format("comma list of {} or all", fmt::join(stratos::SearcherNames(), ",")))
      ->capture_default_str();
  search_command->add_option("--time-limit", search.time_limit_seconds, "seconds per searcher")
      ->capture_default_str();
  search_command->add_option("--seed", search.seed, "random seed")->capture_default_str();
  search_command->add_option("--max-stages", search.max_stages,
                             "most pipeline stages (default: min(layers, devices, 16))");
  search_command
      ->add_option("--grad-compressions", search.grad_compressions,
                   "per-stage gradient compression options, e.g. none,bf16,powersgd (changes the "
                   "math of training; see stratos cosearch)")
      ->capture_default_str();
  search_command->add_option("--output-dir", search.output_dir, "where outputs go")
      ->capture_default_str();
  search_command->add_flag("!--no-progress", search.progress, "no progress lines on stderr");
  search_command->add_option("--option", search.option_assignments,
                             "a searcher option by name, repeatable: relax.iterations=60, "
                             "space.max_stages=8, search.max_evaluations=1000 (list: stratos "
                             "experiment options)");

  stratos::SearchArgs compare;
  compare.output_dir = "out/compare";
  CLI::App* compare_command = app.add_subcommand(
      "compare", "run every searcher on one problem with the same budget; writes anytime.csv");
  AddProblemOptions(compare_command, compare.problem);
  compare_command
      ->add_option("--algos", compare.algorithms,
                   fmt::format("comma list of {} or all", fmt::join(stratos::SearcherNames(), ",")))
      ->capture_default_str();
  compare_command->add_option("--time-limit", compare.time_limit_seconds, "seconds per searcher")
      ->capture_default_str();
  compare_command->add_option("--seed", compare.seed, "random seed")->capture_default_str();
  compare_command->add_option("--max-stages", compare.max_stages, "most pipeline stages");
  compare_command->add_option("--grad-compressions", compare.grad_compressions,
                              "per-stage gradient compression options")
      ->capture_default_str();
  compare_command->add_option("--output-dir", compare.output_dir, "where outputs go")
      ->capture_default_str();
  compare_command->add_flag("!--no-progress", compare.progress, "no progress lines on stderr");
  compare_command->add_option("--option", compare.option_assignments,
                              "a searcher option by name, repeatable (see search --help)");

  stratos::EvaluateArgs evaluate;
  CLI::App* evaluate_command = app.add_subcommand(
      "evaluate", "predict iteration time, memory and MFU of one plan");
  AddProblemOptions(evaluate_command, evaluate.problem);
  CLI::Option* plan_option =
      evaluate_command->add_option("--plan", evaluate.plan_file, "plan JSON (stratos.plan/1)");
  CLI::Option* tp = evaluate_command->add_option("--tp", evaluate.tensor_parallel,
                                                 "tensor-parallel degree (uniform plan)");
  evaluate_command->add_option("--pp", evaluate.pipeline_parallel, "pipeline stages")->needs(tp);
  evaluate_command->add_option("--dp", evaluate.data_parallel, "data-parallel degree")->needs(tp);
  evaluate_command->add_option("--micro-batch", evaluate.micro_batch_size,
                               "samples per DP replica per microbatch")
      ->needs(tp);
  evaluate_command->add_option("--zero", evaluate.zero_stage, "ZeRO stage 0-3")->capture_default_str();
  evaluate_command->add_option("--recompute", evaluate.recompute, "none | selective | full")
      ->capture_default_str();
  evaluate_command->add_option("--grad-compression", evaluate.grad_compression,
                               "DP gradient compression of every stage: none | bf16 | fp16 | "
                               "topk | powersgd | terngrad | sign")
      ->excludes(plan_option)
      ->capture_default_str();
  evaluate_command->add_option("--topk-density", evaluate.topk_density,
                               "topk: fraction of each gradient sent, (0, 1]")
      ->excludes(plan_option)
      ->capture_default_str();
  evaluate_command->add_option("--topk-momentum", evaluate.topk_momentum,
                               "topk: DGC momentum correction, [0, 1)")
      ->excludes(plan_option)
      ->capture_default_str();
  evaluate_command->add_option("--powersgd-rank", evaluate.powersgd_rank,
                               "powersgd: rank of the approximation")
      ->excludes(plan_option)
      ->capture_default_str();
  evaluate_command->add_option("--json", evaluate.json_file, "write the estimate as JSON");
  evaluate_command->add_option("--trace", evaluate.trace_file, "write a Chrome trace");
  plan_option->excludes(tp);

  stratos::BenchArgs bench;
  CLI::App* bench_command = app.add_subcommand("bench", "benchmarks");
  bench_command->require_subcommand(1);
  CLI::App* ladder = bench_command->add_subcommand(
      "ladder", "DP vs relax on GPT problems from 24 layers x 8 GPUs to 128 layers x 1024 GPUs");
  ladder->add_option("--output-dir", bench.output_dir)->capture_default_str();
  ladder->add_option("--time-limit", bench.time_limit_seconds, "seconds per searcher and rung")
      ->capture_default_str();
  ladder->add_option("--rungs", bench.max_rungs, "run only the first N rungs");
  ladder->add_option("--algo", bench.algorithms, "searchers to run")->capture_default_str();
  ladder->add_option("--cluster", bench.cluster, "zoo cluster or file (8 GPUs per node)")
      ->capture_default_str();

  stratos::BenchRuntimeArgs bench_runtime;
  CLI::App* runtime_bench = bench_command->add_subcommand(
      "runtime", "runtime acceptance: measured vs predicted iteration time of 6 plans (MAPE) and "
                 "overhead against plain single-process LibTorch training");
  runtime_bench->add_option("--output-dir", bench_runtime.output_dir)->capture_default_str();
  runtime_bench->add_option("--steps", bench_runtime.steps, "steps per run (first is warm-up)")
      ->capture_default_str();

  stratos::RunArgs run;
  CLI::App* run_command = app.add_subcommand(
      "run", "run a plan on this machine: spawn one worker process per device (Gloo on CPU)");
  stratos::WorkerArgs worker;
  CLI::App* worker_command = app.add_subcommand(
      "worker", "one rank of a run (launched by `stratos run`, torchrun --no-python or srun)");
  for (auto [command, flags] : {std::pair{run_command, &run.flags}, std::pair{worker_command, &worker.flags}}) {
    CLI::Option* plan = command->add_option("--plan", flags->plan_file, "plan JSON (stratos.plan/1)");
    command->add_option("--pp", flags->pipeline_parallel, "pipeline stages (uniform plan)")->excludes(plan);
    command->add_option("--dp", flags->data_parallel, "data-parallel degree (uniform plan)")->excludes(plan);
    command->add_option("--tp", flags->tensor_parallel, "tensor-parallel degree (uniform plan)")->excludes(plan);
    command->add_option("--micro-batch", flags->micro_batch_size, "samples per DP replica per microbatch")->excludes(plan);
    command->add_option("--global-batch", flags->global_batch_size, "sequences per step (uniform plan)")->excludes(plan)->capture_default_str();
    command->add_option("--schedule", flags->schedule, "1f1b | gpipe (uniform plan)")->excludes(plan)->capture_default_str();
    command->add_option("--zero", flags->zero_stage, "ZeRO stage 0 | 1 (uniform plan)")->excludes(plan)->capture_default_str();
    command->add_option("--recompute", flags->recompute, "none | selective | full (uniform plan)")->excludes(plan)->capture_default_str();
    command->add_option("--grad-compression", flags->grad_compression, "DP gradient compression of every stage: none | bf16 | fp16 | topk | powersgd | terngrad | sign (uniform plan)")->excludes(plan)->capture_default_str();
    command->add_option("--topk-density", flags->topk_density, "topk: fraction of each gradient sent, (0, 1]")->excludes(plan)->capture_default_str();
    command->add_option("--topk-momentum", flags->topk_momentum, "topk: DGC momentum correction, [0, 1); 0 = plain error feedback")->excludes(plan)->capture_default_str();
    command->add_option("--powersgd-rank", flags->powersgd_rank, "powersgd: rank of the approximation")->excludes(plan)->capture_default_str();
    command->add_option("--model", flags->model, "gpt-tiny, zoo model or model file")->capture_default_str();
    command->add_option("--seq-length", flags->seq_length, "sequence length (default: the model's)");
    command->add_option("--steps", flags->steps, "optimizer steps")->capture_default_str();
    command->add_option("--lr", flags->learning_rate, "Adam learning rate")->capture_default_str();
    command->add_option("--seed", flags->seed, "seed of weights and batches")->capture_default_str();
    command->add_option("--data", flags->data_path, "text file (default: tinyshakespeare)");
    command->add_option("--output-dir", flags->output_dir, "measurement, trace, reports")->capture_default_str();
    command->add_option("--checkpoint-dir", flags->checkpoint_dir, "where checkpoints go");
    command->add_option("--checkpoint-every", flags->checkpoint_every, "steps between checkpoints (0: at the end)");
    command->add_flag("--resume", flags->resume, "continue from the latest checkpoint");
    command->add_option("--timeout", flags->timeout_seconds, "c10d timeout, seconds")->capture_default_str();
    command->add_option("--backend", flags->backend, "gloo | nccl | auto")->capture_default_str();
    command->add_option("--threads", flags->threads, "intra-op threads per worker")->capture_default_str();
  }
  run_command->add_option("--nproc", run.nproc, "worker processes (default: the plan's devices)");
  run_command->add_option("--deadline", run.deadline_seconds, "kill workers after this many seconds")->capture_default_str();
  worker_command->add_option("--config", worker.config_file, "run_options.json written by `stratos run`");

  stratos::ProfileArgs profile;
  CLI::App* profile_command = app.add_subcommand(
      "profile", "measure GEMMs, transformer blocks and collectives on this machine (profile database)");
  profile_command->add_option("--output-dir", profile.output_dir)->capture_default_str();
  profile_command->add_option("--device", profile.device, "cpu | cuda")->capture_default_str();
  profile_command->add_option("--dtype", profile.dtype, "f32 | bf16 | f16 (bf16, f16: cuda)")->capture_default_str();
  profile_command->add_option("--parts", profile.parts, "comma list of matmul, layer, collective")->capture_default_str();
  profile_command->add_option("--nproc", profile.nproc, "worker processes of the collective sweep")->capture_default_str();
  profile_command->add_option("--repeats", profile.repeats, "timed runs per point (median)")->capture_default_str();
  profile_command->add_option("--threads", profile.threads, "intra-op threads per process")->capture_default_str();
  profile_command->add_option("--timeout", profile.timeout_seconds, "c10d timeout, seconds")->capture_default_str();
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
  cosearch_command->add_option("--global-batch", cosearch.target.global_batch_size, "target global batch")->capture_default_str();
  cosearch_command->add_option("--proxy-model", cosearch.proxy_model, "model trained for real (gpt-tiny or a model file)")->capture_default_str();
  cosearch_command->add_option("--compressions", cosearch.compressions, "options per stage (first: none)")->capture_default_str();
  cosearch_command->add_option("--search-steps", cosearch.search_steps, "co-search steps")->capture_default_str();
  cosearch_command->add_option("--warmup-steps", cosearch.warmup_steps, "steps before alpha moves")->capture_default_str();
  cosearch_command->add_option("--batch-size", cosearch.batch_size, "proxy sequences per step")->capture_default_str();
  cosearch_command->add_option("--lr", cosearch.learning_rate, "proxy Adam learning rate")->capture_default_str();
  cosearch_command->add_option("--alpha-lr", cosearch.alpha_learning_rate, "Adam learning rate on alpha")->capture_default_str();
  cosearch_command->add_option("--lambda", cosearch.lambda, "weight of predicted time: auto or a number")->capture_default_str();
  cosearch_command->add_flag("--first-order", cosearch.first_order, "validation gradient at theta, not at the look-ahead");
  cosearch_command->add_option("--eval-steps", cosearch.eval_steps, "retraining steps per compared plan")->capture_default_str();
  cosearch_command->add_option("--eval-every", cosearch.eval_every, "steps between validation losses")->capture_default_str();
  cosearch_command->add_option("--eval-windows", cosearch.eval_windows, "validation windows of the curves")->capture_default_str();
  cosearch_command->add_option("--target-loss", cosearch.target_loss, "target validation loss (0: automatic)");
  cosearch_command->add_option("--seed", cosearch.seed)->capture_default_str();
  cosearch_command->add_option("--threads", cosearch.threads, "intra-op threads")->capture_default_str();
  cosearch_command->add_option("--output-dir", cosearch.output_dir)->capture_default_str();
  cosearch_command->add_option("--checkpoint-every", cosearch.checkpoint_every, "steps between checkpoints (0: none)")->capture_default_str();
  cosearch_command->add_flag("--resume", cosearch.resume, "continue from OUTPUT_DIR/checkpoint");
  cosearch_command->add_flag("!--no-progress", cosearch.progress, "no progress lines");

  // `stratos experiment run | report | options` (experiments/experiment_command.cc).
  stratos::ExperimentCommands experiment;
  stratos::AddExperimentCommands(app, experiment);

  CLI::App* version = app.add_subcommand(
      "version", "print versions, what LibTorch can run on and the data directory");

  // The footer of every help page, computed when printed (after --data-dir is read).
  const std::function<std::string()> footer = [] {
    try {
      return fmt::format("zoo models: {}\nzoo clusters: {}", fmt::join(stratos::ZooModels(), ", "),
                         fmt::join(stratos::ZooClusters(), ", "));
    } catch (const stratos::InputError& e) {
      return fmt::format("zoo: unavailable ({})", e.what());
    }
  };
  std::function<void(CLI::App*)> set_footer = [&](CLI::App* command) {
    command->footer(footer);
    for (CLI::App* sub : command->get_subcommands(std::function<bool(CLI::App*)>{})) set_footer(sub);
  };
  set_footer(&app);

  try {
    try {
      app.parse(argc, argv);  // --data-dir throws InputError for a directory that is not one
    } catch (const CLI::ParseError& e) {
      return app.exit(e);
    }
    if (*search_command) return stratos::RunSearch(search);
    if (*compare_command) return stratos::RunSearch(compare);
    if (*evaluate_command) {
      if (evaluate.plan_file.empty() && evaluate.tensor_parallel == 0)
        throw stratos::InputError("command line: evaluate needs --plan FILE or --tp/--pp/--dp/--micro-batch");
      return stratos::RunEvaluate(evaluate);
    }
    if (*ladder) return stratos::RunBenchLadder(bench);
    if (*runtime_bench) return stratos::RunBenchRuntime(bench_runtime);
    if (*profile_command) return stratos::RunProfile(profile);
    if (*cosearch_command) return stratos::RunCoSearch(cosearch);
    if (*run_command) return stratos::RunRun(run);
    if (*worker_command) return stratos::RunWorker(worker);
    if (const std::optional<int> code = stratos::RunCalibrationCommands(calibration)) return *code;
    if (const std::optional<int> code = stratos::RunExperimentCommands(experiment)) return *code;
    if (*validate_command) return stratos::RunValidate(validate);
    if (*version) {
      const stratos::RuntimeInfo info = stratos::QueryRuntimeInfo();
      fmt::print("stratos 0.1\nLibTorch {} (CUDA: {}, {} devices; Gloo: {})\ndata directory: {}\n",
                 info.torch_version, info.cuda_available ? "yes" : "no", info.cuda_device_count,
                 info.gloo_available ? "yes" : "no", stratos::DataDir());
      return 0;
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
