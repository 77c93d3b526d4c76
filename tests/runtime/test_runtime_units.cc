// In-process tests of the runtime's pieces: data, the GPT stages, the rendezvous
// environment and the single-process trainer.
#include <doctest/doctest.h>
#include <torch/torch.h>

#include <cmath>
#include <cstdlib>
#include <dlfcn.h>
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <string>
#include <thread>

#include "costmodel/error.h"
#include "runtime/checkpoint.h"
#include "runtime/communicator.h"
#include "runtime/data.h"
#include "runtime/data_parallel.h"
#include "runtime/device.h"
#include "runtime/gpt.h"
#include "runtime/launcher.h"
#include "runtime/pipeline_layout.h"
#include "runtime/pipeline_step.h"
#include "runtime/trainer.h"
#include "tests/runtime/runtime_test_util.h"

namespace stratos {
namespace {

// As `stratos` and every worker process do at start.
[[maybe_unused]] const bool kSingleThreadedBlas = (UseSingleThreadedBlas(), true);

// Runs body(rank, groups, error) for ranks 0 and 1 on two threads, an in-process Gloo group.
// Returns each rank's error text: what its body appended, or what it threw ("" when it passed).
std::vector<std::string> OnTwoRanks(
    const std::function<void(int, ProcessGroups&, std::string&)>& body) {
  const int port = FreeTcpPort();
  std::vector<std::string> errors(2);
  std::vector<std::thread> threads;
  for (int r = 0; r < 2; ++r)
    threads.emplace_back([&, r] {
      try {
        RendezvousOptions rendezvous;
        rendezvous.rank = r;
        rendezvous.world_size = 2;
        rendezvous.local_rank = r;
        rendezvous.master_port = port;
        rendezvous.backend = "gloo";
        ProcessGroups groups(rendezvous);
        body(r, groups, errors[r]);
      } catch (const std::exception& e) {
        errors[r] += e.what();
      }
    });
  for (auto& thread : threads) thread.join();
  return errors;
}

TEST_CASE("an OpenBLAS behind LibTorch runs single-threaded") {
  UseSingleThreadedBlas();
  using GetThreads = int (*)();
  auto get = reinterpret_cast<GetThreads>(dlsym(RTLD_DEFAULT, "openblas_get_num_threads"));
  if (get == nullptr) return;  // another BLAS: nothing to check
  CHECK(get() == 1);
  const torch::Tensor a = torch::randn({64, 64});
  CHECK(torch::allclose(torch::mm(a, torch::eye(64)), a));
}

TEST_CASE("tinyshakespeare has 65 characters and batches depend only on (seed, step)") {
  const CharDataset data(DefaultDataPath(), 16);
  CHECK(data.VocabSize() == 65);
  CHECK(data.TrainTokens() + data.ValidationTokens() == 1115394);
  const auto full = data.TrainBatch(7, 3, 8, 0, 8);
  CHECK(full.inputs.sizes() == torch::IntArrayRef({8, 16}));
  // Targets are the inputs shifted by one token.
  CHECK(torch::equal(full.inputs.narrow(1, 1, 15), full.targets.narrow(1, 0, 15)));
  const auto part = data.TrainBatch(7, 3, 8, 2, 3);
  CHECK(torch::equal(part.inputs, full.inputs.narrow(0, 2, 3)));
  CHECK_FALSE(torch::equal(data.TrainBatch(7, 4, 8, 0, 8).inputs, full.inputs));
  CHECK(data.ValidationBatch(4).inputs.size(0) == 4);
  CHECK_THROWS_AS(CharDataset("/nonexistent/file.txt", 16), InputError);
}

TEST_CASE("a GPT split into stages computes the loss of the whole model") {
  torch::set_num_threads(1);
  const ModelSpec model = LoadRuntimeModel("gpt-tiny", 16);
  REQUIRE(model.NumLayers() == 6);
  auto self = MakeSelfCommunicator("tp");
  const CharDataset data(DefaultDataPath(), 16);
  const auto batch = data.TrainBatch(1, 0, 4, 0, 4);
  GptStage whole(model, 0, 6, Recompute::kNone, self.get(), 42);
  const double loss = whole.Forward(batch.inputs, batch.targets).item<double>();
  // Near-uniform predictions at initialization: cross entropy close to ln(vocab).
  CHECK(loss == doctest::Approx(std::log(72.0)).epsilon(0.05));
  GptStage first(model, 0, 2, Recompute::kNone, self.get(), 42);
  GptStage second(model, 2, 6, Recompute::kFull, self.get(), 42);
  const double split = second.Forward(first.Forward(batch.inputs, {}), batch.targets).item<double>();
  CHECK(split == doctest::Approx(loss).epsilon(1e-6));
  CHECK(whole.NumLocalParameters() + 72 * 64 == first.NumLocalParameters() +
                                                    second.NumLocalParameters());
}

TEST_CASE("recomputation changes no gradient") {
  torch::set_num_threads(1);
  const ModelSpec model = LoadRuntimeModel("gpt-tiny", 16);
  auto self = MakeSelfCommunicator("tp");
  const CharDataset data(DefaultDataPath(), 16);
  const auto batch = data.TrainBatch(1, 0, 2, 0, 2);
  std::vector<torch::Tensor> grads;
  for (Recompute recompute : {Recompute::kNone, Recompute::kSelective, Recompute::kFull}) {
    GptStage stage(model, 0, 6, recompute, self.get(), 3);
    torch::autograd::backward({stage.Forward(batch.inputs, batch.targets)});
    std::vector<torch::Tensor> flat;
    for (const auto& p : stage.Parameters()) flat.push_back(p.grad().reshape({-1}));
    grads.push_back(torch::cat(flat));
  }
  CHECK(torch::allclose(grads[0], grads[1], 1e-5, 1e-7));
  CHECK(torch::allclose(grads[0], grads[2], 1e-5, 1e-7));
}

TEST_CASE("the layer hook sees each layer's forward, then the backward from the last layer down; "
          "a graph whose hook was cleared passes through") {
  torch::set_num_threads(1);
  const ModelSpec model = LoadRuntimeModel("gpt-tiny", 16);
  auto self = MakeSelfCommunicator("tp");
  const CharDataset data(DefaultDataPath(), 16);
  const auto batch = data.TrainBatch(1, 0, 2, 0, 2);
  GptStage stage(model, 0, model.NumLayers(), Recompute::kFull, self.get(), 3);
  std::string events;
  stage.SetLayerHook([&](int layer, GptStage::LayerEvent event) {
    const char* kind = event == GptStage::LayerEvent::kForward       ? "F"
                       : event == GptStage::LayerEvent::kForwardDone ? "f"
                                                                     : "B";
    events += fmt::format("{}{} ", kind, layer);
  });
  torch::autograd::backward({stage.Forward(batch.inputs, batch.targets)});
  CHECK(events == "F0 f0 F1 f1 F2 f2 F3 f3 F4 f4 F5 f5 B5 B4 B3 B2 B1 B0 ");
  const torch::Tensor loss = stage.Forward(batch.inputs, batch.targets);
  stage.SetLayerHook({});
  events.clear();
  CHECK_NOTHROW(torch::autograd::backward({loss}));
  CHECK(events.empty());
}

TEST_CASE("ZeRO-3: a rank holds only its shard between passes, gathers each layer's parameters "
          "for its forward and its backward, and computes the gradients of the whole stage") {
  torch::set_num_threads(1);
  const ModelSpec model = LoadRuntimeModel("gpt-tiny", 16);
  const int L = model.NumLayers();  // embedding, 4 blocks, head (its tied wte on the stage)
  auto self = MakeSelfCommunicator("tp");
  const CharDataset data(DefaultDataPath(), 16);
  const auto batch = data.TrainBatch(1, 0, 2, 0, 2);
  // The reference: the whole stage's loss and gradients without ZeRO.
  GptStage plain(model, 0, L, Recompute::kFull, self.get(), 3);
  const torch::Tensor plain_loss = plain.Forward(batch.inputs, batch.targets);
  torch::autograd::backward({plain_loss});
  std::vector<torch::Tensor> plain_grads;
  for (const auto& p : plain.Parameters()) plain_grads.push_back(p.grad().reshape({-1}));
  const torch::Tensor expected_grads = torch::cat(plain_grads);

  const std::vector<std::string> errors = OnTwoRanks([&](int r, ProcessGroups& groups,
                                                        std::string& error) {
    GptStage stage(model, 0, L, Recompute::kFull, self.get(), 3);
    const int64_t n = stage.NumLocalParameters();
    const auto [lo, hi] = ZeroShard(n, 2, r);
    const torch::Tensor initial = stage.FlatParameters().detach().clone();
    ParameterGatherer gatherer(stage, &groups.World());
    const torch::Tensor flat = stage.FlatParameters().detach();
    // Released: NaN outside the rank's shard, the shard intact.
    const int64_t nan = flat.isnan().sum().item<int64_t>();
    if (nan != n - (hi - lo)) error += fmt::format("{} NaN after release; ", nan);
    if (!torch::equal(flat.narrow(0, lo, hi - lo), initial.narrow(0, lo, hi - lo)))
      error += "shard changed; ";
    const torch::Tensor loss = stage.Forward(batch.inputs, batch.targets);
    torch::autograd::backward({loss});
    gatherer.ReleaseAll();
    // One gather per layer forward and per layer backward; the head also gathers the
    // embedding's wte (a second range).
    const int64_t expected_gathers = 2 * (L + 1);
    if (gatherer.NumGathers() != expected_gathers)
      error += fmt::format("{} gathers, expected {}; ", gatherer.NumGathers(), expected_gathers);
    if (loss.item<double>() != plain_loss.item<double>()) error += "loss differs; ";
    std::vector<torch::Tensor> grads;
    for (const auto& p : stage.Parameters()) grads.push_back(p.grad().reshape({-1}));
    if (!torch::allclose(torch::cat(grads), expected_grads, 1e-5, 1e-7))
      error += "gradients differ; ";
    if (flat.isnan().sum().item<int64_t>() != nan) error += "not released after; ";
    gatherer.GatherAll();
    if (!torch::equal(flat, initial)) error += "GatherAll is not the whole stage; ";
  });
  CHECK(errors[0] == "");
  CHECK(errors[1] == "");
}

TEST_CASE("the pipeline layout numbers ranks stage by stage, and a boundary between DP 2 and "
          "TP 2 scatters 1/tp of each replica's share and leaves the rest to a TP all-gather") {
  Plan plan = TinyOptions(2, 2, 1, 1).plan;  // stage 0: DP 2 (ranks 0, 1)
  plan.stages[1].config.data_parallel = 1;  // stage 1: TP 2 (ranks 2, 3)
  plan.stages[1].config.tensor_parallel = 2;
  const PipelineLayout dp_rank_1(plan, 1), tp_rank_1(plan, 3);
  CHECK(dp_rank_1.bases == std::vector<int>{0, 2});
  CHECK(tp_rank_1.Describe(3) == "rank 3 (stage 1, dp 0, tp 1)");
  CHECK(tp_rank_1.RankOf(0, 1, 0) == 1);
  // "peer:offset+count" per piece, in elements; a microbatch of 4 samples of 3 elements.
  auto text = [](const std::vector<Piece>& pieces) {
    std::string out;
    for (const Piece& p : pieces) out += fmt::format("{}:{}+{} ", p.peer, p.offset, p.count);
    return out;
  };
  // Replica 1 of stage 0 holds samples [2, 4), elements [6, 12): part 1 of stage 1's share,
  // which goes to TP rank 1 only (rank 3), not to both TP ranks.
  CHECK(text(ReshardPieces(dp_rank_1, 1, 4, 3)) == "3:0+6 ");
  // TP rank 1 of stage 1 takes its part, elements [6, 12), from rank 1; the same pieces back.
  CHECK(text(ReshardPieces(tp_rank_1, 0, 4, 3)) == "1:6+6 ");
  CHECK(text(ReshardPieces(PipelineLayout(plan, 0), 1, 4, 3)) == "2:0+6 ");
  // The other way, TP 2 -> DP 2: TP rank 1's part, samples [2, 4), is replica 1's share.
  std::swap(plan.stages[0].config, plan.stages[1].config);
  CHECK(text(ReshardPieces(PipelineLayout(plan, 3), 0, 4, 3)) == "1:0+6 ");
  CHECK(text(ReshardPieces(PipelineLayout(plan, 1), 1, 4, 3)) == "3:6+6 ");
  // Uneven parts: 5 elements over TP 2 -> DP 1, TP 3.
  plan.stages[1].config.data_parallel = 1;
  plan.stages[1].config.tensor_parallel = 3;
  CHECK(ScatterGatherCounts(3, 5) == std::vector<int64_t>{1, 2, 2});
  CHECK(text(ReshardPieces(PipelineLayout(plan, 0), 1, 1, 5)) == "2:0+1 3:1+1 ");
  CHECK(text(ReshardPieces(PipelineLayout(plan, 1), 1, 1, 5)) == "3:2+1 4:3+2 ");
  // Equal DP x TP: one piece, between equal (d, t).
  const Plan uniform = TinyOptions(2, 2, 1, 1).plan;
  CHECK(text(ReshardPieces(PipelineLayout(uniform, 1), 1, 4, 3)) == "3:0+6 ");
}

TEST_CASE("one pipeline step of two stages runs 1F1B's passes in order, exchanges the "
          "boundary both ways and computes the whole model's loss and gradients") {
  torch::set_num_threads(1);
  const ModelSpec model = LoadRuntimeModel("gpt-tiny", 16);
  const int L = model.NumLayers();
  const Plan plan = UniformRuntimePlan(model, 2, 1, 1, 1, 2, Schedule::kOneFOneB, 0,
                                       Recompute::kNone);  // m = 2 microbatches of 1 sample
  auto self = MakeSelfCommunicator("tp");
  const CharDataset data(DefaultDataPath(), 16);
  const uint64_t seed = 5;
  // The reference: the whole model on the step's batch of 2 samples.
  const auto batch = data.TrainBatch(seed, 0, 2, 0, 2);
  GptStage whole(model, 0, L, Recompute::kNone, self.get(), seed);
  const double whole_loss = whole.Forward(batch.inputs, batch.targets).item<double>();
  torch::autograd::backward({whole.Forward(batch.inputs, batch.targets)});
  std::map<std::string, torch::Tensor> whole_grads;
  for (size_t j = 0; j < whole.Parameters().size(); ++j)
    whole_grads[whole.ParameterInfos()[j].name] = whole.Parameters()[j].grad();

  std::vector<std::string> regions(2);
  std::vector<double> losses(2, 0.0);
  const std::vector<std::string> errors = OnTwoRanks([&](int r, ProcessGroups& groups,
                                                        std::string& error) {
    const PipelineLayout layout(plan, r);
    GptStage stage(model, plan.stages[r].first_layer, plan.stages[r].last_layer,
                   Recompute::kNone, self.get(), seed);
    auto dp = MakeSelfCommunicator("dp");
    GradientSynchronizer sync(stage, dp.get(), 1 << 20, false, nullptr);
    PipelineStep step(plan, layout, model, data, seed, stage, groups.World(), *self, sync,
                      torch::Device(torch::kCPU));
    StepObserver observer;
    int marks = 0;
    observer.doing = [](const char*, bool, int, int) {};
    observer.mark = [&] { return marks++; };
    observer.region = [&](std::string name, const char*, int from, int to) {
      regions[r] += name + " ";
      if (to <= from) error += name + " ends before it starts; ";
    };
    sync.BeginStep();
    const std::vector<torch::Tensor> out = step.Run(0, observer);
    for (const torch::Tensor& loss : out) losses[r] += loss.item<double>() / out.size();
    if (r == 0 && !out.empty()) error += "the first stage returned losses; ";
    for (size_t j = 0; j < stage.Parameters().size(); ++j) {
      const ParameterInfo& info = stage.ParameterInfos()[j];
      if (info.word_embedding) continue;  // tied: the whole model's sums both copies
      if (!torch::allclose(stage.Parameters()[j].grad(), whole_grads.at(info.name), 1e-4, 1e-6))
        error += info.name + " gradient differs; ";
    }
  });
  CHECK(errors[0] == "");
  CHECK(errors[1] == "");
  // 1F1B on 2 ranks and 2 microbatches: rank 0 runs F0 F1 B0 B1, rank 1 F0 B0 F1 B1.
  CHECK(regions[0] == "F0 F1 recv B0 B0 recv B1 B1 complete sends ");
  CHECK(regions[1] == "recv F0 F0 B0 recv F1 F1 B1 complete sends ");
  CHECK(losses[1] == doctest::Approx(whole_loss).epsilon(1e-6));
}

TEST_CASE("the rendezvous reads the torchrun environment and names bad values") {
  setenv("RANK", "1", 1);
  setenv("WORLD_SIZE", "4", 1);
  setenv("LOCAL_RANK", "1", 1);
  setenv("MASTER_ADDR", "10.0.0.7", 1);
  setenv("MASTER_PORT", "29555", 1);
  const RendezvousOptions options = RendezvousFromEnvironment();
  CHECK(options.rank == 1);
  CHECK(options.world_size == 4);
  CHECK(options.local_rank == 1);
  CHECK(options.master_addr == "10.0.0.7");
  CHECK(options.master_port == 29555);
  setenv("RANK", "4", 1);
  CHECK_THROWS_WITH_AS(RendezvousFromEnvironment(), doctest::Contains("RANK = 4"), InputError);
  setenv("RANK", "x", 1);
  CHECK_THROWS_WITH_AS(RendezvousFromEnvironment(), doctest::Contains("RANK"), InputError);
  for (const char* name : {"RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_ADDR", "MASTER_PORT"})
    unsetenv(name);
  CHECK_THROWS_WITH_AS(RendezvousFromEnvironment(), doctest::Contains("RANK is not set"),
                       InputError);
}

TEST_CASE("single-process training lowers the loss and microbatching does not change it") {
  const TestRun reference = RunInProcess(TinyOptions(1, 1, 1, 1), "ref_m1");
  REQUIRE(reference.losses.size() == 20);
  CHECK(reference.losses.front() == doctest::Approx(std::log(72.0)).epsilon(0.05));
  CHECK(reference.losses.back() < reference.losses.front() - 0.5);
  const TestRun microbatched = RunInProcess(TinyOptions(1, 1, 1, 4), "ref_m4");
  CheckLossesMatch(reference.losses, microbatched.losses, "1x1x1 m=4 vs m=1");
}

TEST_CASE("an interrupted run resumes from its last checkpoint and continues the same trajectory") {
  const TestRun reference = RunInProcess(TinyOptions(1, 1, 1, 2), "resume_ref");
  TrainOptions options = TinyOptions(1, 1, 1, 2);
  const std::string dir = TestDir("resume_ckpt");
  options.checkpoint_dir = dir;
  options.checkpoint_every = 5;
  options.fault_rank = 0;
  options.fault_step = 12;
  options.fault_kind = "throw";
  CHECK_THROWS_WITH(RunInProcess(options, "resume_crash"),
                    doctest::Contains("failed while starting the step in step 12: injected fault"));
  options.fault_rank = -1;
  options.resume = true;
  const TestRun resumed = RunInProcess(options, "resume_continue");
  CHECK(resumed.first_step == 10);
  REQUIRE(resumed.losses.size() == 10);
  for (int i = 0; i < 10; ++i) CHECK(resumed.losses[i] == reference.losses[10 + i]);
}

// Cuts a file to `bytes`, or flips its byte at `flip` (same size), in place.
void Damage(const std::string& path, long bytes, long flip = -1) {
  if (flip >= 0) {
    std::fstream file(path, std::ios::in | std::ios::out | std::ios::binary);
    REQUIRE(file.good());
    file.seekg(flip);
    const char c = static_cast<char>(file.get() ^ 0x5a);
    file.seekp(flip);
    file.put(c);
    return;
  }
  std::filesystem::resize_file(path, static_cast<std::uintmax_t>(bytes));
}

TEST_CASE("checkpoint files: written with their size and CRC-32, each kind of damage named in "
          "one line") {
  const std::string dir = TestDir("checkpoint_files");
  const std::vector<torch::Tensor> tensors{torch::arange(1000, torch::kFloat32),
                                           torch::tensor({7}, torch::kInt64)};
  WriteCheckpoint(dir, 12, 3, tensors);
  WriteCheckpoint(dir, 4, 3, tensors);
  CHECK(CheckpointSteps(dir) == std::vector<int>{12, 4});
  CHECK(CheckpointSteps(dir + "/absent").empty());
  CHECK(CheckpointProblem(dir, 12, 3).empty());
  const std::vector<torch::Tensor> loaded = LoadCheckpoint(dir, 12, 3);
  REQUIRE(loaded.size() == 2);
  CHECK(torch::equal(loaded[0], tensors[0]));
  CHECK(torch::equal(loaded[1], tensors[1]));

  const std::string file = CheckpointFile(dir, 12, 3);
  const long size = static_cast<long>(std::filesystem::file_size(file));
  auto one_line_naming = [](const std::string& problem, const std::string& path,
                            const std::string& what) {
    INFO(problem);
    CHECK(problem.find('\n') == std::string::npos);
    CHECK(problem.rfind(path, 0) == 0);
    CHECK(problem.find(what) != std::string::npos);
  };
  Damage(file, size / 2);
  one_line_naming(CheckpointProblem(dir, 12, 3), file, fmt::format("truncated: {} of {} bytes",
                                                                     size / 2, size));
  CHECK_THROWS_WITH_AS(LoadCheckpoint(dir, 12, 3), doctest::Contains("truncated"), InputError);
  WriteCheckpoint(dir, 12, 3, tensors);
  Damage(file, 0, size - 100);
  one_line_naming(CheckpointProblem(dir, 12, 3), file, "CRC-32");
  WriteCheckpoint(dir, 12, 3, tensors);
  Damage(file + ".json", 10);
  one_line_naming(CheckpointProblem(dir, 12, 3), file + ".json", "not a checkpoint record");
  std::filesystem::remove(file);
  one_line_naming(CheckpointProblem(dir, 12, 3), file, "missing");
  // A file without a record (written before records existed) is intact if torch::load reads it.
  WriteCheckpoint(dir, 12, 3, tensors);
  std::filesystem::remove(file + ".json");
  CHECK(CheckpointProblem(dir, 12, 3).empty());
  Damage(file, size / 2);
  one_line_naming(CheckpointProblem(dir, 12, 3), file, "not a tensor list that torch::load reads");
}

TEST_CASE("resume falls back to the newest intact checkpoint and continues the same trajectory; "
          "none intact is one line naming the file") {
  const TestRun reference = RunInProcess(TinyOptions(1, 1, 1, 2), "fallback_ref");
  TrainOptions options = TinyOptions(1, 1, 1, 2);
  const std::string dir = TestDir("fallback_ckpt");
  options.checkpoint_dir = dir;
  options.checkpoint_every = 5;
  RunInProcess(options, "fallback_first");  // checkpoints at 5, 10, 15, 20
  REQUIRE(CheckpointSteps(dir) == std::vector<int>{20, 15, 10, 5});
  Damage(CheckpointFile(dir, 20, 0), 100);                                    // truncated
  Damage(CheckpointFile(dir, 15, 0) + ".json", 5);                            // its record cut
  Damage(CheckpointFile(dir, 10, 0), 0,
         static_cast<long>(std::filesystem::file_size(CheckpointFile(dir, 10, 0))) / 2);  // a bit
  options.resume = true;
  options.checkpoint_dir = dir;
  options.checkpoint_every = 0;
  const TestRun resumed = RunInProcess(options, "fallback_resumed");
  CHECK(resumed.first_step == 5);
  REQUIRE(resumed.losses.size() == 15);
  for (int i = 0; i < 15; ++i) CHECK(resumed.losses[i] == reference.losses[5 + i]);
  // The resumed run wrote step 20 again; damage every step: nothing to fall back to.
  for (int step : CheckpointSteps(dir)) Damage(CheckpointFile(dir, step, 0), 64);
  try {
    RunInProcess(options, "fallback_none");
    FAIL("resume from damaged checkpoints did not fail");
  } catch (const InputError& e) {
    const std::string message = e.what();
    INFO(message);
    CHECK(message.find('\n') == std::string::npos);
    CHECK(message.find(CheckpointFile(dir, 20, 0) + ": truncated: 64 of") != std::string::npos);
    CHECK(message.find("no checkpoint in " + dir + " is intact") != std::string::npos);
  }
}

TEST_CASE("the workers' errors of a failed run are listed in rank order, one indented line each") {
  const std::string dir = TestDir("worker_errors");
  CHECK(WorkerErrors(dir).empty());
  std::filesystem::create_directories(dir + "/errors");
  std::ofstream(dir + "/errors/rank_10.txt") << "rank 10: step 3: peer gone\n";
  std::ofstream(dir + "/errors/rank_2.txt") << "rank 2: step 3: injected fault";
  CHECK(WorkerErrors(dir) == "  rank 2: step 3: injected fault\n  rank 10: step 3: peer gone\n");
}

TEST_CASE("local workers beyond the hardware threads are slowed in proportion") {
  const int threads = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  CHECK(LocalWorkerSlowdown(1) == 1.0);
  CHECK(LocalWorkerSlowdown(threads) == 1.0);
  CHECK(LocalWorkerSlowdown(3 * threads) == doctest::Approx(3.0));
  CHECK_THROWS_WITH_AS(LocalWorkerSlowdown(0), "local workers: num_workers = 0: must be >= 1",
                       InputError);
}

TEST_CASE("plans the runtime cannot run are refused with the field and the rule") {
  const ModelSpec model = LoadRuntimeModel("gpt-tiny", 64);
  Plan plan = TinyOptions(2, 1, 1, 2).plan;
  CHECK_NOTHROW(CheckRuntimePlan(model, plan, 2, "p.json", 65));
  CHECK_THROWS_WITH_AS(CheckRuntimePlan(model, plan, 3, "p.json"),
                       doctest::Contains("must equal the 3 worker processes"), InputError);
  CHECK_THROWS_WITH_AS(CheckRuntimePlan(model, TinyOptions(1, 1, 3, 1).plan, 3, "p.json"),
                       doctest::Contains("tensor_parallel 3 must divide the 4 attention heads"),
                       InputError);
  Plan uneven = TinyOptions(2, 1, 1, 2).plan;  // stages with different DP x TP run
  uneven.stages[1].config.data_parallel = 2;
  uneven.stages[1].config.mesh_gpus_per_node = 2;
  CHECK_NOTHROW(CheckRuntimePlan(model, uneven, 3, "p.json"));
  uneven.stages[1].config.tensor_parallel = 3;
  uneven.stages[1].config.mesh_gpus_per_node = 6;
  CHECK_THROWS_WITH_AS(CheckRuntimePlan(model, uneven, 7, "p.json"),
                       doctest::Contains("tensor_parallel 3 must divide the 4 attention heads"),
                       InputError);
  Plan zero3 = TinyOptions(1, 2, 1, 1).plan;
  zero3.stages[0].config.zero_stage = 2;
  CHECK_NOTHROW(CheckRuntimePlan(model, zero3, 2, "p.json"));
  zero3.stages[0].config.zero_stage = 3;
  CHECK_NOTHROW(CheckRuntimePlan(model, zero3, 2, "p.json"));
  zero3.stages[0].config.zero_stage = 4;
  CHECK_THROWS_WITH_AS(CheckRuntimePlan(model, zero3, 2, "p.json"),
                       doctest::Contains("zero_stage 4 must be 0, 1, 2 or 3"), InputError);
  CHECK_THROWS_WITH_AS(CheckRuntimePlan(model, plan, 2, "p.json", 100),
                       doctest::Contains("model.vocab_size"), InputError);
}

}  // namespace
}  // namespace stratos
