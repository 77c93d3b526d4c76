// Successive halving over initializations (cosearch/successive_halving.h), on synthetic loss
// tables: the first rung after the steep drop, the expected survivors, the steps accounted.
#include <doctest/doctest.h>

#include <cmath>
#include <vector>

#include "cosearch/successive_halving.h"
#include "costmodel/error.h"

namespace stratos {
namespace {

// A loss table: run r's validation loss after `step` steps falls from 2 to floors[r] with time
// constant tau[r] (steps).
struct Table {
  std::vector<double> floors, tau;
  std::vector<int> steps;  // steps each run has trained
  double Advance(int run, int n) {
    steps[run] += n;
    return floors[run] + (2.0 - floors[run]) * std::exp(-steps[run] / tau[run]);
  }
};

}  // namespace

TEST_CASE("PlateauIndex: the first evaluation where the relative drop per evaluation is small") {
  CHECK(PlateauIndex({2.0, 1.0, 0.5, 0.49, 0.485, 0.484}, 1, 0.05) == 3);
  CHECK(PlateauIndex({2.0, 1.0, 0.5, 0.49, 0.485, 0.484}, 2, 0.05) == 4);
  CHECK(PlateauIndex({2.0, 1.0, 0.5}, 1, 0.05) == -1);
  CHECK(PlateauIndex({}, 1, 0.05) == -1);
}

TEST_CASE("successive halving keeps the runs with the lower losses, after the steep drop") {
  Table table{{1.30, 1.10, 1.25, 1.05, 1.40, 1.20, 1.15, 1.35}, std::vector<double>(8, 30.0),
              std::vector<int>(8, 0)};
  HalvingOptions options;
  options.evaluation_steps = 10;
  options.plateau_window = 2;
  options.plateau_drop = 0.02;
  options.max_first_rung_steps = 300;
  options.step_budget = 600;
  const HalvingResult result = SuccessiveHalving(
      8, options, [&](int run, int steps) { return table.Advance(run, steps); });
  CHECK(result.survivor == 3);  // the lowest floor
  REQUIRE(result.rung_steps.size() == 3);
  // The first rung once the mean loss falls by less than 2% per evaluation over 2 evaluations:
  // the drop exp(-s/30) is that slow after about 100 steps, well before the 300-step cap.
  CHECK(result.rung_steps[0] >= 80);
  CHECK(result.rung_steps[0] <= 150);
  CHECK(result.rung_steps[1] == 2 * result.rung_steps[0]);
  CHECK(result.rung_steps[2] == 4 * result.rung_steps[0]);
  // Rung 1 keeps floors 1.05, 1.10, 1.15, 1.20 (runs 3, 1, 6, 5); rung 2 runs 3 and 1.
  for (int run : {0, 2, 4, 7}) CHECK(result.stopped_at_step[run] == result.rung_steps[0]);
  for (int run : {5, 6}) CHECK(result.stopped_at_step[run] == result.rung_steps[1]);
  CHECK(result.stopped_at_step[1] == result.rung_steps[2]);
  CHECK(result.stopped_at_step[3] == 600);
  long total = 0;
  for (int run = 0; run < 8; ++run) {
    CHECK(table.steps[run] == result.stopped_at_step[run]);
    CHECK(static_cast<int>(result.curves[run].size()) == result.stopped_at_step[run] / 10);
    total += result.stopped_at_step[run];
  }
  CHECK(result.total_steps == total);
}

TEST_CASE("successive halving judges at the rung: a slow starter that ends lowest is stopped") {
  // Run 1 ends lower (1.0) but falls ten times slower; at the first rung it is behind.
  Table table{{1.2, 1.0}, {20.0, 200.0}, {0, 0}};
  HalvingOptions options;
  options.plateau_window = 2;
  options.max_first_rung_steps = 100;
  options.step_budget = 400;
  const HalvingResult result = SuccessiveHalving(
      2, options, [&](int run, int steps) { return table.Advance(run, steps); });
  CHECK(result.survivor == 0);
  CHECK(result.rung_steps.size() == 1);
  CHECK(result.stopped_at_step[1] == result.rung_steps[0]);
}

TEST_CASE("successive halving: without a plateau the first rung is at the cap; one run trains "
          "to the budget") {
  // Losses falling very slowly, but by more than the threshold: no plateau is ever declared.
  Table table{{0.1, 0.2, 0.3}, {1e6, 1e6, 1e6}, {0, 0, 0}};
  HalvingOptions options;
  options.plateau_drop = 1e-9;
  options.max_first_rung_steps = 50;
  options.step_budget = 100;
  const HalvingResult three = SuccessiveHalving(
      3, options, [&](int run, int steps) { return table.Advance(run, steps); });
  CHECK(three.rung_steps.front() == 50);
  CHECK(three.survivor == 0);
  Table one{{0.5}, {10.0}, {0}};
  const HalvingResult single =
      SuccessiveHalving(1, options, [&](int run, int steps) { return one.Advance(run, steps); });
  CHECK(single.survivor == 0);
  CHECK(single.rung_steps.empty());
  CHECK(single.stopped_at_step[0] == 100);
  CHECK(single.total_steps == 100);
}

TEST_CASE("successive halving reports every round with the live runs") {
  Table table{{1.3, 1.1, 1.2}, {10.0, 10.0, 10.0}, {0, 0, 0}};
  HalvingOptions options;
  options.plateau_drop = 0.5;
  options.plateau_window = 1;
  options.max_first_rung_steps = 20;
  options.step_budget = 60;
  std::vector<std::pair<int, size_t>> rounds;  // (step, live runs)
  const HalvingResult result = SuccessiveHalving(
      3, options, [&](int run, int steps) { return table.Advance(run, steps); },
      [&](int step, const std::vector<int>& live, const HalvingResult& so_far) {
        rounds.emplace_back(step, live.size());
        long trained = 0;
        for (const auto& curve : so_far.curves) trained += 10 * static_cast<long>(curve.size());
        CHECK(so_far.total_steps == trained);
      });
  REQUIRE(rounds.size() == 6);  // steps 10 .. 60
  CHECK(rounds.front() == std::make_pair(10, size_t{3}));
  CHECK(rounds.back() == std::make_pair(60, size_t{1}));
  CHECK(result.survivor == 1);
}

TEST_CASE("steps to a target loss, compute and priced time of a halving run") {
  // Losses after 10, 20, 30 steps.
  CHECK(StepsToTarget({2.0, 1.5, 1.0}, 10, 1.5) == doctest::Approx(20));
  CHECK(StepsToTarget({2.0, 1.5, 1.0}, 10, 1.25) == doctest::Approx(25));
  CHECK(StepsToTarget({2.0, 1.5, 1.0}, 10, 3.0) == doctest::Approx(10));
  CHECK(StepsToTarget({2.0, 1.5, 1.0}, 10, 0.5) == -1);
  CHECK(StepsToTarget({2.0, 2.5, 1.0}, 10, 1.5) == doctest::Approx(30 - 10 * 0.5 / 1.5));

  // Four runs: two stopped at 20, one at 40, the survivor at 100.
  HalvingResult result;
  result.survivor = 3;
  result.stopped_at_step = {20, 40, 20, 100};
  CHECK(ComputeSteps(result, 10) == doctest::Approx(40));
  CHECK(ComputeSteps(result, 30) == doctest::Approx(20 + 30 + 20 + 30));
  CHECK(ComputeSteps(result, 100) == doctest::Approx(180));
  // A step costs n seconds with n runs live (each on 1/n of the cluster).
  const auto per_step = [](int live) { return static_cast<double>(live); };
  CHECK(PricedSeconds(result, 10, per_step) == doctest::Approx(40));
  CHECK(PricedSeconds(result, 30, per_step) == doctest::Approx(20 * 4 + 10 * 2));
  CHECK(PricedSeconds(result, 100, per_step) == doctest::Approx(80 + 20 * 2 + 60));
  // n runs on 1/n of the cluster with perfect scaling cost the same as the compute.
  CHECK(PricedSeconds(result, 100, per_step) == doctest::Approx(ComputeSteps(result, 100)));
}

TEST_CASE("successive halving options are checked by name") {
  HalvingOptions options;
  options.eta = 1;
  CHECK_THROWS_WITH_AS(options.Validate(), "halving.eta = 1: must be >= 2", InputError);
  options = HalvingOptions{};
  options.step_budget = 10;
  CHECK_THROWS_WITH_AS(options.Validate(),
                       "halving.step_budget = 10: must be >= halving.max_first_rung_steps = 200",
                       InputError);
  options = HalvingOptions{};
  options.plateau_drop = 1.5;
  CHECK_THROWS_WITH_AS(options.Validate(), "halving.plateau_drop = 1.5: must be in (0, 1)",
                       InputError);
}

}  // namespace stratos
