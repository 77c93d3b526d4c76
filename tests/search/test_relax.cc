// Tests of the continuous relaxation (relax/) and RelaxSearcher (search/relax_searcher.h).
#include <doctest/doctest.h>
#include <torch/torch.h>

#include <algorithm>
#include <cmath>
#include <fstream>
#include <limits>
#include <optional>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "baselines/exhaustive_searcher.h"
#include "costmodel/error.h"
#include "costmodel/evaluate.h"
#include "costmodel/synthetic.h"
#include "relax/polish.h"
#include "relax/surrogate.h"
#include "relax/tables.h"
#include "search/relax_searcher.h"
#include "tests/search/search_test_util.h"

namespace stratos {
namespace {

// A random structurally valid plan of the space: random stage count, cuts, microbatch count and
// per-stage configs (valid for m, within the device budget). nullopt if the draw fails.
std::optional<Plan> RandomPlan(const RelaxTables& tables, std::mt19937_64& rng) {
  const int L = tables.num_layers;
  std::uniform_int_distribution<int> stage_count(tables.min_stages, tables.max_stages);
  const int S = stage_count(rng);
  if (S > tables.num_devices) return std::nullopt;
  std::uniform_int_distribution<int> m_pick(0, tables.num_microbatch_options - 1);
  const int m = m_pick(rng);
  std::vector<int> cuts(L - 1);
  for (int j = 0; j + 1 < L; ++j) cuts[j] = j + 1;
  std::shuffle(cuts.begin(), cuts.end(), rng);
  cuts.resize(S - 1);
  std::sort(cuts.begin(), cuts.end());
  Plan plan;
  plan.global_batch_size = tables.global_batch_size;
  plan.num_microbatches = tables.num_microbatches[m];
  plan.schedule = tables.schedule;
  int devices_left = tables.num_devices;
  for (int s = 0; s < S; ++s) {
    std::vector<int> options;
    for (int k = 0; k < tables.num_configs; ++k)
      if (tables.Valid(k, m) && tables.configs[k].NumDevices() <= devices_left - (S - 1 - s))
        options.push_back(k);
    if (options.empty()) return std::nullopt;
    const int k = options[std::uniform_int_distribution<size_t>(0, options.size() - 1)(rng)];
    devices_left -= tables.configs[k].NumDevices();
    StagePlan stage;
    stage.first_layer = s == 0 ? 0 : cuts[s - 1];
    stage.last_layer = s == S - 1 ? L : cuts[s];
    stage.config = tables.configs[k];
    plan.stages.push_back(stage);
  }
  return plan;
}

std::vector<int> AllConfigs(const RelaxTables& tables) {
  std::vector<int> all(tables.num_configs);
  for (int k = 0; k < tables.num_configs; ++k) all[k] = k;
  return all;
}

TEST_CASE("relax: surrogate at one-hot parameters equals Evaluate (1e-6 relative) on random "
          "plans of both schedules, with ZeRO, recompute, several stage counts, several "
          "data-parallel stages whose tails differ, and DP gradient buckets") {
  int checked = 0, with_zero = 0, with_recompute = 0, gpipe = 0, one_f_one_b = 0, multi_stage = 0,
      fitting = 0, tails_differ = 0, bucketed = 0;
  for (std::uint64_t draw_seed = 1; draw_seed <= 24; ++draw_seed) {
    // Seeds 13-24: the problems of 1-12 with buckets (TermScalars::TailSeconds).
    const std::uint64_t seed = (draw_seed - 1) % 12 + 1;
    Problem problem = MakeRandomSmallProblem(seed);
    if (draw_seed > 12) problem = testing::WithDpBuckets(problem, seed);
    for (Schedule schedule : {Schedule::kGpipe, Schedule::kOneFOneB}) {
      problem.training.schedule = schedule;
      const CostModel cost_model(problem);
      const SearchSpace space = SearchSpace::Build(problem);
      const RelaxTables tables = BuildRelaxTables(cost_model, space);
      const SurrogateTensors tensors = MakeSurrogateTensors(tables, AllConfigs(tables));
      std::mt19937_64 rng(seed * 7 + static_cast<int>(schedule));
      for (int draw = 0; draw < 6; ++draw) {
        const std::optional<Plan> plan = RandomPlan(tables, rng);
        if (!plan) continue;
        const Estimate estimate = Evaluate(cost_model, *plan);
        for (const StageEstimate& stage : estimate.stages)
          bucketed += stage.terms.BucketedDpExposedSeconds() > 0;
        const SurrogateResult value =
            EvaluateSurrogate(tensors, OneHotProbabilities(tables, tensors, *plan), {});
        const double surrogate = value.iteration_seconds.item<double>();
        INFO("seed ", seed, " plan ", plan->Summary());
        CHECK(std::abs(surrogate - estimate.iteration_seconds) <=
              1e-6 * estimate.iteration_seconds);
        CHECK(value.device_excess.item<double>() == 0.0);
        CHECK(value.stage_count_excess.item<double>() == 0.0);
        if (estimate.Fits()) {
          CHECK(value.penalty_seconds.item<double>() == 0.0);
          ++fitting;
        } else {
          CHECK(value.memory_excess.item<double>() > 0.0);
        }
        // The discrete table cost agrees too.
        PlanPolisher polisher(tables);
        const DiscreteCost table_cost = polisher.Cost(polisher.FromPlan(*plan));
        CHECK(table_cost.valid);
        CHECK(std::abs(table_cost.iteration_seconds - estimate.iteration_seconds) <=
              1e-9 * estimate.iteration_seconds);
        CHECK(table_cost.Fits() == estimate.Fits());
        ++checked;
        for (const StagePlan& stage : plan->stages) {
          with_zero += stage.config.zero_stage > 0;
          with_recompute += stage.config.recompute != Recompute::kNone;
        }
        gpipe += schedule == Schedule::kGpipe;
        one_f_one_b += schedule == Schedule::kOneFOneB;
        multi_stage += plan->NumStages() >= 3;
        // Two or more data-parallel stages with different exposed tails: max_s e_s != sum_s e_s
        // and the max is not attained everywhere.
        int dp_stages = 0;
        double max_e = 0, min_e = std::numeric_limits<double>::infinity();
        for (size_t s = 0; s < plan->stages.size(); ++s) {
          const double e = estimate.stages[s].tail_seconds;
          max_e = std::max(max_e, e);
          min_e = std::min(min_e, e);
          if (plan->stages[s].config.data_parallel > 1) ++dp_stages;
        }
        if (dp_stages >= 2 && max_e > min_e * (1 + 1e-6)) {
          ++tails_differ;
          // The smooth max upper-bounds the max and tends to it as tau -> 0.
          double previous = std::numeric_limits<double>::infinity();
          for (double tau : {1e-2, 1e-4, 1e-7}) {
            SurrogateSettings settings;
            settings.smoothmax_tau_seconds = tau * estimate.iteration_seconds;
            const double smooth =
                EvaluateSurrogate(tensors, OneHotProbabilities(tables, tensors, *plan), settings)
                    .iteration_seconds.item<double>();
            CHECK(smooth >= estimate.iteration_seconds * (1 - 1e-9));
            CHECK(smooth <= previous * (1 + 1e-12));
            previous = smooth;
          }
          CHECK(std::abs(previous - estimate.iteration_seconds) <=
                1e-5 * estimate.iteration_seconds);
        }
      }
    }
  }
  CHECK(checked >= 120);
  CHECK(bucketed >= 20);
  CHECK(with_zero > 0);
  CHECK(with_recompute > 0);
  CHECK(gpipe > 0);
  CHECK(one_f_one_b > 0);
  CHECK(multi_stage > 0);
  CHECK(fitting > 0);
  CHECK(tails_differ >= 5);
}

TEST_CASE("relax: fused stage-probability recursion matches the tensor-op reference in value "
          "and gradient, keeps stages contiguous and sums to one") {
  torch::manual_seed(3);
  torch::Tensor cut = torch::rand({3, 9}, torch::kFloat64);
  for (int S : {1, 2, 4, 10}) {
    torch::Tensor a = cut.clone().requires_grad_(true);
    torch::Tensor b = cut.clone().requires_grad_(true);
    torch::Tensor pa = StageLayerProbabilities(a, S);
    torch::Tensor pb = StageLayerProbabilitiesReference(b, S);
    CHECK(torch::allclose(pa, pb, 1e-12, 1e-14));
    CHECK(torch::allclose(pa.sum(2), torch::ones({3, 10}, torch::kFloat64), 1e-12, 1e-12));
    torch::Tensor weights = torch::rand({3, 10, S}, torch::kFloat64);
    (pa * weights).sum().backward();
    (pb * weights).sum().backward();
    CHECK(torch::allclose(a.grad(), b.grad(), 1e-10, 1e-12));
  }
  // Saturated cuts: layer l is in stage (number of cuts before it), capped at S - 1.
  torch::Tensor hard = torch::tensor({{0.0, 1.0, 0.0, 1.0, 1.0}}, torch::kFloat64);
  torch::Tensor p = StageLayerProbabilities(hard, 3);
  const std::vector<int> expected{0, 0, 1, 1, 2, 2};
  for (int l = 0; l < 6; ++l) CHECK(p[0][l][expected[l]].item<double>() == 1.0);
}

TEST_CASE("relax: fused surrogate kernel matches the plain tensor-op surrogate in value and "
          "gradient") {
  Problem problem = MakeRandomSmallProblem(6);
  for (Schedule schedule : {Schedule::kGpipe, Schedule::kOneFOneB}) {
    problem.training.schedule = schedule;
    const CostModel cost_model(problem);
    const RelaxTables tables = BuildRelaxTables(cost_model, SearchSpace::Build(problem));
    const SurrogateTensors tensors = MakeSurrogateTensors(tables, AllConfigs(tables));
    const int L = tables.num_layers, S = tables.max_stages, M = tables.num_microbatch_options;
    const int K = static_cast<int>(tensors.config_indices.size());
    torch::manual_seed(9);
    SurrogateLogits base{torch::randn({3, L - 1}, torch::kFloat64),
                         torch::randn({3, S, K}, torch::kFloat64),
                         torch::randn({3, M}, torch::kFloat64)};
    SurrogateSettings settings;
    settings.smoothmax_tau_seconds = 1e-3;
    std::vector<torch::Tensor> values, grads;
    for (bool reference : {false, true}) {
      SurrogateLogits x{base.cut.clone().requires_grad_(true),
                        base.config.clone().requires_grad_(true),
                        base.microbatch.clone().requires_grad_(true)};
      const SurrogateResult r = EvaluateSurrogate(
          tensors, SurrogateProbabilitiesFromLogits(x, 0.7, false, false), settings, reference);
      r.objective.sum().backward();
      values.push_back(torch::stack({r.iteration_seconds, r.memory_excess, r.objective}));
      grads.push_back(torch::cat({x.cut.grad().flatten(), x.config.grad().flatten(),
                                  x.microbatch.grad().flatten()}));
    }
    CHECK(torch::allclose(values[0], values[1], 1e-10, 1e-14));
    CHECK(torch::allclose(grads[0], grads[1], 1e-8, 1e-12));
  }
}

TEST_CASE("relax: surrogate gradient matches central finite differences (1e-4 relative) at a "
          "random interior point") {
  for (std::uint64_t seed : {2, 5}) {
    Problem problem = MakeRandomSmallProblem(seed);
    const CostModel cost_model(problem);
    const SearchSpace space = SearchSpace::Build(problem);
    const RelaxTables tables = BuildRelaxTables(cost_model, space);
    const SurrogateTensors tensors = MakeSurrogateTensors(tables, tables.undominated_configs);
    const int R = 2, L = tables.num_layers, S = tables.max_stages;
    const int K = static_cast<int>(tensors.config_indices.size());
    const int M = tables.num_microbatch_options;
    torch::manual_seed(static_cast<int64_t>(seed));
    SurrogateLogits logits{torch::randn({R, L - 1}, torch::kFloat64),
                           torch::randn({R, S, K}, torch::kFloat64),
                           torch::randn({R, M}, torch::kFloat64)};
    SurrogateSettings settings;
    settings.penalty_scale_seconds = 0.5;
    settings.smoothmax_tau_seconds = 1e-3;
    const double objective =
        EvaluateSurrogate(tensors, SurrogateProbabilitiesFromLogits(logits, 1.0, false, false),
                          settings)
            .objective.sum()
            .item<double>();
    const GradientCheckResult check = CheckSurrogateGradient(
        tensors, logits, settings, /*relative_step=*/1e-5,
        /*absolute_floor=*/1e-6 * std::abs(objective), /*max_probes=*/150);
    INFO("seed ", seed, ": worst ", check.worst_entry);
    CHECK(check.entries_checked > 50);
    CHECK(check.max_relative_error < 1e-4);
  }
}

TEST_CASE("relax: RelaxSearcher solves every seed pipeline-partition case to its optimal cost") {
  const std::vector<SeedCaseRow> rows = ReadSeedPartitionCases();
  CHECK(rows.size() >= 13);
  for (const SeedCaseRow& row : rows) {
    const SeedCase seed = MakeSeedPartitionCase(row.num_layers, row.num_stages,
                                                row.num_microbatches, row.layer_cost,
                                                row.cut_cost);
    SearchOptions options;
    options.space = seed.space;
    options.time_limit_seconds = 30;
    RelaxOptions relax;
    relax.restarts = 4;
    relax.iterations = 60;
    RelaxSearcher searcher(relax);
    const SearchResult result = searcher.Search(seed.problem, options);
    INFO("L=", row.num_layers, " k=", row.num_stages, " B=", row.num_microbatches, ": ",
         result.summary.BriefReport());
    REQUIRE(result.plan.has_value());
    const Estimate estimate = Evaluate(seed.problem, *result.plan);
    CHECK(std::abs(estimate.steady_seconds + estimate.tail_seconds - row.optimal_cost) <= 1e-9);
    CHECK(result.summary.algorithm == "relax");
  }
}

TEST_CASE("relax: RelaxSearcher returns valid plans that fit, within 2% of the exhaustive "
          "optimum, on random small problems") {
  int solved = 0;
  for (std::uint64_t seed = 1; seed <= 10; ++seed) {
    const Problem problem = MakeRandomSmallProblem(seed);
    SearchOptions options;
    options.seed = static_cast<int>(seed);
    options.time_limit_seconds = 30;
    RelaxOptions relax;
    relax.restarts = 8;
    relax.iterations = 60;
    RelaxSearcher searcher(relax);
    const SearchResult result = searcher.Search(problem, options);
    ExhaustiveSearcher exhaustive;
    const SearchResult optimum = exhaustive.Search(problem, options);
    REQUIRE(optimum.summary.termination != TerminationType::kTimeLimit);
    REQUIRE(optimum.summary.message.find("too large") == std::string::npos);
    INFO("seed ", seed, ": ", result.summary.BriefReport(), " | ", optimum.summary.BriefReport());
    CHECK(result.plan.has_value() == optimum.plan.has_value());
    if (!result.plan) {
      CHECK(result.summary.termination == TerminationType::kInfeasible);
      CHECK(!result.summary.message.empty());
      continue;
    }
    CHECK_NOTHROW(ValidatePlan(problem, *result.plan));
    const Estimate estimate = Evaluate(problem, *result.plan);
    CHECK(estimate.Fits());
    CHECK(estimate.iteration_seconds == doctest::Approx(result.summary.best_iteration_seconds));
    CHECK(result.summary.termination == TerminationType::kConverged);
    CHECK(!result.summary.anytime.empty());
    CHECK(result.summary.iterations == relax.iterations);
    CHECK(result.summary.evaluations > 0);
    if (optimum.plan) {
      CHECK(estimate.iteration_seconds >=
            optimum.summary.best_iteration_seconds * (1 - 1e-9));
      CHECK(estimate.iteration_seconds <= optimum.summary.best_iteration_seconds * 1.02);
    }
    ++solved;
  }
  CHECK(solved > 0);
}

TEST_CASE("relax: RelaxSearcher with its default options stays within 2% of the exhaustive "
          "optimum on random small problems, with and without DP gradient buckets") {
  for (std::uint64_t draw_seed = 1; draw_seed <= 20; ++draw_seed) {
    const std::uint64_t seed = (draw_seed - 1) % 10 + 1;
    const Problem problem = draw_seed > 10
                                ? testing::WithDpBuckets(MakeRandomSmallProblem(seed), seed)
                                : MakeRandomSmallProblem(seed);
    SearchOptions options;
    options.seed = static_cast<int>(seed);
    options.time_limit_seconds = 30;
    RelaxSearcher searcher;  // RelaxOptions defaults
    const SearchResult result = searcher.Search(problem, options);
    ExhaustiveSearcher exhaustive;
    const SearchResult optimum = exhaustive.Search(problem, options);
    REQUIRE(optimum.summary.termination != TerminationType::kTimeLimit);
    INFO("seed ", draw_seed, ": ", result.summary.BriefReport(), " | ",
         optimum.summary.BriefReport());
    CHECK(result.plan.has_value() == optimum.plan.has_value());
    if (!result.plan || !optimum.plan) continue;
    const Estimate estimate = Evaluate(problem, *result.plan);
    CHECK(estimate.Fits());
    CHECK(estimate.iteration_seconds == doctest::Approx(result.summary.best_iteration_seconds));
    CHECK(result.summary.iterations == RelaxOptions{}.iterations);
    CHECK(estimate.iteration_seconds <= optimum.summary.best_iteration_seconds * 1.02);
  }
}

TEST_CASE("relax: RelaxSearcher is deterministic for a seed and honours a tiny time limit") {
  const Problem problem = MakeRandomSmallProblem(4);
  SearchOptions options;
  options.seed = 11;
  RelaxOptions relax;
  relax.restarts = 4;
  relax.iterations = 40;
  RelaxSearcher searcher(relax);
  const SearchResult a = searcher.Search(problem, options);
  const SearchResult b = searcher.Search(problem, options);
  REQUIRE(a.plan.has_value() == b.plan.has_value());
  if (a.plan) CHECK(a.plan->Summary() == b.plan->Summary());
  CHECK(a.summary.best_iteration_seconds == b.summary.best_iteration_seconds);

  options.time_limit_seconds = 1e-6;
  const SearchResult limited = searcher.Search(problem, options);
  CHECK((limited.summary.termination == TerminationType::kTimeLimit ||
         limited.summary.termination == TerminationType::kInfeasible));
  if (limited.plan) {
    CHECK_NOTHROW(ValidatePlan(problem, *limited.plan));
    CHECK(Evaluate(problem, *limited.plan).Fits());
  }
}

TEST_CASE("relax: RelaxOptions::Validate names the option as users write it, and the rule") {
  RelaxOptions options;
  CHECK_NOTHROW(options.Validate());
  options.restarts = 0;
  CHECK_THROWS_WITH_AS(options.Validate(), "relax.restarts = 0: must be >= 1", InputError);
  options = RelaxOptions{};
  options.final_temperature = 2.0;
  CHECK_THROWS_WITH_AS(options.Validate(),
                       doctest::Contains("relax.final_temperature = 2: must be > 0 and <= "
                                         "relax.initial_temperature = "),
                       InputError);
  options = RelaxOptions{};
  options.learning_rate = -1;
  CHECK_THROWS_WITH_AS(options.Validate(), "relax.learning_rate = -1: must be > 0", InputError);
  options = RelaxOptions{};
  options.min_config_probability = 1;
  CHECK_THROWS_AS(options.Validate(), InputError);
  options = RelaxOptions{};
  options.level_search_options = -1;
  CHECK_THROWS_WITH_AS(options.Validate(), "relax.level_search_options = -1: must be >= 0",
                       InputError);
  options = RelaxOptions{};
  options.refine_options = 0;
  CHECK_THROWS_WITH_AS(options.Validate(), "relax.refine_options = 0: must be >= 1", InputError);
  options = RelaxOptions{};
  options.extend_max_decodes = 0;
  CHECK_THROWS_WITH_AS(options.Validate(), "relax.extend_max_decodes = 0: must be >= 1",
                       InputError);
  options = RelaxOptions{};
  options.level_search_max_probes = 0;
  CHECK_THROWS_WITH_AS(options.Validate(), "relax.level_search_max_probes = 0: must be >= 1",
                       InputError);
}

}  // namespace
}  // namespace stratos
