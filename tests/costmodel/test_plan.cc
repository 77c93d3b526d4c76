// Plan JSON round trip and one test per plan input rule, each checking the message names the
// file, the key, the value and the rule.
#include <doctest/doctest.h>

#include <nlohmann/json.hpp>

#include "costmodel/error.h"
#include "costmodel/plan.h"
#include "costmodel/synthetic.h"

using namespace stratos;
using nlohmann::json;

namespace {

json ValidPlanJson() {
  return json::parse(R"({
    "schema": "stratos.plan/1", "global_batch_size": 3, "num_microbatches": 3, "schedule": "1f1b",
    "stages": [
      {"first_layer": 0, "last_layer": 6, "mesh": [1, 1], "data_parallel": 1,
       "tensor_parallel": 1, "zero_stage": 0, "recompute": "none", "grad_compression": "none"},
      {"first_layer": 6, "last_layer": 12, "mesh": [1, 1], "data_parallel": 1,
       "tensor_parallel": 1, "zero_stage": 0, "recompute": "none"}]})");
}

std::string PlanError(const json& j) {
  try {
    const SeedCase seed = MakeSeedPartitionCase(12, 2, 3, 1.0, 2.0);
    ValidatePlan(seed.problem, PlanFromJson(j, "p.json"), "p.json");
  } catch (const InputError& e) {
    return e.what();
  }
  return "";
}

void CheckMentions(const std::string& message, std::initializer_list<const char*> parts) {
  INFO("message: ", message);
  CHECK(message.rfind("p.json", 0) == 0);
  for (const char* part : parts) CHECK(message.find(part) != std::string::npos);
}

}  // namespace

TEST_CASE("plan JSON round-trips") {
  const Plan plan = PlanFromJson(ValidPlanJson(), "p.json");
  CHECK(plan.NumStages() == 2);
  CHECK(plan.stages[1].first_layer == 6);
  const Plan again = PlanFromJson(PlanToJson(plan), "again.json");
  CHECK(PlanToJson(again) == PlanToJson(plan));
  CHECK(PlanError(ValidPlanJson()) == "");
}

TEST_CASE("SplitLayersEvenly gives contiguous ranges differing by at most one") {
  const auto ranges = SplitLayersEvenly(10, 4);
  REQUIRE(ranges.size() == 4);
  CHECK(ranges[0] == std::pair<int, int>{0, 2});
  CHECK(ranges[3] == std::pair<int, int>{7, 10});
  CHECK_THROWS_AS(SplitLayersEvenly(3, 4), InputError);
}

TEST_CASE("plan rule: wrong schema") {
  json j = ValidPlanJson();
  j["schema"] = "stratos.plan/0";
  CheckMentions(PlanError(j), {"schema", "stratos.plan/0", "must be"});
}

TEST_CASE("plan rule: unknown key") {
  json j = ValidPlanJson();
  j["stages"][0]["pipline"] = 1;
  CheckMentions(PlanError(j), {"stages[0].pipline", "unknown key"});
}

TEST_CASE("plan rule: missing key") {
  json j = ValidPlanJson();
  j["stages"][1].erase("tensor_parallel");
  CheckMentions(PlanError(j), {"stages[1].tensor_parallel", "missing"});
}

TEST_CASE("plan rule: wrong type") {
  json j = ValidPlanJson();
  j["num_microbatches"] = "three";
  CheckMentions(PlanError(j), {"num_microbatches", "\"three\"", "integer"});
}

TEST_CASE("plan rule: stages must cover the layers in order") {
  json j = ValidPlanJson();
  j["stages"][1]["first_layer"] = 7;
  CheckMentions(PlanError(j), {"stages[1].first_layer", "7", "must be 6"});
  j = ValidPlanJson();
  j["stages"][1]["last_layer"] = 11;
  CheckMentions(PlanError(j), {"stages[1].last_layer", "11", "cover all layers"});
}

TEST_CASE("plan rule: devices must exist in the cluster") {
  json j = ValidPlanJson();
  j["stages"][0]["mesh"] = {1, 4};
  j["stages"][0]["data_parallel"] = 4;
  CheckMentions(PlanError(j), {"stages", "devices", "only 2 devices"});
}

TEST_CASE("plan rule: degrees must multiply to the mesh") {
  json j = ValidPlanJson();
  j["stages"][0]["data_parallel"] = 2;
  CheckMentions(PlanError(j), {"stages[0]", "dp2", "!= 1 devices"});
}

TEST_CASE("plan rule: batch must match the problem") {
  json j = ValidPlanJson();
  j["global_batch_size"] = 4;
  CheckMentions(PlanError(j), {"global_batch_size", "4", "must equal"});
}

TEST_CASE("plan rule: unknown recompute mode") {
  json j = ValidPlanJson();
  j["stages"][0]["recompute"] = "some";
  CheckMentions(PlanError(j), {"recompute", "some", "selective"});
}
