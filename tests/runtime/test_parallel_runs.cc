// Multi-process runs on localhost (Gloo): parallel plans reproduce the single-process loss
// trajectory, GPipe and 1F1B give the same gradients, the reports are written, and failing or
// hanging workers make every worker exit with an error naming the rank and what it was doing.
#include <doctest/doctest.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <filesystem>
#include <random>
#include <set>
#include <fstream>
#include <sstream>

#include "costmodel/error.h"
#include "runtime/checkpoint.h"
#include "runtime/runtime_plan.h"

#include "tests/runtime/runtime_test_util.h"

namespace stratos {

std::vector<double> MeasuredLosses(const std::string& output_dir) {
  std::ifstream in(output_dir + "/measurement.json");
  INFO(output_dir, "/measurement.json is missing");
  REQUIRE(in.good());
  return nlohmann::json::parse(in).at("losses").get<std::vector<double>>();
}

namespace {

std::string ReadFile(const std::string& path) {
  std::ifstream in(path);
  std::stringstream buffer;
  buffer << in.rdbuf();
  return buffer.str();
}

// Worker logs, printed when a run fails.
std::string Logs(const TrainOptions& options, const std::string& name, int nproc) {
  (void)options;
  std::string text;
  const std::string dir = TestPath(name);
  for (int r = 0; r < nproc; ++r)
    text += fmt::format("--- rank {} ---\n{}", r,
                        ReadFile(fmt::format("{}/logs/rank_{}.log", dir, r)));
  return text;
}

const std::vector<double>& ReferenceLosses() {
  static const std::vector<double> losses = RunInProcess(TinyOptions(1, 1, 1, 1), "reference").losses;
  return losses;
}

void CheckParallelRun(int pp, int dp, int tp, int m, Schedule schedule, int zero,
                      Recompute recompute, const std::string& name) {
  const std::vector<double>& reference = ReferenceLosses();
  const TrainOptions options = TinyOptions(pp, dp, tp, m, schedule, zero, recompute);
  const LaunchResult result = RunWorkers(options, name);
  INFO(result.Summary());
  INFO(Logs(options, name, pp * dp * tp));
  REQUIRE(result.Succeeded());
  const std::string dir = TestPath(name);
  CheckLossesMatch(reference, MeasuredLosses(dir),
                   fmt::format("{}x{}x{} m={} {} zero{} recompute={}", pp, dp, tp, m,
                               ScheduleName(schedule), zero, RecomputeName(recompute)));
}

TEST_CASE("PP 4: four pipeline stages reproduce the single-process losses") {
  CheckParallelRun(4, 1, 1, 4, Schedule::kOneFOneB, 0, Recompute::kNone, "pp4");
}

TEST_CASE("PP 2 x DP 2 with selective recomputation reproduces the single-process losses") {
  CheckParallelRun(2, 2, 1, 2, Schedule::kOneFOneB, 0, Recompute::kSelective, "pp2dp2");
}

TEST_CASE("PP 2 x TP 2 with GPipe reproduces the single-process losses") {
  CheckParallelRun(2, 1, 2, 4, Schedule::kGpipe, 0, Recompute::kNone, "pp2tp2");
}

TEST_CASE("DP 2 x TP 2 with ZeRO-1 and full recomputation reproduces the single-process losses") {
  CheckParallelRun(1, 2, 2, 2, Schedule::kOneFOneB, 1, Recompute::kFull, "dp2tp2");
}

// The last step's DP synchronization figures of one rank of a finished run (measurement.json's
// ranks[].dp_sync).
struct DpSyncFigure {
  int64_t collectives, gradient_bytes, buffer_bytes;
};
std::vector<DpSyncFigure> DpSyncFigures(const std::string& output_dir) {
  std::ifstream in(output_dir + "/measurement.json");
  REQUIRE(in.good());
  const nlohmann::json measurement = nlohmann::json::parse(in);
  std::vector<DpSyncFigure> figures;
  for (const nlohmann::json& rank : measurement.at("ranks")) {
    const nlohmann::json& sync = rank.at("dp_sync");
    figures.push_back({sync.at("collectives_per_step").get<int64_t>(),
                       sync.at("gradient_bytes_after_backward").get<int64_t>(),
                       sync.at("gradient_buffer_bytes").get<int64_t>()});
  }
  return figures;
}

TEST_CASE("ZeRO-2 (gradients reduce-scattered per bucket, every microbatch's) reproduces the "
          "single-process losses: DP 2 with two microbatches in buckets that straddle the shards, "
          "and PP 2 x DP 2 with the tied embedding; it holds no gradients between microbatches "
          "and a flat gradient buffer of its shard only") {
  const std::vector<double>& reference = ReferenceLosses();
  std::vector<std::vector<DpSyncFigure>> figures;
  for (int zero : {1, 2}) {
    TrainOptions dp2 = TinyOptions(1, 2, 1, 2, Schedule::kOneFOneB, zero);
    dp2.bucket_bytes = 64 << 10;  // several buckets, some across the two shards
    const std::string name = fmt::format("zero{}_dp2_m2", zero);
    const LaunchResult small_buckets = RunWorkers(dp2, name);
    INFO(small_buckets.Summary());
    INFO(Logs(dp2, name, 2));
    REQUIRE(small_buckets.Succeeded());
    CheckLossesMatch(reference, MeasuredLosses(TestPath(name)),
                     fmt::format("1x2x1 m=2 zero{}, 64 KiB buckets", zero));
    figures.push_back(DpSyncFigures(TestPath(name)));
  }
  // ZeRO-1 reduces the two microbatches' sum once, bucket by bucket, and autograd keeps every
  // parameter's gradient until then; ZeRO-2 reduces each microbatch's and releases them.
  const ModelSpec model = LoadRuntimeModel("gpt-tiny", 32);
  int64_t parameters = 0;
  for (const LayerSpec& layer : model.layers) parameters += layer.stored_param_count;
  REQUIRE(figures[0].size() == 2);
  REQUIRE(figures[1].size() == 2);
  for (int r = 0; r < 2; ++r) {
    const DpSyncFigure zero1 = figures[0][r], zero2 = figures[1][r];
    CHECK(zero1.collectives > 2);
    CHECK(zero2.collectives == 2 * zero1.collectives);
    // fp32 gradients of every parameter (the zoo's count of gpt-tiny, which prices its biases and
    // norms apart, is 2% off the runtime's).
    CHECK(static_cast<double>(zero1.gradient_bytes) ==
          doctest::Approx(4.0 * parameters).epsilon(0.05));
    CHECK(zero2.gradient_bytes == 0);
    // ZeRO-1's flat buffer holds every parameter's gradient, ZeRO-2's this rank's shard only
    // (ZeroShard: the first rank ceil(n / 2) elements, the second the rest).
    CHECK(zero1.buffer_bytes == zero1.gradient_bytes);
    const int64_t n = zero1.buffer_bytes / 4, first = (n + 1) / 2;
    CHECK(zero2.buffer_bytes == 4 * (r == 0 ? first : n - first));
  }
  CheckParallelRun(2, 2, 1, 2, Schedule::kOneFOneB, 2, Recompute::kNone, "zero2_pp2_dp2");
}

TEST_CASE("ZeRO-3 (parameters gathered per layer for each pass) reproduces the single-process "
          "losses: DP 2 with the tied head on the embedding's stage, and PP 2 x DP 2 x TP 2 with "
          "full recomputation") {
  const std::vector<double>& reference = ReferenceLosses();
  TrainOptions dp2 = TinyOptions(1, 2, 1, 1, Schedule::kOneFOneB, 3);
  dp2.bucket_bytes = 64 << 10;
  dp2.checkpoint_dir = TestDir("zero3_dp2_ckpt");
  const LaunchResult result = RunWorkers(dp2, "zero3_dp2");
  INFO(result.Summary());
  INFO(Logs(dp2, "zero3_dp2", 2));
  REQUIRE(result.Succeeded());
  CheckLossesMatch(reference, MeasuredLosses(TestPath("zero3_dp2")), "1x2x1 zero3");
  // The checkpoint holds the whole stage's parameters, the same on both DP ranks.
  std::vector<torch::Tensor> flat;
  for (int r = 0; r < 2; ++r) {
    std::vector<torch::Tensor> state;
    torch::load(state, fmt::format("{}/step_000020/rank_{}.pt", dp2.checkpoint_dir, r));
    flat.push_back(state.at(0));
  }
  CHECK(flat[0].isnan().sum().item<int64_t>() == 0);
  CHECK(torch::equal(flat[0], flat[1]));
  CheckParallelRun(2, 2, 2, 1, Schedule::kOneFOneB, 3, Recompute::kFull, "zero3_pp2_dp2_tp2");
}

TEST_CASE("a heterogeneous plan runs with its node groups on worker subsets") {
  // Stage 0 on DP 2 in group 0, stage 1 on TP 2 in group 1: four workers, two per group, the
  // structure of a plan searched on a cluster of two node groups.
  TrainOptions single = TinyOptions(1, 1, 1, 1);
  single.steps = 6;
  const std::vector<double> reference = RunInProcess(single, "groups_reference").losses;
  TrainOptions options = TinyOptions(2, 2, 1, 1);
  options.steps = 6;
  options.plan.stages[1].config.data_parallel = 1;
  options.plan.stages[1].config.tensor_parallel = 2;
  options.plan.stages[1].config.node_group = 1;
  const Problem problem =
      RuntimeProblem(LoadRuntimeModel(options.model, options.seq_length), options.plan, 4);
  REQUIRE(problem.cluster.NumGroups() == 2);
  CHECK(problem.cluster.GroupDevices(1) == 2);
  const LaunchResult result = RunWorkers(options, "groups");
  INFO(result.Summary());
  INFO(Logs(options, "groups", 4));
  REQUIRE(result.Succeeded());
  CheckLossesMatch(reference, MeasuredLosses(TestPath("groups")), options.plan.Summary());
}

TEST_CASE("stages with different DP x TP reshard their activations and reproduce the "
          "single-process losses") {
  // Adam with a large epsilon, so that a gradient off by a constant factor (a stage dividing its
  // DP sum by the wrong degree) changes the updates; Adam proper is blind to the scale.
  TrainOptions single = TinyOptions(1, 1, 1, 1);
  single.steps = 10;
  single.adam_epsilon = 1e-2;
  const std::vector<double> reference = RunInProcess(single, "reshard_reference").losses;
  // DP 2 -> TP 2 -> DP 2: the middle stage gathers both replicas' samples, and sends each
  // replica's half of the gradient back; then TP 1 -> DP 2 x TP 2 -> TP 1 on 6 workers.
  struct Case {
    int outer_dp, outer_tp, middle_dp, middle_tp;
  };
  for (const Case& c : {Case{2, 1, 1, 2}, Case{1, 1, 2, 2}}) {
    TrainOptions options = TinyOptions(3, c.outer_dp, c.outer_tp, 4 / (2 * c.outer_dp));
    options.steps = 10;
    options.adam_epsilon = single.adam_epsilon;
    StageConfig& middle = options.plan.stages[1].config;
    middle.data_parallel = c.middle_dp;
    middle.tensor_parallel = c.middle_tp;
    middle.mesh_gpus_per_node = c.middle_dp * c.middle_tp;
    const int workers = options.plan.NumDevices();
    const std::string name = fmt::format("reshard_{}x{}_{}x{}", c.outer_dp, c.outer_tp,
                                         c.middle_dp, c.middle_tp);
    const LaunchResult result = RunWorkers(options, name);
    INFO(result.Summary());
    INFO(Logs(options, name, workers));
    REQUIRE(result.Succeeded());
    const std::vector<double> first(reference.begin(), reference.begin() + options.steps);
    CheckLossesMatch(first, MeasuredLosses(TestPath(name)), options.plan.Summary());
  }
  // The first stage DP 2, the last TP 2: the tied word embeddings' copies, sharded differently,
  // are summed through the full table.
  TrainOptions tied = TinyOptions(2, 2, 1, 1);
  tied.steps = 10;
  tied.adam_epsilon = single.adam_epsilon;
  tied.plan.stages[1].config.data_parallel = 1;
  tied.plan.stages[1].config.tensor_parallel = 2;
  const LaunchResult result = RunWorkers(tied, "reshard_tied");
  INFO(result.Summary());
  INFO(Logs(tied, "reshard_tied", 4));
  REQUIRE(result.Succeeded());
  const std::vector<double> first(reference.begin(), reference.begin() + tied.steps);
  CheckLossesMatch(first, MeasuredLosses(TestPath("reshard_tied")), tied.plan.Summary());
}

TEST_CASE("interleaved 1F1B (two chunks per pipeline rank) reproduces the single-process losses, "
          "with DP 2 and ZeRO-1 too") {
  const std::vector<double>& reference = ReferenceLosses();
  const ModelSpec model = LoadRuntimeModel("gpt-tiny", 32);
  for (int dp : {1, 2}) {
    TrainOptions options = TinyOptions(1, 1, 1, 1);
    options.plan = UniformRuntimePlan(model, 2, dp, 1, 1, 4, Schedule::kOneFOneB, dp > 1 ? 1 : 0,
                                      Recompute::kSelective, 2);
    REQUIRE(options.plan.NumStages() == 4);
    const std::string name = fmt::format("interleaved_dp{}", dp);
    const LaunchResult result = RunWorkers(options, name);
    INFO(result.Summary());
    INFO(Logs(options, name, 2 * dp));
    REQUIRE(result.Succeeded());
    CheckLossesMatch(reference, MeasuredLosses(TestPath(name)), options.plan.Summary());
    // The measurement names each rank's chunks; the trace each chunk's passes.
    const auto measurement =
        nlohmann::json::parse(ReadFile(TestPath(name) + "/measurement.json"));
    CHECK(measurement.at("stages").size() == 2);
    CHECK(measurement.at("stages")[0].at("layers").dump() == "[[0,2],[3,4]]");
    CHECK(ReadFile(TestPath(name) + "/trace.json").find("\"F0c1\"") != std::string::npos);
  }
}

// Property: plans of gpt-tiny drawn at random from what the runtime runs (1-4 stages cut anywhere
// in [embedding, 4 blocks, head], DP 1-2 x TP 1-2 per pipeline rank on at most 5 workers, 1-4
// microbatches, GPipe, 1F1B or (every fourth plan) interleaved 1F1B with two chunks per rank,
// ZeRO 0-3 in turn on the stages with DP > 1, recomputation) train 10 steps with the
// single-process losses within kLossTolerance. A fixed seed: the same 20 plans every run, each
// named on failure; the test checks that they cover every ZeRO stage and schedule.
TEST_CASE("20 random runnable plans of gpt-tiny reproduce the single-process losses") {
  const std::vector<double>& reference = ReferenceLosses();
  const ModelSpec model = LoadRuntimeModel("gpt-tiny", 32);
  const int L = model.NumLayers();
  std::mt19937 rng(20261126);
  auto pick = [&](int lo, int hi) { return std::uniform_int_distribution<int>(lo, hi)(rng); };
  const Recompute recomputes[] = {Recompute::kNone, Recompute::kSelective, Recompute::kFull};
  // What the 20 plans cover: ZeRO stages of stages with DP > 1, and schedules.
  std::set<int> zero_stages;
  std::set<std::string> schedules;
  int next_zero = 0;
  for (int drawn = 0; drawn < 20;) {
    // Every fourth plan runs interleaved 1F1B: two chunks per rank on 2 pipeline ranks.
    const bool interleaved = drawn % 4 == 3;
    const int pp = interleaved ? 2 : pick(1, 4), dp = pick(1, 2), tp = pick(1, 2);
    const int m = interleaved ? 2 << pick(0, 1) : 1 << pick(0, 2);
    if (pp * dp * tp > 4 || m * dp > 4) continue;
    const Schedule schedule =
        interleaved || pick(0, 1) ? Schedule::kOneFOneB : Schedule::kGpipe;
    const int v = interleaved ? 2 : 1;
    TrainOptions options = TinyOptions(pp, dp, tp, m, schedule);
    options.steps = 10;
    if (v > 1)
      options.plan = UniformRuntimePlan(model, pp, dp, tp, 4 / (m * dp), 4, schedule, 0,
                                        Recompute::kNone, v);
    const int stages = pp * v;
    // Cut points: stages - 1 distinct boundaries in [1, L - 1].
    std::vector<int> cuts;
    while (static_cast<int>(cuts.size()) < stages - 1) {
      const int cut = pick(1, L - 1);
      if (std::find(cuts.begin(), cuts.end(), cut) == cuts.end()) cuts.push_back(cut);
    }
    std::sort(cuts.begin(), cuts.end());
    cuts.insert(cuts.begin(), 0);
    cuts.push_back(L);
    // Pipeline ranks after the first draw their own DP x TP (activations resharded at the
    // boundaries; the tied word embeddings' differently sharded copies summed).
    int workers = pp * dp * tp;
    for (int s = 0; s < stages; ++s) {
      StagePlan& stage = options.plan.stages[s];
      stage.first_layer = cuts[s];
      stage.last_layer = cuts[s + 1];
      if (s >= pp) {
        stage.config = options.plan.stages[s % pp].config;  // a rank's chunks share its config
        continue;
      }
      if (s > 0) {
        const int stage_dp = pick(1, 2), stage_tp = pick(1, 2);
        if ((4 / m) % stage_dp == 0 && workers - dp * tp + stage_dp * stage_tp <= 5) {
          workers += stage_dp * stage_tp - dp * tp;
          stage.config.data_parallel = stage_dp;
          stage.config.tensor_parallel = stage_tp;
          stage.config.mesh_gpus_per_node = stage_dp * stage_tp;
        }
      }
      stage.config.recompute = recomputes[pick(0, 2)];
      // Stages with DP > 1 take ZeRO 0, 1, 2, 3 in turn.
      stage.config.zero_stage = stage.config.data_parallel > 1 ? next_zero++ % 4 : 0;
      if (stage.config.data_parallel > 1) zero_stages.insert(stage.config.zero_stage);
    }
    schedules.insert(v > 1 ? "interleaved 1f1b" : ScheduleName(schedule));
    const std::string name = fmt::format("random_plan_{}", drawn);
    const std::string summary = options.plan.Summary();
    INFO("plan ", drawn, ": ", summary);
    const LaunchResult result = RunWorkers(options, name);
    INFO(result.Summary());
    INFO(Logs(options, name, workers));
    REQUIRE(result.Succeeded());
    const std::vector<double> first(reference.begin(), reference.begin() + options.steps);
    CheckLossesMatch(first, MeasuredLosses(TestPath(name)), summary);
    ++drawn;
  }
  CHECK(zero_stages == std::set<int>{0, 1, 2, 3});
  CHECK(schedules == std::set<std::string>{"gpipe", "1f1b", "interleaved 1f1b"});
}

TEST_CASE("GPipe and 1F1B give bitwise-equal gradients, hence parameters and losses") {
  std::vector<std::vector<double>> losses;
  std::vector<std::vector<torch::Tensor>> parameters;
  for (Schedule schedule : {Schedule::kGpipe, Schedule::kOneFOneB}) {
    TrainOptions options = TinyOptions(2, 1, 1, 4, schedule);
    options.steps = 8;
    const std::string name = std::string("schedule_") + ScheduleName(schedule);
    options.checkpoint_dir = TestDir(name + "_ckpt");
    const LaunchResult result = RunWorkers(options, name);
    INFO(result.Summary());
    INFO(Logs(options, name, 2));
    REQUIRE(result.Succeeded());
    losses.push_back(MeasuredLosses(TestPath(name)));
    std::vector<torch::Tensor> flat;
    for (int r = 0; r < 2; ++r) {
      std::vector<torch::Tensor> state;
      torch::load(state, fmt::format("{}/step_000008/rank_{}.pt", options.checkpoint_dir, r));
      flat.push_back(state.at(0));
    }
    parameters.push_back(flat);
  }
  CHECK(losses[0] == losses[1]);
  for (int r = 0; r < 2; ++r) CHECK(torch::equal(parameters[0][r], parameters[1][r]));
}

TEST_CASE("a run writes its measurement, a Chrome trace and the predicted-vs-measured report") {
  TrainOptions options = TinyOptions(2, 1, 1, 2);
  options.steps = 4;
  const LaunchResult result = RunWorkers(options, "reports");
  INFO(result.Summary());
  REQUIRE(result.Succeeded());
  const std::string dir = TestPath("reports");
  const auto measurement = nlohmann::json::parse(ReadFile(dir + "/measurement.json"));
  CHECK(measurement.at("schema") == "stratos.measurement/1");
  CHECK(measurement.at("losses").size() == 4);
  CHECK(measurement.at("iteration_seconds").get<double>() > 0);
  CHECK(measurement.at("tokens_per_second").get<double>() > 0);
  REQUIRE(measurement.at("stages").size() == 2);
  for (const auto& stage : measurement.at("stages")) {
    CHECK(stage.at("forward_seconds").get<double>() > 0);
    CHECK(stage.at("backward_seconds").get<double>() > 0);
    CHECK(stage.contains("communication_seconds"));
    CHECK(stage.contains("idle_seconds"));
  }
  const auto trace = nlohmann::json::parse(ReadFile(dir + "/trace.json"));
  int forwards = 0, backwards = 0;
  for (const auto& event : trace.at("traceEvents")) {
    if (event.value("cat", "") == "forward") ++forwards;
    if (event.value("cat", "") == "backward") ++backwards;
  }
  CHECK(forwards == 3 * 2 * 2);  // trace_steps x stages x microbatches
  CHECK(backwards == forwards);
  const auto comparison = nlohmann::json::parse(ReadFile(dir + "/predicted_vs_measured.json"));
  CHECK(comparison.at("predicted_iteration_seconds").get<double>() > 0);
  CHECK(comparison.at("measured_iteration_seconds").get<double>() > 0);
  CHECK(comparison.at("stages").size() == 2);
  // MFU: the model FLOPs the cost model counts per microbatch and stage, m microbatches.
  double flops = 0;
  for (const auto& stage : comparison.at("stages"))
    flops += stage.at("predicted_model_flops_per_microbatch").get<double>() * 2;
  CHECK(measurement.at("model_flops_per_iteration").get<double>() == doctest::Approx(flops));
  CHECK(measurement.at("mfu").get<double>() ==
        doctest::Approx(flops / measurement.at("iteration_seconds").get<double>() / 2 /
                        measurement.at("mfu_peak_flops").get<double>()));
}

TEST_CASE("PP 2: when one rank's newest checkpoint is damaged, every rank resumes from the "
          "newest step intact on both") {
  const std::vector<double>& reference = ReferenceLosses();
  TrainOptions options = TinyOptions(2, 1, 1, 1);
  options.checkpoint_dir = TestDir("pp2_fallback_ckpt");
  options.checkpoint_every = 10;
  const LaunchResult first = RunWorkers(options, "pp2_fallback_first");
  INFO(first.Summary());
  REQUIRE(first.Succeeded());
  REQUIRE(CheckpointSteps(options.checkpoint_dir) == std::vector<int>{20, 10});
  std::filesystem::resize_file(CheckpointFile(options.checkpoint_dir, 20, 1), 10);
  options.resume = true;
  const LaunchResult resumed = RunWorkers(options, "pp2_fallback_resumed");
  INFO(resumed.Summary());
  INFO(Logs(options, "pp2_fallback_resumed", 2));
  REQUIRE(resumed.Succeeded());
  const std::vector<double> losses = MeasuredLosses(TestPath("pp2_fallback_resumed"));
  CheckLossesMatch({reference.begin() + 10, reference.end()}, losses, "PP 2 resumed from step 10");
  const std::string log = ReadFile(TestPath("pp2_fallback_resumed") + "/logs/rank_1.log");
  CHECK(log.find(CheckpointFile(options.checkpoint_dir, 20, 1) + ": truncated: 10 of") !=
        std::string::npos);
}

TEST_CASE("an invalid plan is refused before any worker is launched") {
  TrainOptions options = TinyOptions(2, 1, 1, 2);
  options.plan.stages[0].last_layer = 2;  // layer 2 is in no stage
  const std::string dir = TestDir("invalid");
  options.output_dir = dir + "/out";
  CHECK_THROWS_WITH_AS(RunLocal(options, STRATOS_RUNTIME_TEST_WORKER, {}, 30),
                       doctest::Contains("stages[1].first_layer = 3: must be 2"), InputError);
  CHECK_FALSE(std::filesystem::exists(options.output_dir));
}

// A fault at rank 1 in step 2 of a 2-stage run with a 6 s c10d timeout.
LaunchResult RunFault(const std::string& kind, const std::string& name, TrainOptions& options) {
  options = TinyOptions(2, 1, 1, 2);
  options.steps = 6;
  options.timeout_seconds = 6;
  options.fault_rank = 1;
  options.fault_step = 2;
  options.fault_kind = kind;
  return RunWorkers(options, name, 40);
}

// A rank that dies or throws: the other must exit on its own within the c10d timeout with an
// error naming itself and what it was doing.
void CheckFailure(const std::string& kind, const std::string& name) {
  TrainOptions options;
  const LaunchResult result = RunFault(kind, name, options);
  INFO(result.Summary());
  INFO(Logs(options, name, 2));
  CHECK(result.exit_codes[0] == 1);
  CHECK_FALSE(result.killed[0]);
  // Start-up (about a second per process on a loaded machine) + 2 steps + the timeout.
  CHECK(result.exit_seconds[0] < options.timeout_seconds + 10);
  const std::string dir = TestPath(name);
  const std::string error = ReadFile(dir + "/errors/rank_0.txt");
  CHECK(error.find("rank 0 (stage 0, dp 0, tp 0) failed while") != std::string::npos);
  CHECK(error.find("in step 2") != std::string::npos);
  CHECK(error.find("peer rank 1") != std::string::npos);
  if (kind == "exit") CHECK(result.exit_codes[1] == 17);
  CHECK_FALSE(result.hung[1]);
}

TEST_CASE("a worker that dies makes the others exit with an error naming rank and activity") {
  CheckFailure("exit", "fault_exit");
}

TEST_CASE("a worker that hangs is named by the launcher within the c10d timeout") {
  TrainOptions options;
  const LaunchResult result = RunFault("hang", "fault_hang", options);
  const std::string summary = result.Summary();
  INFO(summary);
  INFO(Logs(options, "fault_hang", 2));
  // The heartbeats went silent: rank 1 stopped while computing (the injected sleep at the start
  // of step 2), rank 0 waits for it. Named once every rank was silent for 0.7 of the timeout,
  // before rank 0's own c10d timeout.
  CHECK(result.hung[1]);
  CHECK_FALSE(result.hung[0]);
  CHECK(result.killed[0]);
  CHECK(summary.find("rank 1: hung while starting the step in step 2") != std::string::npos);
  CHECK(summary.find("rank 0: killed after") != std::string::npos);
  CHECK(summary.find("(peer rank 1) in step 2") != std::string::npos);
  CHECK(result.stalled_seconds >= 0.7 * options.timeout_seconds);
  CHECK(result.stalled_seconds < options.timeout_seconds);
  CHECK_FALSE(std::filesystem::exists(TestPath("fault_hang") + "/errors/rank_0.txt"));
}

}  // namespace
}  // namespace stratos
