// Gradient compression in the cost model: names, wire bytes per scheme pinned to hand-computed
// numbers, the layer shapes PowerSGD sees, the DP terms of LayerTerms, and the plan JSON.
#include <doctest/doctest.h>

#include <nlohmann/json.hpp>

#include "costmodel/compression.h"
#include "costmodel/cost_model.h"
#include "costmodel/error.h"
#include "costmodel/model_io.h"
#include "costmodel/plan.h"
#include "costmodel/synthetic.h"
#include "costmodel/zoo.h"

using namespace stratos;
using nlohmann::json;

namespace {

CompressionSpec Spec(GradCompression kind) {
  CompressionSpec spec;
  spec.kind = kind;
  return spec;
}

std::string InputErrorOf(const std::function<void()>& f) {
  try {
    f();
  } catch (const InputError& e) {
    return e.what();
  }
  return "";
}

}  // namespace

TEST_CASE("compression names round-trip and a bad name lists the allowed set") {
  for (GradCompression kind : AllGradCompressions())
    CHECK(ParseGradCompression(GradCompressionName(kind), "x") == kind);
  const std::string message =
      InputErrorOf([] { ParseGradCompression("zip", "command line", "--grad-compression"); });
  INFO(message);
  CHECK(message.find("command line: --grad-compression = \"zip\"") == 0);
  for (const char* name : {"none", "bf16", "fp16", "topk", "powersgd", "terngrad", "sign"})
    CHECK(message.find(fmt::format("\"{}\"", name)) != std::string::npos);
}

TEST_CASE("compression lists take parameters in the spelling labels print") {
  const std::vector<CompressionSpec> specs = ParseCompressionList(
      "none, topk(density=0.1), powersgd(rank=1),topk(density=0.01, momentum=0.9),sign", "x",
      "--grad-compressions");
  REQUIRE(specs.size() == 5);
  CHECK(specs[1].kind == GradCompression::kTopK);
  CHECK(specs[1].topk_density == 0.1);
  CHECK(specs[2].powersgd_rank == 1);
  CHECK(specs[3].topk_momentum == 0.9);
  for (const CompressionSpec& spec : specs)  // a label parses back to its spec
    CHECK(ParseCompressionList(spec.Label(), "x", "k").front() == spec);
  CHECK(ParseCompressionList("powersgd", "x", "k").front().powersgd_rank == 4);  // the default
  const auto error = [](const std::string& text) {
    return InputErrorOf([&] { ParseCompressionList(text, "command line", "--grad-compressions"); });
  };
  CHECK(error("none,topk(rank=2)") ==
        "command line: --grad-compressions = \"topk(rank=2)\": topk takes density=VALUE, "
        "momentum=VALUE");
  CHECK(error("bf16(x=1)") ==
        "command line: --grad-compressions = \"bf16(x=1)\": bf16 takes no parameters");
  CHECK(error("topk(density=2)").find("\"topk(density=2)\": topk_density 2 must be in (0, 1]") !=
        std::string::npos);
  CHECK(error("topk(density=a)") ==
        "command line: --grad-compressions = \"topk(density=a)\": density must be a number");
  CHECK(error("powersgd(rank=1.5)") ==
        "command line: --grad-compressions = \"powersgd(rank=1.5)\": rank must be an integer >= 1");
  CHECK(error("none,topk(density=0.1") ==
        "command line: --grad-compressions = none,topk(density=0.1: has unbalanced parentheses");
  CHECK(error(" , ") == "command line: --grad-compressions =  , : must list at least one compression");
}

TEST_CASE("top-k keeps max(1, ceil(density x elements)) entries") {
  CHECK(TopKCount(0.01, int64_t{100}) == 1);  // not 2: 0.01 x 100 rounds to 1 exactly
  CHECK(TopKCount(0.01, int64_t{101}) == 2);
  CHECK(TopKCount(0.001, int64_t{10}) == 1);
  CHECK(TopKCount(0.5, int64_t{3}) == 2);
  CHECK(TopKCount(1.0, int64_t{7}) == 7);
  CHECK(TopKCount(0.01, int64_t{0}) == 0);
}

TEST_CASE("wire bytes per rank of a 1024 x 256 fp32 gradient over 4 ranks, by hand") {
  const GradientTensorShape shape{1024, 256};  // 262,144 elements, 1 MiB in fp32
  const int n = 4;
  auto wire = [&](GradCompression kind) { return WireBytes(Spec(kind), shape, 4, n); };
  // Ring all-reduce: 2 (n-1)/n = 1.5 of the buffer.
  CHECK(wire(GradCompression::kNone) == 1.5 * 1048576);
  CHECK(wire(GradCompression::kBf16) == 1.5 * 524288);
  CHECK(wire(GradCompression::kFp16) == 1.5 * 524288);
  // PowerSGD rank 4: P (1024 x 4) + Q (256 x 4) fp32 = 20,480 bytes, all-reduced.
  CHECK(wire(GradCompression::kPowerSgd) == 1.5 * 20480);
  // All-gathers: (n-1) x the message. top-k 1%: k = ceil(2621.44) = 2622 of (4 + 4) bytes.
  CHECK(wire(GradCompression::kTopK) == 3 * 2622 * 8);
  // TernGrad: 2 bits per element + a 4-byte scale; sign: 1 bit + a 4-byte scale.
  CHECK(wire(GradCompression::kTernGrad) == 3 * (65536 + 4));
  CHECK(wire(GradCompression::kSign) == 3 * (32768 + 4));
  // Nothing travels in a group of one.
  for (GradCompression kind : AllGradCompressions())
    CHECK(WireBytes(Spec(kind), shape, 4, 1) == 0);
}

TEST_CASE("all-gathered forms grow with the group, all-reduced ones do not") {
  const GradientTensorShape shape{4096, 4096};
  for (GradCompression kind : AllGradCompressions()) {
    const double at2 = WireBytes(Spec(kind), shape, 2, 2);
    const double at64 = WireBytes(Spec(kind), shape, 2, 64);
    INFO(GradCompressionName(kind));
    CHECK(UsesAllGather(kind) == (kind == GradCompression::kTopK ||
                                  kind == GradCompression::kTernGrad ||
                                  kind == GradCompression::kSign));
    if (UsesAllGather(kind)) {
      CHECK(at64 == doctest::Approx(63 * at2));
    } else {
      CHECK(at64 == doctest::Approx(2 * 63.0 / 64 * at2));  // 2(n-1)/n: 1 at n = 2
    }
  }
  // 1-bit sign beats a bf16 all-reduce at 2 ranks (E / 8 vs 2 E bytes) but not at 64
  // (63 E / 8 vs 2 x 63/64 x 2 E).
  CHECK(WireBytes(Spec(GradCompression::kSign), shape, 2, 2) <
        WireBytes(Spec(GradCompression::kBf16), shape, 2, 2) / 8);
  CHECK(WireBytes(Spec(GradCompression::kSign), shape, 2, 64) >
        WireBytes(Spec(GradCompression::kBf16), shape, 2, 64));
  CHECK(WireBytes(Spec(GradCompression::kTernGrad), shape, 2, 64) >
        WireBytes(Spec(GradCompression::kBf16), shape, 2, 64));
}

TEST_CASE("PowerSGD sends vectors and matrices too small to gain uncompressed") {
  CompressionSpec spec = Spec(GradCompression::kPowerSgd);
  spec.powersgd_rank = 4;
  CHECK(WireBytes(spec, 1000.0, 4, 2) == 4000);                         // a bias
  CHECK(WireBytes(spec, GradientTensorShape{8, 8}, 4, 2) == 64 * 4);    // 4 x 16 >= 64
  CHECK(WireBytes(spec, GradientTensorShape{16, 16}, 4, 2) == 4 * 32 * 4);
  CHECK(ShapeOf({64, 3, 3, 3}).rows == 64);  // conv weights: (out, in x kh x kw)
  CHECK(ShapeOf({64, 3, 3, 3}).cols == 27);
  CHECK(ShapeOf({10}).cols == 1);
}

TEST_CASE("compression work: casts are free on half-precision gradients, PowerSGD costs FLOPs") {
  const GradientTensorShape shape{1024, 1024};
  CHECK(CompressionWorkOf(Spec(GradCompression::kBf16), shape, 2, 8).memory_bytes == 0);
  CHECK(CompressionWorkOf(Spec(GradCompression::kBf16), shape, 4, 8).memory_bytes ==
        2.0 * 1048576 * 6);
  CHECK(CompressionWorkOf(Spec(GradCompression::kNone), shape, 4, 8).memory_bytes == 0);
  CompressionSpec power = Spec(GradCompression::kPowerSgd);
  power.powersgd_rank = 2;
  CHECK(CompressionWorkOf(power, shape, 4, 8).flops == 3 * 2 * 2 * 1048576.0 + 2 * 1024 * 4);
  // Decompressing all-gathered forms scales with the group.
  CHECK(CompressionWorkOf(Spec(GradCompression::kSign), shape, 4, 16).memory_bytes >
        CompressionWorkOf(Spec(GradCompression::kSign), shape, 4, 2).memory_bytes);
}

TEST_CASE("layer gradient shapes add up to the stored parameters of zoo models") {
  for (const char* name : {"gpt3-1.3b", "llama3-8b", "bert-large", "llama3-70b"}) {
    const ModelSpec model = ReadModelFile(ResolveModelPath(name), 0);
    for (int tp : {1, 2, 8}) {
      for (const LayerSpec& layer : model.layers) {
        double elements = 0;
        for (const GradientTensorShape& shape : LayerGradientShapes(model, layer, tp))
          elements += shape.Elements();
        INFO(name, " ", layer.name, " tp ", tp);
        CHECK(elements == doctest::Approx(layer.stored_param_count / tp).epsilon(1e-12));
      }
    }
  }
  // A GPT-3 1.3B block (h = 2048): qkv, out, fc1, fc2 plus one vector of biases and norms.
  const ModelSpec gpt = ReadModelFile(ResolveModelPath("gpt3-1.3b"), 0);
  const auto shapes = LayerGradientShapes(gpt, gpt.layers[1], 2);
  REQUIRE(shapes.size() == 5);
  CHECK(shapes[0].rows == 3 * 2048 / 2);
  CHECK(shapes[0].cols == 2048);
  CHECK(shapes[2].rows == 4 * 2048 / 2);
  CHECK_FALSE(shapes[4].IsMatrix());
}

namespace {

// GPT (h 1024) on 8 ideal GPUs of one node, fp32 gradients so that casts save bytes.
Problem CompressionProblem() {
  Problem problem;
  ModelSpec& m = problem.model;
  m.name = "test-gpt";
  m.family = "gpt";
  m.hidden_size = 1024;
  m.num_layers = 2;
  m.num_attention_heads = 16;
  m.vocab_size = 51200;
  m.seq_length = 512;
  BuildTransformerLayers(m);
  problem.cluster.name = "test";
  problem.cluster.devices.push_back({"gpu", 100e12, 1e15, 1e12, 1.0, 0.0, "test"});
  problem.cluster.node_groups.push_back({1, 8, "gpu"});
  problem.cluster.networks.push_back({"nvlink", 100e9, 0.0, 1.0, "test"});
  problem.training.global_batch_size = 8;
  problem.training.grad_dtype_bytes = 4;
  problem.training.param_dtype_bytes = 4;
  problem.training.dp_overlap_fraction = 0.5;
  return problem;
}

StageConfig DpConfig(int dp, int zero, CompressionSpec compression) {
  StageConfig config;
  config.mesh_gpus_per_node = dp;
  config.data_parallel = dp;
  config.zero_stage = zero;
  config.grad_compression = compression;
  return config;
}

}  // namespace

TEST_CASE("LayerTerms: compressed DP sync = collectives of the messages + exposed compression work") {
  const Problem problem = CompressionProblem();
  const CostModel cost_model(problem);
  const int dp = 8, block = 1;
  const LayerSpec& layer = problem.model.layers[block];
  const double bandwidth = 100e9;  // latency 0: the ring formulas are pure bandwidth
  const StageTerms none = cost_model.LayerTerms(block, DpConfig(dp, 0, {}), 1);
  CHECK(none.dp_sync_seconds ==
        doctest::Approx(2.0 * 7 / 8 * layer.stored_param_count * 4 / bandwidth));

  for (GradCompression kind : AllGradCompressions()) {
    if (kind == GradCompression::kNone) continue;
    INFO(GradCompressionName(kind));
    const CompressionSpec spec = Spec(kind);
    const StageTerms terms = cost_model.LayerTerms(block, DpConfig(dp, 0, spec), 1);
    double wire = 0, work = 0;
    for (const GradientTensorShape& shape : LayerGradientShapes(problem.model, layer, 1)) {
      wire += WireBytes(spec, shape, 4, dp);
      const CompressionWork w = CompressionWorkOf(spec, shape, 4, dp);
      work += w.flops / 100e12 + w.memory_bytes / 1e12;
    }
    CHECK(terms.dp_sync_seconds == doctest::Approx(wire / bandwidth + work));
    CHECK(terms.dp_sync_exposed_seconds == doctest::Approx(0.5 * wire / bandwidth + work));
    // Nothing else changes.
    CHECK(terms.compute_seconds == none.compute_seconds);
    CHECK(terms.state_bytes == none.state_bytes);
    CHECK(terms.optimizer_seconds == none.optimizer_seconds);
  }
  // Every scheme moves fewer bytes than fp32 at 8 ranks; bf16 exactly half.
  const StageTerms bf16 = cost_model.LayerTerms(block, DpConfig(dp, 0, Spec(GradCompression::kBf16)), 1);
  CHECK(bf16.dp_sync_seconds - 2.0 * layer.stored_param_count * 6 / 1e12 ==
        doctest::Approx(none.dp_sync_seconds / 2));
  // ZeRO-1 adds the all-gather of the updated fp32 parameters ...
  const double gather_seconds = 7.0 / 8 * layer.stored_param_count * 4 / bandwidth;
  const StageTerms sign = cost_model.LayerTerms(block, DpConfig(dp, 0, Spec(GradCompression::kSign)), 1);
  const StageTerms sign1 = cost_model.LayerTerms(block, DpConfig(dp, 1, Spec(GradCompression::kSign)), 1);
  CHECK(sign1.dp_sync_seconds - sign.dp_sync_seconds == doctest::Approx(gather_seconds));
  // ... and its bf16 cast reduce-scatters (half of the all-reduce): with fp32 parameters
  // 7/8 (2 + 4) bytes per parameter, the volume of ZeRO-1 without compression less 2 bytes.
  const StageTerms bf16_zero1 =
      cost_model.LayerTerms(block, DpConfig(dp, 1, Spec(GradCompression::kBf16)), 1);
  const StageTerms none_zero1 = cost_model.LayerTerms(block, DpConfig(dp, 1, {}), 1);
  CHECK(bf16_zero1.dp_sync_seconds - 2.0 * layer.stored_param_count * 6 / 1e12 ==
        doctest::Approx(none_zero1.dp_sync_seconds * 6 / 8));
  // DP 1: no synchronization, compression or not.
  CHECK(cost_model.LayerTerms(block, DpConfig(1, 0, Spec(GradCompression::kTopK)), 1)
            .dp_sync_seconds == 0);
}

TEST_CASE("CheckConfig refuses compression with sharded gradients and bad parameters") {
  const Problem problem = CompressionProblem();
  const CostModel cost_model(problem);
  CHECK(cost_model.CheckConfig(DpConfig(8, 1, Spec(GradCompression::kSign)), 1) == "");
  CHECK(cost_model.CheckConfig(DpConfig(8, 2, Spec(GradCompression::kSign)), 1)
            .find("needs the full gradient on every DP rank: zero_stage 2") != std::string::npos);
  CHECK(cost_model.CheckConfig(DpConfig(8, 3, {}), 1) == "");
  CompressionSpec topk = Spec(GradCompression::kTopK);
  topk.topk_density = 0;
  CHECK(cost_model.CheckConfig(DpConfig(8, 0, topk), 1) == "topk_density 0 must be in (0, 1]");
  CompressionSpec power = Spec(GradCompression::kPowerSgd);
  power.powersgd_rank = 0;
  CHECK(cost_model.CheckConfig(DpConfig(8, 0, power), 1) == "powersgd_rank 0 must be >= 1");
}

namespace {

json TwoStagePlanJson() {
  return json::parse(R"({
    "schema": "stratos.plan/1", "global_batch_size": 4, "num_microbatches": 2, "schedule": "1f1b",
    "stages": [
      {"first_layer": 0, "last_layer": 6, "mesh": [1, 2], "data_parallel": 2,
       "tensor_parallel": 1, "zero_stage": 0, "recompute": "none"},
      {"first_layer": 6, "last_layer": 12, "mesh": [1, 2], "data_parallel": 2,
       "tensor_parallel": 1, "zero_stage": 1, "recompute": "none"}]})");
}

std::string PlanError(const json& j) {
  return InputErrorOf([&] {
    const SeedCase seed = MakeSeedPartitionCase(12, 4, 4, 1.0, 2.0);
    ValidatePlan(seed.problem, PlanFromJson(j, "p.json"), "p.json");
  });
}

}  // namespace

TEST_CASE("plan JSON: files without grad_compression load as none") {
  const Plan plan = PlanFromJson(TwoStagePlanJson(), "old.json");
  for (const StagePlan& stage : plan.stages)
    CHECK(stage.config.grad_compression.kind == GradCompression::kNone);
  CHECK(PlanToJson(plan)["stages"][0]["grad_compression"] == "none");
  CHECK(PlanError(TwoStagePlanJson()) == "");
}

TEST_CASE("plan JSON: compression round-trips per stage, names and objects") {
  json j = TwoStagePlanJson();
  j["stages"][0]["grad_compression"] = {{"kind", "topk"}, {"density", 0.05}, {"momentum", 0.9}};
  j["stages"][1]["grad_compression"] = {{"kind", "powersgd"}, {"rank", 2}};
  const Plan plan = PlanFromJson(j, "p.json");
  const CompressionSpec& topk = plan.stages[0].config.grad_compression;
  CHECK(topk.kind == GradCompression::kTopK);
  CHECK(topk.topk_density == 0.05);
  CHECK(topk.topk_momentum == 0.9);
  CHECK(plan.stages[1].config.grad_compression.powersgd_rank == 2);
  CHECK(plan.Summary().find("compression=topk(density=0.05, momentum=0.9)") != std::string::npos);
  const Plan again = PlanFromJson(PlanToJson(plan), "again.json");
  CHECK(again.stages[0].config == plan.stages[0].config);
  CHECK(again.stages[1].config == plan.stages[1].config);
  CHECK(PlanError(j) == "");
  for (GradCompression kind : AllGradCompressions()) {
    j["stages"][0]["grad_compression"] = GradCompressionName(kind);
    const Plan named = PlanFromJson(j, "p.json");
    CHECK(named.stages[0].config.grad_compression == Spec(kind));
    CHECK(PlanFromJson(PlanToJson(named), "again.json").stages[0].config ==
          named.stages[0].config);
  }
}

TEST_CASE("plan JSON: bad compression names the file, key, value and rule") {
  json j = TwoStagePlanJson();
  j["stages"][1]["grad_compression"] = "zip";
  std::string message = PlanError(j);
  CHECK(message.find("p.json: stages[1].grad_compression = \"zip\": must be one of") == 0);
  CHECK(message.find("\"powersgd\"") != std::string::npos);

  j["stages"][1]["grad_compression"] = {{"kind", "topk"}, {"density", 1.5}};
  message = PlanError(j);
  CHECK(message.find("stages[1].grad_compression") != std::string::npos);
  CHECK(message.find("topk_density 1.5 must be in (0, 1]") != std::string::npos);

  j["stages"][1]["grad_compression"] = {{"kind", "powersgd"}, {"density", 0.1}};
  CHECK(PlanError(j).find("stages[1].grad_compression.density: unknown key") !=
        std::string::npos);

  j["stages"][1]["grad_compression"] = 3;
  CHECK(PlanError(j).find("must be a name") != std::string::npos);

  j["stages"][1]["grad_compression"] = "sign";
  j["stages"][1]["zero_stage"] = 2;
  message = PlanError(j);
  CHECK(message.find("p.json: stages[1]") == 0);
  CHECK(message.find("needs the full gradient on every DP rank") != std::string::npos);
}
