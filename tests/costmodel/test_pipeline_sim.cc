#include <doctest/doctest.h>

#include <nlohmann/json.hpp>

#include "costmodel/error.h"
#include "costmodel/pipeline_sim.h"

using namespace stratos;

TEST_CASE("simulated GPipe and 1F1B equal the closed form (m + p - 1)(f + b) on uniform stages") {
  for (Schedule schedule : {Schedule::kGpipe, Schedule::kOneFOneB}) {
    for (int p : {1, 2, 4, 8}) {
      for (int m : {1, 3, 8, 16}) {
        const double f = 0.7, b = 1.9;
        const std::vector<SimStage> stages(p, SimStage{f, b, 0.0});
        const SimResult r = SimulatePipeline(stages, m, schedule);
        INFO("schedule=", ScheduleName(schedule), " p=", p, " m=", m);
        CHECK(r.pipeline_seconds == doctest::Approx((m + p - 1) * (f + b)));
        // The closed form of cost_model.h: sum t + (m - 1) max t.
        CHECK(r.pipeline_seconds == doctest::Approx(p * (f + b) + (m - 1) * (f + b)));
        CHECK(r.events.size() == static_cast<size_t>(2 * m * p));
      }
    }
  }
}

TEST_CASE("the slowest stage paces a non-uniform pipeline") {
  const std::vector<SimStage> stages = {{1, 2, 0}, {2, 4, 0}, {1, 2, 0}};
  const SimResult r = SimulatePipeline(stages, 8, Schedule::kOneFOneB);
  // At least the bottleneck's busy time plus the others' first forward and last backward.
  CHECK(r.pipeline_seconds >= 8 * 6 + 1 + 2 - 1e-9);
  CHECK(r.busy_seconds[1] == doctest::Approx(48));
}

TEST_CASE("stage tails run after each stage's last backward") {
  const std::vector<SimStage> stages = {{1, 1, 5}, {1, 1, 0.5}};
  const SimResult r = SimulatePipeline(stages, 2, Schedule::kOneFOneB);
  CHECK(r.iteration_seconds == doctest::Approx(r.pipeline_seconds + 5));
}

TEST_CASE("chrome trace has one complete event per pass, in microseconds") {
  const std::vector<SimStage> stages(2, SimStage{0.001, 0.002, 0.0});
  const SimResult r = SimulatePipeline(stages, 2, Schedule::kGpipe);
  const nlohmann::json trace = ChromeTrace(r, "test");
  int complete = 0;
  for (const auto& e : trace["traceEvents"])
    if (e["ph"] == "X") {
      ++complete;
      CHECK(e["dur"].get<double>() >= 1000 - 1e-6);
    }
  CHECK(complete == 8);
}

TEST_CASE("bad simulator input is an InputError") {
  CHECK_THROWS_AS(SimulatePipeline({}, 2, Schedule::kGpipe), InputError);
  CHECK_THROWS_AS(SimulatePipeline({SimStage{}}, 0, Schedule::kGpipe), InputError);
}
