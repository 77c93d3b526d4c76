// The co-search (cosearch/): its time surrogate equals the cost model at one-hot choices, the
// outer gradient matches finite differences, and a resumed search continues bitwise.
#include <doctest/doctest.h>

#include <cmath>
#include <filesystem>

#include "cosearch/cosearcher.h"
#include "cosearch/time_surrogate.h"
#include "costmodel/cluster_io.h"
#include "costmodel/error.h"
#include "costmodel/model_io.h"
#include "costmodel/zoo.h"
#include "runtime_test_util.h"

namespace stratos {

namespace {

// GPT-3 1.3B on 2 p3.16xlarge nodes, batch 64: a 2-stage plan, each stage one node, DP 8.
struct TargetCase {
  Problem problem;
  Plan plan;
};

TargetCase SmallTarget(int zero_stage_of_stage_1 = 1, int global_batch = 64) {
  TargetCase target;
  target.problem.model = ReadModelFile(ResolveModelPath("gpt3-1.3b"), 0);
  target.problem.cluster =
      ReadClusterFile(ResolveClusterPath("p3.16xlarge-datasheet")).WithNodes(2);
  target.problem.training.global_batch_size = global_batch;
  Plan& plan = target.plan;
  plan.global_batch_size = global_batch;
  plan.num_microbatches = global_batch / 8;
  const int L = target.problem.model.NumLayers();
  StageConfig c;
  c.mesh_nodes = 1;
  c.mesh_gpus_per_node = 8;
  c.data_parallel = 8;
  c.zero_stage = 1;
  plan.stages.push_back({0, L / 2, c});
  c.zero_stage = zero_stage_of_stage_1;
  plan.stages.push_back({L / 2, L, c});
  return target;
}

std::vector<CompressionSpec> AllOptions() {
  std::vector<CompressionSpec> options;
  for (GradCompression kind : AllGradCompressions()) {
    CompressionSpec spec;
    spec.kind = kind;
    options.push_back(spec);
  }
  return options;
}

CoSearchOptions TinySearch(const std::string& checkpoint_dir = "") {
  CoSearchOptions options;
  options.seq_length = 32;
  options.batch_size = 2;
  options.search_steps = 8;
  options.warmup_steps = 2;
  options.validation_windows = 4;
  options.validation_batch = 2;
  options.checkpoint_dir = checkpoint_dir;
  options.checkpoint_every = 4;
  return options;
}

}  // namespace

TEST_CASE("co-search time surrogate: one-hot choices equal Evaluate, gradient = differences") {
  const TargetCase target = SmallTarget();
  const CompressionTimeSurrogate surrogate(target.problem, target.plan, AllOptions());
  const int S = surrogate.NumStages(), K = surrogate.NumOptions();
  REQUIRE(S == 2);
  CHECK(surrogate.BaseSeconds() == doctest::Approx(Evaluate(target.problem, target.plan)
                                                       .iteration_seconds)
                                       .epsilon(1e-12));
  for (int k0 = 0; k0 < K; ++k0)
    for (int k1 = 0; k1 < K; ++k1) {
      std::vector<std::vector<double>> p(S, std::vector<double>(K, 0.0));
      p[0][k0] = p[1][k1] = 1.0;
      CHECK(surrogate.Seconds(p, 0.0, nullptr) ==
            doctest::Approx(surrogate.DiscreteSeconds({k0, k1})).epsilon(1e-12));
    }
  // A mixed point: dT/dp against central differences (smooth max tau > 0).
  std::vector<std::vector<double>> p(S, std::vector<double>(K, 1.0 / K));
  std::vector<std::vector<double>> gradient;
  const double tau = 0.01 * surrogate.BaseSeconds();
  surrogate.Seconds(p, tau, &gradient);
  for (int s = 0; s < S; ++s)
    for (int k = 0; k < K; ++k) {
      const double h = 1e-6;
      auto plus = p, minus = p;
      plus[s][k] += h;
      minus[s][k] -= h;
      const double numeric =
          (surrogate.Seconds(plus, tau, nullptr) - surrogate.Seconds(minus, tau, nullptr)) / (2 * h);
      CHECK(gradient[s][k] == doctest::Approx(numeric).epsilon(1e-5).scale(surrogate.BaseSeconds()));
    }
  // Throughput-only and smallest-message choices are valid choices of the table.
  const std::vector<int> fastest = surrogate.FastestChoice();
  CHECK(surrogate.DiscreteSeconds(fastest) <= surrogate.BaseSeconds());
  const std::vector<int> smallest = surrogate.SmallestMessageChoice();
  for (int s = 0; s < S; ++s) CHECK(surrogate.Options()[smallest[s]].kind != GradCompression::kNone);
}

TEST_CASE("co-search masks compression where the stage shards its gradients (ZeRO-2)") {
  const TargetCase target = SmallTarget(/*zero_stage_of_stage_1=*/2);
  const CompressionTimeSurrogate surrogate(target.problem, target.plan, AllOptions());
  CHECK(surrogate.Allowed(1, 0));
  for (int k = 1; k < surrogate.NumOptions(); ++k) {
    CHECK(surrogate.Allowed(0, k));
    CHECK_FALSE(surrogate.Allowed(1, k));
  }
  const std::vector<CompressionSpec> all = AllOptions();
  const std::vector<CompressionSpec> without_none(all.begin() + 1, all.end());
  CHECK_THROWS_AS(CompressionTimeSurrogate(target.problem, target.plan, without_none), InputError);
}

TEST_CASE("co-search maps proxy layers onto target stages by relative depth") {
  const TargetCase target = SmallTarget();
  const int L = target.problem.model.NumLayers();
  const std::vector<int> stage = ProxyStageOfLayer(6, target.plan, L);
  CHECK(stage == std::vector<int>{0, 0, 0, 1, 1, 1});
}

TEST_CASE("co-search outer gradient with respect to alpha and beta equals finite differences") {
  // Two batch options (proxy 2 and 4 sequences; target global batch 64 and 128).
  const TargetCase target = SmallTarget(), doubled = SmallTarget(1, 128);
  const CompressionTimeSurrogate surrogate(target.problem, target.plan, AllOptions());
  const CompressionTimeSurrogate surrogate_doubled(doubled.problem, doubled.plan, AllOptions());
  REQUIRE(surrogate_doubled.BaseSeconds() > surrogate.BaseSeconds());
  CoSearchOptions options = TinySearch();
  options.lambda = 0.5;         // a fixed weight: both terms of J matter
  options.learning_rate = 0.03;  // large steps: loss differences far above fp32 rounding
  CoSearcher search(options, {{2, &surrogate}, {4, &surrogate_doubled}});
  REQUIRE(search.NumBatchOptions() == 2);
  for (int i = 0; i < 4; ++i) search.Step();  // two outer steps after the warm-up
  const torch::Tensor alpha = search.FrozenAlpha().clone(), beta = search.FrozenBatchLogits();
  const torch::Tensor gradient = search.FrozenOuterGradient();
  const torch::Tensor batch_gradient = search.FrozenBatchGradient();
  const double h = 1e-2;
  const double largest = std::max(gradient.abs().max().item<double>(),
                                  batch_gradient.abs().max().item<double>());
  REQUIRE(largest > 0);
  CHECK(batch_gradient.abs().max().item<double>() > 0);
  // The validation loss is fp32: differences carry ~1e-6 / h of rounding.
  for (int s = 0; s < surrogate.NumStages(); ++s)
    for (int k = 0; k < surrogate.NumOptions(); ++k) {
      torch::Tensor plus = alpha.clone(), minus = alpha.clone();
      plus[s][k] += h;
      minus[s][k] -= h;
      const double numeric = (search.FrozenOuterObjective(plus, beta) -
                              search.FrozenOuterObjective(minus, beta)) / (2 * h);
      INFO("stage ", s, " option ", k);
      CHECK(gradient[s][k].item<double>() == doctest::Approx(numeric).epsilon(5e-3).scale(largest));
    }
  for (int b = 0; b < 2; ++b) {
    torch::Tensor plus = beta.clone(), minus = beta.clone();
    plus[b] += h;
    minus[b] -= h;
    const double numeric = (search.FrozenOuterObjective(alpha, plus) -
                            search.FrozenOuterObjective(alpha, minus)) / (2 * h);
    INFO("batch option ", b);
    CHECK(batch_gradient[b].item<double>() == doctest::Approx(numeric).epsilon(5e-3).scale(largest));
  }
}

TEST_CASE("co-search batch options: nested batches, the mixture's time, and their rules") {
  const TargetCase target = SmallTarget(), doubled = SmallTarget(1, 128);
  const CompressionTimeSurrogate surrogate(target.problem, target.plan, AllOptions());
  const CompressionTimeSurrogate surrogate_doubled(doubled.problem, doubled.plan, AllOptions());
  CoSearchOptions options = TinySearch();
  options.warmup_steps = 7;  // theta only: both searches train the same mixture
  // Two options with the same proxy batch and target: the mixture's gradient is that batch's
  // (weights 1/2 + 1/2), so the run equals the single option's up to rounding.
  CoSearcher single(options, surrogate);
  CoSearcher twice(options, {{2, &surrogate}, {2, &surrogate}});
  for (int i = 0; i < 3; ++i) single.Step(), twice.Step();
  CHECK(single.LastTrainLoss() == doctest::Approx(twice.LastTrainLoss()).epsilon(1e-6));
  // Adam divides by sqrt(v): where gradients are near 0 it magnifies rounding, so parameters
  // agree to 1% of one step (lr 1e-3), not to fp32 epsilon.
  CHECK((single.FlatParameters() - twice.FlatParameters()).abs().max().item<double>() < 1e-5);
  CHECK(twice.BatchProbabilities() == std::vector<double>{0.5, 0.5});
  // The loss reported is over the largest batch (its first samples are the smaller batch's).
  CoSearcher nested(options, {{2, &surrogate}, {4, &surrogate_doubled}});
  options.batch_size = 4;
  CoSearcher large4(options, surrogate_doubled);
  nested.Step();
  large4.Step();
  CHECK(nested.LastTrainLoss() == doctest::Approx(large4.LastTrainLoss()).epsilon(1e-6));
  // Rules: a batch that does not split over the replicas, options that differ in stages.
  options.batch_size = 2;
  options.dp_replicas = 2;
  CHECK_THROWS_WITH_AS(CoSearcher(options, {{2, &surrogate}, {3, &surrogate_doubled}}),
                       "co-search options: batch size = 3: must be >= 1 and divisible by "
                       "dp_replicas = 2",
                       InputError);
  CompressionSpec none;
  const CompressionTimeSurrogate only_none(target.problem, target.plan, {none});
  CHECK_THROWS_WITH_AS(CoSearcher(options, {{2, &surrogate}, {4, &only_none}}),
                       "co-search options: batch size = 4: its target plan must have the first "
                       "batch option's stages and options",
                       InputError);
  CHECK_THROWS_AS(CoSearcher(options, std::vector<BatchOption>{}), InputError);
}

TEST_CASE("co-search resumed from a checkpoint equals the uninterrupted search") {
  const TargetCase target = SmallTarget();
  const CompressionTimeSurrogate surrogate(target.problem, target.plan, AllOptions());
  const std::string dir = TestDir("cosearch_resume");
  CoSearcher uninterrupted(TinySearch(), surrogate);
  for (int i = 0; i < 8; ++i) uninterrupted.Step();

  {
    CoSearcher first(TinySearch(dir + "/ckpt"), surrogate);
    for (int i = 0; i < 5; ++i) first.Step();  // checkpoint at step 4; step 5 is lost
  }
  CoSearchOptions resumed_options = TinySearch(dir + "/ckpt");
  resumed_options.resume = true;
  CoSearcher resumed(resumed_options, surrogate);
  CHECK(resumed.StepCount() == 4);
  while (resumed.StepCount() < 8) resumed.Step();
  CHECK(torch::equal(resumed.Alpha(), uninterrupted.Alpha()));
  CHECK(torch::equal(resumed.FlatParameters(), uninterrupted.FlatParameters()));
  CHECK(resumed.Lambda() == uninterrupted.Lambda());

  CoSearchOptions missing = TinySearch(dir + "/none");
  missing.resume = true;
  CHECK_THROWS_AS(CoSearcher(missing, surrogate), InputError);
}

TEST_CASE("co-search with DP replicas equals, for none, the runtime's plain DP run") {
  // Only `none`: the mixture is the plain gradient, the outer step leaves theta alone.
  const TargetCase target = SmallTarget();
  CompressionSpec none;
  const CompressionTimeSurrogate surrogate(target.problem, target.plan, {none});
  const TrainOptions dp = TinyOptions(1, 2, 1, 1);  // gpt-tiny, seq 32, batch 4, DP 2, lr 3e-3
  CoSearchOptions options;
  options.seq_length = dp.seq_length;
  options.batch_size = 4;
  options.learning_rate = dp.learning_rate;
  options.seed = dp.seed;
  options.search_steps = dp.steps;
  options.warmup_steps = 1;
  options.validation_windows = 4;
  options.validation_batch = 2;
  options.dp_replicas = 2;
  CoSearcher replicas(options, surrogate);
  std::vector<double> losses;
  for (int i = 0; i < dp.steps; ++i) {
    replicas.Step();
    losses.push_back(replicas.LastTrainLoss());
  }
  const LaunchResult run = RunWorkers(dp, "cosearch_dp_reference");
  INFO(run.Summary());
  REQUIRE(run.Succeeded());
  CheckLossesMatch(MeasuredLosses(TestPath("cosearch_dp_reference")), losses,
                   "co-search, 2 replicas, none vs the runtime's DP 2");
  // One replica with the whole batch: the same trajectory.
  options.dp_replicas = 1;
  CoSearcher single(options, surrogate);
  std::vector<double> single_losses;
  for (int i = 0; i < dp.steps; ++i) {
    single.Step();
    single_losses.push_back(single.LastTrainLoss());
  }
  CheckLossesMatch(single_losses, losses, "co-search, 2 replicas vs 1, none");
}

TEST_CASE("co-search with DP replicas exchanges compressed gradients for real") {
  // PowerSGD of two replicas: both all-reduces run over the Gloo group; the search moves on.
  const TargetCase target = SmallTarget();
  CoSearchOptions options = TinySearch();
  options.dp_replicas = 2;
  const CompressionTimeSurrogate surrogate(target.problem, target.plan, AllOptions());
  CoSearcher search(options, surrogate);
  for (int i = 0; i < 4; ++i) search.Step();
  CHECK(std::isfinite(search.LastValidationLoss()));
  CHECK(!torch::equal(search.Alpha(), torch::zeros_like(search.Alpha())));
  options.dp_replicas = 3;  // batch 2 does not split over 3
  CHECK_THROWS_WITH_AS(CoSearcher(options, surrogate),
                       "co-search options: batch_size = 2: must be divisible by dp_replicas = 3",
                       InputError);
}

TEST_CASE("a fixed plan's validation curve starts at the untrained loss and falls") {
  const TargetCase target = SmallTarget();
  const CompressionTimeSurrogate surrogate(target.problem, target.plan, AllOptions());
  CoSearchOptions options = TinySearch();
  const std::vector<CurvePoint> curve =
      TrainFixedPlan(options, surrogate, {0, 3}, /*steps=*/20, /*eval_every=*/10, 4);
  REQUIRE(curve.size() == 3);
  CHECK(curve[0].step == 0);
  CHECK(curve[2].step == 20);
  CHECK(curve[0].validation_loss == doctest::Approx(std::log(72.0)).epsilon(0.05));
  CHECK(curve[2].validation_loss < curve[0].validation_loss);
}

}  // namespace stratos
