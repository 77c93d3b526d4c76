// Plan JSON round trip and one test per plan input rule, each checking the message names the
// file, the key, the value and the rule.
#include <doctest/doctest.h>

#include <nlohmann/json.hpp>

#include <climits>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <limits>

#include "costmodel/checked_number.h"
#include "costmodel/error.h"
#include "costmodel/json_reader.h"
#include "costmodel/plan.h"
#include "costmodel/synthetic.h"
#include "costmodel/model_io.h"
#include "costmodel/zoo.h"

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

TEST_CASE("virtual stages: optional on reading, written when > 1, a whole number per rank") {
  CHECK_FALSE(PlanToJson(PlanFromJson(ValidPlanJson(), "p.json")).contains("virtual_stages"));
  json j = ValidPlanJson();
  j["virtual_stages"] = 2;
  // Two entries are one pipeline rank with two chunks: p >= 2 is required.
  CheckMentions(PlanError(j), {"stages", "2 entries", "p >= 2"});
  json four = ValidPlanJson();
  four["stages"] = json::array();
  for (int i = 0; i < 4; ++i)
    four["stages"].push_back({{"first_layer", 3 * i}, {"last_layer", 3 * i + 3}, {"mesh", {1, 1}},
                              {"data_parallel", 1}, {"tensor_parallel", 1}, {"zero_stage", 0},
                              {"recompute", "none"}});
  four["virtual_stages"] = 2;
  CHECK(PlanError(four) == "");
  const Plan plan = PlanFromJson(four, "p.json");
  CHECK(plan.NumPipelineRanks() == 2);
  CHECK(PlanToJson(plan)["virtual_stages"] == 2);
  four["schedule"] = "gpipe";
  CheckMentions(PlanError(four), {"schedule", "gpipe", "interleaved 1F1B"});
  four["schedule"] = "1f1b";
  four["virtual_stages"] = 0;
  CheckMentions(PlanError(four), {"virtual_stages", "0", ">= 1"});
}

TEST_CASE("a mesh too large to count is refused, not overflowed (found by fuzz_plan_json)") {
  json j = ValidPlanJson();
  j["stages"][0]["mesh"] = {999999991, 8};
  const Plan plan = PlanFromJson(j, "p.json");
  CHECK(plan.NumDevices() == INT_MAX);
  CheckMentions(PlanError(j), {"stages", "devices in all", "the cluster has only"});
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

TEST_CASE("plan rule: a number that does not fit its field names file, key, value and rule") {
  json j = ValidPlanJson();
  j["num_microbatches"] = 4294967296LL;  // fits JSON and int64, not an int
  CHECK(PlanError(j) ==
        "p.json: num_microbatches = 4294967296: must be an integer in [-2147483648, 2147483647]");
  j = ValidPlanJson();
  j["stages"][1]["mesh"] = {1, 1e30};  // an integer beyond 64 bits is parsed as a float
  CHECK(PlanError(j) == "p.json: stages[1].mesh[1] = 1e+30: must be an integer in "
                        "[-2147483648, 2147483647]");
  j = ValidPlanJson();
  j["stages"][0]["mesh"] = {1.5, 1};
  CHECK(PlanError(j) == "p.json: stages[0].mesh[0] = 1.5: must be an integer");
  j = ValidPlanJson();
  j["stages"][0]["grad_compression"] = {{"kind", "topk"}, {"density", "dense"}};
  CHECK(PlanError(j) == "p.json: stages[0].grad_compression.density = \"dense\": must be a number");
}

TEST_CASE("plan file: a number that overflows a double is an input error naming its key") {
  std::string text = ValidPlanJson().dump();
  const std::string from = "\"tensor_parallel\":1,\"zero_stage\"";
  const size_t at = text.rfind(from);  // in stages[1]
  REQUIRE(at != std::string::npos);
  text.replace(at, from.size(), "\"tensor_parallel\":1e400,\"zero_stage\"");
  const std::string path =
      (std::filesystem::temp_directory_path() / "stratos_plan_overflow_test.json").string();
  std::ofstream(path) << text;
  std::string message;
  try {
    ReadPlanFile(path);
  } catch (const InputError& e) {
    message = e.what();
  }
  std::remove(path.c_str());
  CHECK(message == path + ": stages[1].tensor_parallel = 1e400: must be a finite number");
}

TEST_CASE("JSON parsing keeps key paths of nested objects and arrays for overflow errors") {
  const auto error = [](const std::string& text) {
    try {
      ParseJsonText(text, "f.json");
    } catch (const InputError& e) {
      return std::string(e.what());
    }
    return std::string();
  };
  CHECK(error("1e999") == "f.json: (top level) = 1e999: must be a finite number");
  CHECK(error(R"({"a": {"b": [1, 2, {"c": -1e999}]}})") ==
        "f.json: a.b[2].c = -1e999: must be a finite number");
  CHECK(error(R"({"a": [[0], [1, 2e308]]})") == "f.json: a[1][1] = 2e308: must be a finite number");
  CHECK(error(R"({"a": 1,)").rfind("f.json: JSON parse error: ", 0) == 0);
  // The document built is the one json::parse builds.
  const std::string text = R"({"x": [1, -2, 3.5, "s", null, true, {"y": {}}], "z": 18446744073709551615})";
  CHECK(ParseJsonText(text, "f.json") == json::parse(text));
}

TEST_CASE("checked numbers: negative for unsigned, out of range, non-finite") {
  const NumberSource at{"f", "k", "v"};
  CHECK(CheckedInteger<int>(-5LL, at) == -5);
  CHECK(CheckedInteger<unsigned>(7ULL, at) == 7u);
  const auto error = [](auto f) {
    try {
      f();
    } catch (const InputError& e) {
      return std::string(e.what());
    }
    return std::string();
  };
  CHECK(error([&] { CheckedInteger<std::uint64_t>(-1LL, at); }) == "f: k = v: must be >= 0");
  CHECK(error([&] { CheckedInteger<int>(1LL << 40, at); }) ==
        "f: k = v: must be an integer in [-2147483648, 2147483647]");
  CHECK(error([&] { CheckedInteger<int>(18446744073709551615ULL, at); }) ==
        "f: k = v: must be an integer in [-2147483648, 2147483647]");
  CHECK(error([&] { CheckedFloat<double>(std::numeric_limits<double>::infinity(), at); }) ==
        "f: k = v: must be a finite number");
  CHECK(error([&] { CheckedFloat<double>(std::nan(""), at); }) == "f: k = v: must be a finite number");
  CHECK(error([&] { CheckedFloat<long>(-1e30, at); }) ==
        "f: k = v: must be an integer in [-9223372036854775808, 9223372036854775807]");
  CHECK(error([&] { CheckedFloat<std::uint64_t>(-1e30, at); }) == "f: k = v: must be >= 0");
  CHECK(error([&] { CheckedFloat<int>(2.0, at); }) == "f: k = v: must be an integer");
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

namespace stratos {
namespace {

TEST_CASE("Megatron-LM's placement: blocks split over the stages, embedding first, head last") {
  ModelSpec model = ReadModelFile(ResolveModelPath("gpt3-1.3b"));  // [embedding, 24 blocks, head]
  using Ranges = std::vector<std::pair<int, int>>;
  CHECK(MegatronStageLayers(model, 4) == Ranges{{0, 7}, {7, 13}, {13, 19}, {19, 26}});
  CHECK(MegatronStageLayers(model, 1) == Ranges{{0, 26}});
  CHECK(MegatronStageLayers(model, 24).back() == std::pair<int, int>{24, 26});
  // 24 blocks over 5 stages: 4, 5, 5, 5, 5 (the larger runs last, as SplitLayersEvenly).
  CHECK(MegatronStageLayers(model, 5) == Ranges{{0, 5}, {5, 10}, {10, 15}, {15, 20}, {20, 26}});
  CHECK_THROWS_WITH_AS(MegatronStageLayers(model, 25),
                       doctest::Contains("must be between 1 and the model's 24 transformer blocks"),
                       InputError);
  // Not [embedding, blocks, head]: an even split of the layer list.
  model.layers.pop_back();
  CHECK(MegatronStageLayers(model, 5) == SplitLayersEvenly(model.NumLayers(), 5));
}

}  // namespace
}  // namespace stratos
