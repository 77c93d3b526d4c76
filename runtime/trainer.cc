#include "runtime/trainer.h"

#include <fmt/format.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <optional>
#include <thread>

#include "costmodel/atomic_file.h"
#include "costmodel/error.h"
#include "costmodel/json_reader.h"
#include "runtime/checkpoint.h"
#include "runtime/compression.h"
#include "runtime/data_parallel.h"
#include "runtime/data.h"
#include "runtime/device.h"
#include "runtime/gpt.h"
#include "runtime/kineto_trace.h"
#include "runtime/launcher.h"
#include "runtime/pipeline_layout.h"
#include "runtime/pipeline_step.h"
#include "runtime/report.h"

namespace stratos {

using nlohmann::json;
using torch::Tensor;
namespace fs = std::filesystem;

// ---------------------------------------------------------------------------------------------
// Options.

void TrainOptions::Validate() const {
  const std::string where = "run options";
  if (steps < 1) ThrowInputError(where, "steps", steps, "must be >= 1");
  if (!(learning_rate > 0)) ThrowInputError(where, "learning_rate", learning_rate, "must be > 0");
  if (!(adam_beta1 >= 0 && adam_beta1 < 1))
    ThrowInputError(where, "adam_beta1", adam_beta1, "must be in [0, 1)");
  if (!(adam_beta2 >= 0 && adam_beta2 < 1))
    ThrowInputError(where, "adam_beta2", adam_beta2, "must be in [0, 1)");
  if (!(adam_epsilon > 0)) ThrowInputError(where, "adam_epsilon", adam_epsilon, "must be > 0");
  if (bucket_bytes < 1) ThrowInputError(where, "bucket_bytes", bucket_bytes, "must be >= 1");
  if (!(timeout_seconds > 0))
    ThrowInputError(where, "timeout_seconds", timeout_seconds, "must be > 0");
  if (threads < 1) ThrowInputError(where, "threads", threads, "must be >= 1");
  if (checkpoint_every < 0)
    ThrowInputError(where, "checkpoint_every", checkpoint_every, "must be >= 0");
  if (resume && checkpoint_dir.empty())
    throw InputError("run options: resume needs a checkpoint directory (--checkpoint-dir)");
  if (fault_kind != "exit" && fault_kind != "hang" && fault_kind != "throw")
    ThrowInputError(where, "fault_kind", fault_kind, "must be exit, hang or throw");
  if (device != "cpu" && device != "cuda")
    ThrowInputError(where, "device", fmt::format("\"{}\"", device), "must be cpu or cuda");
  if (dtype != "f32" && dtype != "bf16")
    ThrowInputError(where, "dtype", fmt::format("\"{}\"", dtype), "must be f32 or bf16");
  if (kineto_step < -1) ThrowInputError(where, "kineto_step", kineto_step, "must be >= -1");
  if (kineto_step >= 0 && !KinetoAvailable())
    ThrowInputError(where, "kineto_step", kineto_step,
                    "this build has no Kineto profiler (LibTorch >= 2.4, cmake STRATOS_KINETO)");
  if (kineto_step >= 0 && output_dir.empty())
    ThrowInputError(where, "kineto_step", kineto_step, "needs an output directory for the trace");
  if (fp32_residual_connection && dtype != "bf16")
    ThrowInputError(where, "fp32_residual_connection", "true",
                    "applies to dtype bf16 only (an f32 run's residual stream is fp32)");
  if (dtype == "bf16" && device != "cuda")
    ThrowInputError(where, "dtype", "\"bf16\"",
                    "needs device cuda (bf16 autocast); the CPU runtime trains in fp32");
}

json TrainOptionsToJson(const TrainOptions& o) {
  return {{"model", o.model},
          {"seq_length", o.seq_length},
          {"plan", PlanToJson(o.plan)},
          {"steps", o.steps},
          {"learning_rate", o.learning_rate},
          {"adam_beta1", o.adam_beta1},
          {"adam_beta2", o.adam_beta2},
          {"adam_epsilon", o.adam_epsilon},
          {"seed", o.seed},
          {"data_path", o.data_path},
          {"bucket_bytes", o.bucket_bytes},
          {"overlap_grad_sync", o.overlap_grad_sync},
          {"output_dir", o.output_dir},
          {"checkpoint_dir", o.checkpoint_dir},
          {"checkpoint_every", o.checkpoint_every},
          {"resume", o.resume},
          {"timeout_seconds", o.timeout_seconds},
          {"backend", o.backend},
          {"device", o.device},
          {"dtype", o.dtype},
          {"fp32_residual_connection", o.fp32_residual_connection},
          {"cluster", o.cluster},
          {"threads", o.threads},
          {"trace_steps", o.trace_steps},
          {"kineto_step", o.kineto_step},
          {"fault_rank", o.fault_rank},
          {"fault_step", o.fault_step},
          {"fault_kind", o.fault_kind}};
}

TrainOptions TrainOptionsFromJson(const json& j, const std::string& where) {
  if (!j.is_object()) throw InputError(fmt::format("{}: run options must be a JSON object", where));
  TrainOptions o;
  for (const auto& item : j.items()) {
    const std::string& key = item.key();
    const json& v = item.value();
    try {
      if (key == "model") o.model = v.get<std::string>();
      else if (key == "seq_length") o.seq_length = JsonNumber<int>(v, where, key);
      else if (key == "plan") o.plan = PlanFromJson(v, where + ": plan");
      else if (key == "steps") o.steps = JsonNumber<int>(v, where, key);
      else if (key == "learning_rate") o.learning_rate = JsonNumber<double>(v, where, key);
      else if (key == "adam_beta1") o.adam_beta1 = JsonNumber<double>(v, where, key);
      else if (key == "adam_beta2") o.adam_beta2 = JsonNumber<double>(v, where, key);
      else if (key == "adam_epsilon") o.adam_epsilon = JsonNumber<double>(v, where, key);
      else if (key == "seed") o.seed = JsonNumber<uint64_t>(v, where, key);
      else if (key == "data_path") o.data_path = v.get<std::string>();
      else if (key == "bucket_bytes") o.bucket_bytes = JsonNumber<int64_t>(v, where, key);
      else if (key == "overlap_grad_sync") o.overlap_grad_sync = v.get<bool>();
      else if (key == "output_dir") o.output_dir = v.get<std::string>();
      else if (key == "checkpoint_dir") o.checkpoint_dir = v.get<std::string>();
      else if (key == "checkpoint_every") o.checkpoint_every = JsonNumber<int>(v, where, key);
      else if (key == "resume") o.resume = v.get<bool>();
      else if (key == "timeout_seconds") o.timeout_seconds = JsonNumber<double>(v, where, key);
      else if (key == "backend") o.backend = v.get<std::string>();
      else if (key == "device") o.device = v.get<std::string>();
      else if (key == "dtype") o.dtype = v.get<std::string>();
      else if (key == "fp32_residual_connection") o.fp32_residual_connection = v.get<bool>();
      else if (key == "cluster") o.cluster = v.get<std::string>();
      else if (key == "threads") o.threads = JsonNumber<int>(v, where, key);
      else if (key == "trace_steps") o.trace_steps = JsonNumber<int>(v, where, key);
      else if (key == "kineto_step") o.kineto_step = JsonNumber<int>(v, where, key);
      else if (key == "fault_rank") o.fault_rank = JsonNumber<int>(v, where, key);
      else if (key == "fault_step") o.fault_step = JsonNumber<int>(v, where, key);
      else if (key == "fault_kind") o.fault_kind = v.get<std::string>();
      else throw InputError(fmt::format("{}: {}: unknown key", where, key));
    } catch (const json::exception& e) {
      ThrowInputError(where, key, v.dump(), fmt::format("wrong type ({})", e.what()));
    }
  }
  o.Validate();
  return o;
}

// ---------------------------------------------------------------------------------------------
// Trainer internals.

namespace {

// What this rank is doing, for error messages.
struct Activity {
  const char* what = "starting";
  int step = -1;
  int microbatch = -1;
  int peer = -1;
  std::string Describe() const {
    std::string text = what;
    if (microbatch >= 0) text += fmt::format(" of microbatch {}", microbatch);
    if (peer >= 0) text += fmt::format(" (peer rank {})", peer);
    if (step >= 0) text += fmt::format(" in step {}", step);
    return text;
  }
};

// A region of the step's timeline for the Chrome trace.
struct TraceEvent {
  std::string name;
  const char* category;
  double start_seconds;
  double duration_seconds;
};

struct StepTimes {
  double forward = 0, backward = 0, p2p_wait = 0, dp_sync = 0, optimizer = 0, step = 0;
  double tp_comm = 0;
};

// The newest step whose checkpoint file is intact on every rank (CheckpointProblem), agreed
// step by step, newest first, through a one-element all-reduce over `world` (so each rank reads
// only the steps down to the one chosen); 0 if `dir` holds no step. Each rank names on stderr
// its files that are skipped. Throws InputError, with this rank's newest problem when it has
// one, if no step is intact on every rank.
int AgreeOnResumeStep(const std::string& dir, int rank, Communicator& world,
                      const torch::TensorOptions& float_options) {
  const std::vector<int> steps = CheckpointSteps(dir);
  std::vector<std::string> problems;  // this rank's, of the steps skipped so far
  for (int step : steps) {
    const std::string problem = CheckpointProblem(dir, step, rank);
    Tensor bad = torch::full({1}, problem.empty() ? 0.0f : 1.0f, float_options);
    world.AllReduceSum(bad);
    if (bad.item<float>() > 0) {
      problems.push_back(problem);
      continue;
    }
    for (const std::string& skipped : problems)
      if (!skipped.empty())
        fmt::print(stderr, "rank {}: {}; resuming from step {}\n", rank, skipped, step);
    if (step != steps.front() && rank == 0)
      fmt::print(stderr, "resuming from step {}, the newest checkpoint in {} intact on every rank "
                         "(newer: step {})\n", step, dir, steps.front());
    return step;
  }
  for (const std::string& problem : problems)
    if (!problem.empty())
      throw InputError(fmt::format("{} (no checkpoint in {} is intact on every rank)", problem, dir));
  if (steps.empty()) return 0;
  throw InputError(fmt::format(
      "no checkpoint in {} is intact on every rank (another rank's files are not; see its log)",
      dir));
}

void WriteTextFile(const std::string& path, const std::string& text) {
  WriteFileAtomically(path, text);
}

}  // namespace

// ---------------------------------------------------------------------------------------------

TrainResult TrainWorker(const TrainOptions& options, ProcessGroups& groups) {
  options.Validate();
  torch::set_num_threads(options.threads);
  Activity activity;
  const int rank = groups.Rank();
  // Progress for the launcher's hang detection (runtime/launcher.h): every change of activity.
  Heartbeat heartbeat(rank);
  auto doing = [&](const char* what, bool waiting) {
    activity.what = what;
    heartbeat.Beat(activity.step, waiting, activity.Describe());
  };
  const torch::Device device = RankDevice(options.device, groups.LocalRank());
  std::optional<c10::DeviceGuard> device_guard;  // the current CUDA device: streams, events, NCCL
  if (device.is_cuda()) device_guard.emplace(device);
  const auto float_options = torch::TensorOptions().dtype(torch::kFloat32).device(device);
  const Plan& plan = options.plan;
  // Pipeline ranks, each with its DP x TP; with interleaved 1F1B each holds virtual_stages chunks
  // (virtual stage k on rank k mod pp).
  const PipelineLayout layout(plan, rank);
  try {
    const ModelSpec model = LoadRuntimeModel(options.model, options.seq_length);
    const std::string data_path = options.data_path.empty() ? DefaultDataPath() : options.data_path;
    const CharDataset data(data_path, model.seq_length);
    CheckRuntimePlan(model, plan, groups.WorldSize(), "plan", data.VocabSize(), options.cluster);

    // Groups: TP, DP, and the tied-embedding pair.
    doing("creating process groups", true);
    std::vector<int> tp_ranks, dp_ranks;
    for (int t = 0; t < layout.tp; ++t)
      tp_ranks.push_back(layout.RankOf(layout.stage, layout.dp_rank, t));
    for (int d = 0; d < layout.dp; ++d)
      dp_ranks.push_back(layout.RankOf(layout.stage, d, layout.tp_rank));
    auto tp = groups.NewGroup(
        fmt::format("tp[stage {}, dp {}]", layout.stage, layout.dp_rank), tp_ranks);
    auto dp = groups.NewGroup(
        fmt::format("dp[stage {}, tp {}]", layout.stage, layout.tp_rank), dp_ranks);
    // Tied word embeddings split over the pipeline (Megatron-LM): the first and the last rank's
    // copies have their gradients summed. With the same DP x TP at both ends, rank by rank
    // (d, t) with (d, t); otherwise over one group of both ends' ranks, through a full-vocabulary
    // buffer that each end's DP rank 0 fills with its TP shard of the DP-mean gradient.
    const bool tied_split = model.tie_word_embeddings && layout.pp > 1;
    const int last_stage = layout.pp - 1;
    const bool tied_pairwise = layout.dps[0] == layout.dps[last_stage] &&
                               layout.tps[0] == layout.tps[last_stage];
    std::unique_ptr<Communicator> embedding_group;
    if (tied_split && (layout.stage == 0 || layout.stage == last_stage)) {
      if (tied_pairwise) {
        embedding_group = groups.NewGroup(
            fmt::format("embedding[dp {}, tp {}]", layout.dp_rank, layout.tp_rank),
            {layout.RankOf(0, layout.dp_rank, layout.tp_rank),
             layout.RankOf(last_stage, layout.dp_rank, layout.tp_rank)});
      } else {
        std::vector<int> ends;
        for (int s : {0, last_stage})
          for (int r = 0; r < layout.dps[s] * layout.tps[s]; ++r)
            ends.push_back(layout.bases[s] + r);
        embedding_group = groups.NewGroup("embedding[first and last stage]", ends);
      }
    }

    doing("building the model", false);
    const StagePlan& stage_plan = plan.stages[layout.stage];
    std::vector<std::pair<int, int>> chunks;
    for (int k = layout.stage; k < plan.NumStages(); k += layout.pp)
      chunks.emplace_back(plan.stages[k].first_layer, plan.stages[k].last_layer);
    GptStage stage(model, chunks, stage_plan.config.recompute, tp.get(), options.seed, device,
                   options.dtype == "bf16", options.fp32_residual_connection);
    // Gradient compression only where gradients travel (DP > 1), as the cost model prices it.
    std::unique_ptr<GradientCompressor> compressor;
    if (stage_plan.config.grad_compression.kind != GradCompression::kNone && layout.dp > 1) {
      if (device.is_cuda())
        ThrowInputError("plan", fmt::format("stages[{}].grad_compression", layout.stage),
                        stage_plan.config.grad_compression.Label(),
                        "the runtime compresses gradients on CPU workers only (device cpu)");
      std::vector<std::vector<int64_t>> shapes;
      for (const Tensor& p : stage.Parameters()) shapes.push_back(p.sizes().vec());
      CompressorOptions compressor_options;
      // Equal within a DP group (PowerSGD's initial Q), different across stages and TP ranks.
      compressor_options.seed = options.seed + 1000003ull * layout.stage + 7919ull * layout.tp_rank;
      compressor = GradientCompressor::Create(stage_plan.config.grad_compression, shapes,
                                              compressor_options);
    }
    const int zero = stage_plan.config.zero_stage;
    // ZeRO-1, 2 and 3 reduce-scatter: ShardedAdam updates this rank's shard only. ZeRO-2 and 3
    // keep no gradients between microbatches: each backward pass's are reduce-scattered.
    GradientSynchronizer sync(stage, dp.get(), options.bucket_bytes, options.overlap_grad_sync,
                              compressor.get(), zero >= 1, tied_split,
                              /*every_microbatch=*/zero >= 2);
    ShardedAdam adam(options, stage.FlatParameters(), dp.get(), zero >= 1,
                     /*gather_updated=*/zero < 3);
    // ZeRO-3: the layers gather their parameters over DP when they run, on a group of their own.
    std::unique_ptr<Communicator> gather_group;
    std::unique_ptr<ParameterGatherer> gatherer;
    if (zero == 3 && layout.dp > 1) {
      gather_group = groups.NewGroup(
          fmt::format("zero3 gather[stage {}, tp {}]", layout.stage, layout.tp_rank), dp_ranks);
    }

    const int m = plan.num_microbatches;
    Communicator& world = groups.World();
    PipelineStep pipeline(plan, layout, model, data, options.seed, stage, world, *tp, sync,
                          device);

    // Resume.
    TrainResult result;
    int start_step = 0;
    if (options.resume) {
      doing("loading the checkpoint", false);
      start_step = AgreeOnResumeStep(options.checkpoint_dir, rank, world, float_options);
      if (start_step > 0) {
        const std::string file = CheckpointFile(options.checkpoint_dir, start_step, rank);
        const std::vector<Tensor> state = LoadCheckpoint(options.checkpoint_dir, start_step, rank);
        // Parameters, Adam m, v and step, then the compressor's state (runtime/compression.h).
        const size_t compression_tensors = compressor ? compressor->State().size() : 0;
        if (state.size() != 4 + compression_tensors)
          throw InputError(fmt::format(
              "{}: checkpoint has {} tensors, this plan's stage needs {} (grad_compression {}): "
              "resume with the plan that wrote it",
              file, state.size(), 4 + compression_tensors,
              stage_plan.config.grad_compression.Label()));
        STRATOS_CHECK(state[0].numel() == stage.NumLocalParameters(),
                      "{}: checkpoint does not match this plan's stage ({} parameters)", file,
                      stage.NumLocalParameters());
        torch::NoGradGuard no_grad;
        stage.FlatParameters().copy_(state[0].to(device));
        adam.LoadState(state[1].to(device), state[2].to(device), state[3].item<int64_t>());
        if (compressor) compressor->LoadState({state.begin() + 4, state.end()});
      }
    }
    result.first_step = start_step;
    if (gather_group) {
      gatherer = std::make_unique<ParameterGatherer>(stage, gather_group.get());
      pipeline.SetGatherer(gatherer.get());
    }

    doing("waiting at the start barrier", true);
    world.Barrier();
    // Times come from the device's timeline (CUDA events; the host clock on CPU), read once per
    // step after the step's work: regions are (name, category, StepTimes field, marks).
    DeviceTimer timer(device);
    struct Region {
      std::string name;
      const char* category;
      double StepTimes::*field;
      int from, to;
    };
    std::vector<Region> regions;
    std::vector<TraceEvent> events;
    std::vector<StepTimes> times;
    int64_t dp_collectives = 0, gradient_bytes_after_backward = 0;
    const int trace_from = options.steps - options.trace_steps;
    // The pipeline passes report their activity to the heartbeat and their regions to the timer.
    StepObserver observer;
    observer.doing = [&](const char* what, bool waiting, int microbatch, int peer) {
      activity.microbatch = microbatch;
      activity.peer = peer;
      doing(what, waiting);
    };
    observer.mark = [&] { return timer.Mark(); };
    observer.region = [&](std::string name, const char* category, int from, int to) {
      const std::string kind = category;
      double StepTimes::*field = kind == "forward"    ? &StepTimes::forward
                                 : kind == "backward" ? &StepTimes::backward
                                                      : &StepTimes::p2p_wait;
      regions.push_back({std::move(name), category, field, from, to});
    };

    for (int step = start_step; step < options.steps; ++step) {
      activity = Activity{};
      activity.step = step;
      doing("starting the step", false);
      if (step == options.fault_step && rank == options.fault_rank) {
        if (options.fault_kind == "exit") std::_Exit(17);
        if (options.fault_kind == "hang") std::this_thread::sleep_for(std::chrono::hours(24));
        throw std::runtime_error("injected fault");
      }
      if (step == options.kineto_step) StartKinetoTrace(device.is_cuda());
      StepTimes t;
      const double tp_blocked_before = tp->BlockedSeconds();
      const int step_start = timer.Mark();
      sync.BeginStep();
      const std::vector<Tensor> losses = pipeline.Run(step, observer);
      gradient_bytes_after_backward = sync.ParameterGradientBytes();
      doing("all-reducing gradients over DP", true);
      const int sync_start = timer.Mark();
      ReducedGradient grads = sync.Finish();
      {
        torch::NoGradGuard no_grad;
        if (embedding_group && tied_pairwise) {
          doing("all-reducing tied embedding gradients", true);
          for (const ParameterInfo& info : stage.ParameterInfos())
            if (info.word_embedding)
              embedding_group->AllReduceSum(grads.Narrow(info.offset, info.numel));
        }
        // The backward pass weighs each sample 1 / (m x the last stage's samples per replica):
        // the last stage's replicas average their own samples. Summed over this stage's DP
        // replicas, the gradient becomes the global batch mean divided by the last stage's DP
        // degree, whatever this stage's (they differ when activations are resharded). A
        // compressor's exchange already averages over this stage's DP.
        const int loss_dp = layout.dps[layout.pp - 1];
        if (!compressor && loss_dp > 1) grads.Divide(loss_dp);
        if (compressor && layout.dp != loss_dp) grads.Multiply(static_cast<double>(layout.dp) / loss_dp);
        if (embedding_group && !tied_pairwise) {
          doing("all-reducing tied embedding gradients", true);
          for (const ParameterInfo& info : stage.ParameterInfos()) {
            if (!info.word_embedding) continue;
            // This rank's rows are TP shard tp_rank of the (vocab, hidden) table.
            Tensor gradient = grads.Narrow(info.offset, info.numel);
            Tensor full = torch::zeros({info.numel * layout.tp}, gradient.options());
            Tensor mine = full.narrow(0, layout.tp_rank * info.numel, info.numel);
            if (layout.dp_rank == 0) mine.copy_(gradient);
            embedding_group->AllReduceSum(full);
            gradient.copy_(mine);
          }
        }
      }
      const int sync_end = timer.Mark();
      regions.push_back({"grad sync", "dp_sync", &StepTimes::dp_sync, sync_start, sync_end});
      doing("running the optimizer step", false);
      adam.Step(grads);
      const int opt_end = timer.Mark();
      regions.push_back({"optimizer", "optimizer", &StepTimes::optimizer, sync_end, opt_end});

      doing("all-reducing the loss", true);
      double loss_sum = 0;
      if (!losses.empty())
        loss_sum = torch::stack(losses).to(torch::kFloat64).sum().item<double>() / m;
      Tensor loss = torch::tensor({stage.IsLast() && layout.tp_rank == 0 ? loss_sum : 0.0},
                                  torch::TensorOptions().dtype(torch::kFloat64).device(device));
      world.AllReduceSum(loss);
      result.losses.push_back(loss.item<double>() / layout.dps[layout.pp - 1]);
      const int step_end = timer.Mark();
      timer.Synchronize();
      for (const Region& r : regions) {
        const double seconds = timer.Seconds(r.from, r.to);
        if (r.field != nullptr) t.*(r.field) += seconds;
        if (step >= trace_from && r.name != "complete sends")
          events.push_back({r.name, r.category, timer.Offset(r.from), seconds});
      }
      t.step = timer.Seconds(step_start, step_end);
      if (step == options.kineto_step) {
        fs::create_directories(options.output_dir + "/kineto");
        StopKinetoTrace(fmt::format("{}/kineto/rank_{}.json", options.output_dir, rank));
      }
      regions.clear();
      timer.Clear();
      t.tp_comm = tp->BlockedSeconds() - tp_blocked_before;
      dp_collectives = sync.CollectivesThisStep();
      times.push_back(t);

      const bool last_step = step + 1 == options.steps;
      if (!options.checkpoint_dir.empty() &&
          (last_step || (options.checkpoint_every > 0 && (step + 1) % options.checkpoint_every == 0))) {
        doing("writing a checkpoint", false);
        // ZeRO-3 checkpoints hold the whole stage's parameters, as every other plan's.
        if (gatherer) gatherer->GatherAll();
        std::vector<Tensor> state{stage.FlatParameters().clone()};
        if (gatherer) gatherer->ReleaseAll();
        for (const Tensor& s : adam.State()) state.push_back(s);
        if (compressor)
          for (const Tensor& s : compressor->State()) state.push_back(s);
        WriteCheckpoint(options.checkpoint_dir, step + 1, rank, state);
        world.Barrier();
        if (rank == 0) WriteTextFile(options.checkpoint_dir + "/latest", std::to_string(step + 1));
      }
    }

    // Gather the measurements on rank 0 through the store.
    activity = Activity{};
    doing("gathering measurements", true);
    json mine;
    mine["rank"] = rank;
    mine["stage"] = layout.stage;
    mine["dp_rank"] = layout.dp_rank;
    mine["tp_rank"] = layout.tp_rank;
    json steps_json = json::array();
    for (const StepTimes& t : times)
      steps_json.push_back({{"step_seconds", t.step},
                            {"forward_seconds", t.forward},
                            {"backward_seconds", t.backward},
                            {"p2p_wait_seconds", t.p2p_wait},
                            {"dp_sync_seconds", t.dp_sync},
                            {"optimizer_seconds", t.optimizer},
                            {"tp_comm_seconds", t.tp_comm}});
    mine["steps"] = steps_json;
    // The last step's DP gradient synchronization: its collectives (one per bucket and reduced
    // pass), the parameters' gradient bytes autograd held after the last backward pass
    // (ZeRO-2/3: none) and the bytes of the synchronizer's reduced-gradient buffers (the flat
    // gradient; ZeRO-2/3 at DP > 1: this rank's shard and whole all-reduced buckets).
    mine["dp_sync"] = {{"collectives_per_step", dp_collectives},
                       {"gradient_bytes_after_backward", gradient_bytes_after_backward},
                       {"gradient_buffer_bytes", sync.GradientBufferBytes()}};
    json events_json = json::array();
    for (const TraceEvent& e : events)
      events_json.push_back({e.name, e.category, e.start_seconds, e.duration_seconds});
    mine["events"] = events_json;
    if (const auto memory = ReadDeviceMemory(device))
      mine["memory"] = {{"peak_allocated_bytes", memory->peak_allocated_bytes},
                        {"peak_reserved_bytes", memory->peak_reserved_bytes},
                        {"reserved_bytes", memory->reserved_bytes},
                        {"device_total_bytes", memory->device_total_bytes},
                        {"device_free_bytes", memory->device_free_bytes},
                        {"outside_allocator_bytes", memory->OutsideAllocatorBytes()}};
    groups.StoreSet(fmt::format("measure/{}", rank), mine.dump());
    if (rank == 0) {
      RunRecord record;
      record.options = TrainOptionsToJson(options);
      record.model = model;
      record.first_step = start_step;
      record.losses = result.losses;
      record.flash_attention = RuntimeFlashAttention();
      // The local description's peak: a matmul on this rank's device in the run's dtype.
      if (options.cluster.empty())
        record.flops_per_worker =
            device.is_cuda()
                ? MeasureMatmulFlops(4096, device,
                                     options.dtype == "bf16" ? torch::kBFloat16 : torch::kFloat32)
                : MeasureMatmulFlops();
      for (int r = 0; r < groups.WorldSize(); ++r)
        record.ranks.push_back(json::parse(groups.StoreGet(fmt::format("measure/{}", r))));
      result.measurement = WriteRunReports(record, options.output_dir);
    }
    doing("waiting at the final barrier", true);
    world.Barrier();
    return result;
  } catch (const InputError&) {
    throw;
  } catch (const std::exception& e) {
    throw CommError(fmt::format("{} failed while {}: {}", layout.Describe(rank),
                                activity.Describe(), e.what()));
  }
}

int RunWorkerProcess(const TrainOptions& options, const RendezvousOptions& rendezvous) {
  SetUpWorkerProcess();
  UseSingleThreadedBlas();
  std::string message;
  try {
    RendezvousOptions r = rendezvous;
    r.timeout = std::chrono::milliseconds(static_cast<int64_t>(options.timeout_seconds * 1000));
    r.backend = options.backend;
    r.device = options.device;
    ProcessGroups groups(r);
    TrainWorker(options, groups);
    return 0;
  } catch (const InputError& e) {
    message = fmt::format("rank {}: invalid input: {}", rendezvous.rank, e.what());
  } catch (const std::exception& e) {
    message = e.what();
  }
  fmt::print(stderr, "stratos worker: {}\n", message);
  if (!options.output_dir.empty()) {
    try {
      fs::create_directories(options.output_dir + "/errors");
      WriteTextFile(fmt::format("{}/errors/rank_{}.txt", options.output_dir, rendezvous.rank),
                    message + "\n");
    } catch (const std::exception&) {
    }
  }
  return 1;
}

}  // namespace stratos
