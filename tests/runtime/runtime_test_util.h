#pragma once
// Helpers of the runtime tests: the tiny configuration, in-process and multi-process runs, and
// the stated fp32 tolerance of loss comparisons.
#include <doctest/doctest.h>
#include <fmt/format.h>
#include <unistd.h>

#include <cmath>
#include <filesystem>
#include <string>
#include <vector>

#include "runtime/launcher.h"
#include "runtime/trainer.h"
#include "tests/scratch_dir.h"

namespace stratos {

// Parallel runs sum the same fp32 numbers in another order (DP all-reduce, TP row-parallel
// partial sums, microbatch accumulation), so their losses differ from the single-process run by
// rounding only (measured: <= 1.4e-7 relative over 20 Adam steps). Stated tolerance:
// |loss - reference| <= kLossTolerance * |reference| at every step.
constexpr double kLossTolerance = 1e-5;

// A fresh directory of this test process (removed when the process exits).
inline std::string TestDir(const std::string& name) { return testing::ScratchDir(name); }

// The directory TestDir(name) made, as it is now (a run's outputs).
inline std::string TestPath(const std::string& name) { return testing::ScratchPath(name); }

// gpt-tiny (4 blocks, hidden 64, 4 heads) at sequence length 32, global batch 4, 20 steps, a
// PP x DP x TP uniform plan with m microbatches. Small: the test machine has 2 shared cores.
inline TrainOptions TinyOptions(int pp, int dp, int tp, int m,
                                Schedule schedule = Schedule::kOneFOneB, int zero = 0,
                                Recompute recompute = Recompute::kNone) {
  TrainOptions options;
  options.model = "gpt-tiny";
  options.seq_length = 32;
  options.steps = 20;
  options.learning_rate = 3e-3;
  options.timeout_seconds = 20;
  const ModelSpec model = LoadRuntimeModel(options.model, options.seq_length);
  const int global_batch = 4;
  options.plan = UniformRuntimePlan(model, pp, dp, tp, global_batch / (m * dp), global_batch,
                                    schedule, zero, recompute);
  return options;
}

struct TestRun {
  int first_step = 0;
  std::vector<double> losses;
  nlohmann::json measurement;
};

// Runs a one-process plan in this process (FileStore rendezvous).
inline TestRun RunInProcess(TrainOptions options, const std::string& name) {
  const std::string dir = TestDir(name);
  RendezvousOptions rendezvous;
  rendezvous.world_size = 1;
  rendezvous.file_store_path = dir + "/store";
  rendezvous.timeout = std::chrono::seconds(20);
  ProcessGroups groups(rendezvous);
  const TrainResult result = TrainWorker(options, groups);
  return {result.first_step, result.losses, result.measurement};
}

// Runs the plan with one runtime_test_worker process per device (TCPStore rendezvous on a free
// localhost port through the torchrun environment). Workers are killed after deadline_seconds.
inline LaunchResult RunWorkers(TrainOptions options, const std::string& name,
                               double deadline_seconds = 60) {
  options.output_dir = TestDir(name);
  return RunLocal(options, STRATOS_RUNTIME_TEST_WORKER, {}, deadline_seconds);
}

// The losses a successful multi-process run wrote to output_dir/measurement.json.
std::vector<double> MeasuredLosses(const std::string& output_dir);

inline void CheckLossesMatch(const std::vector<double>& reference,
                             const std::vector<double>& losses, const std::string& what) {
  INFO(what);
  REQUIRE(losses.size() == reference.size());
  double worst = 0;
  for (size_t i = 0; i < losses.size(); ++i)
    worst = std::max(worst, std::abs(losses[i] - reference[i]) / std::abs(reference[i]));
  INFO(fmt::format("largest relative difference {:.3g} (tolerance {:.1g}); reference {} .. {}, "
                   "run {} .. {}",
                   worst, kLossTolerance, reference.front(), reference.back(), losses.front(),
                   losses.back()));
  MESSAGE(fmt::format("{}: largest relative loss difference {:.3g}", what, worst));
  CHECK(worst <= kLossTolerance);
}

}  // namespace stratos
