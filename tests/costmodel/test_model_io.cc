// Model files: the TOML format, HuggingFace configs, the zoo, and one test per input rule
// checking that the error names the file, the key, the value and the rule.
#include <doctest/doctest.h>

#include <initializer_list>
#include <string>

#include "costmodel/data_dir.h"
#include "costmodel/error.h"
#include "costmodel/model_io.h"
#include "costmodel/zoo.h"
#include "test_util.h"

namespace stratos {
using testing::InputErrorMessage;
namespace {

const std::string kHfConfigs = SharedDataPath("hf_configs/");

// Checks that the message of the InputError thrown by parsing `toml` contains every part.
void CheckModelTomlError(const std::string& toml, std::initializer_list<const char*> parts) {
  const std::string message = InputErrorMessage([&] { ParseModelToml(toml, "x.toml"); });
  INFO("message: ", message);
  for (const char* part : parts) CHECK(message.find(part) != std::string::npos);
}

void CheckHfError(const std::string& json, std::initializer_list<const char*> parts) {
  const std::string message = InputErrorMessage([&] { ParseHfConfigJson(json, "c.json"); });
  INFO("message: ", message);
  for (const char* part : parts) CHECK(message.find(part) != std::string::npos);
}

const char* kTinyGpt = R"(
[model]
family = "gpt"
hidden_size = 64
num_layers = 2
num_attention_heads = 4
vocab_size = 100
seq_length = 32
)";

TEST_CASE("a minimal gpt TOML gets defaults: name from file, kv = heads, ffn = 4h, tied") {
  const ModelSpec model = ParseModelToml(kTinyGpt, "dir/tiny.toml");
  CHECK(model.name == "tiny");
  CHECK(model.source == "dir/tiny.toml");
  CHECK(model.num_key_value_heads == 4);
  CHECK(model.ffn_hidden_size == 256);
  CHECK(model.tie_word_embeddings);
  CHECK(model.NumLayers() == 4);
}

TEST_CASE("seq_length_override replaces the sequence length of a transformer") {
  const ModelSpec model =
      ParseModelToml(std::string(kTinyGpt) + "max_position_embeddings = 64\n", "x.toml", 64);
  CHECK(model.seq_length == 64);
  CHECK(model.layers[1].attention_flops == 4.0 * 64 * 64 * 64);
  const ModelSpec llama = ReadModelFile(kHfConfigs + "llama3_8b.config.json", 4096);
  CHECK(llama.seq_length == 4096);
  CHECK(llama.ParameterCount() == 8030261248.0);  // rotary: no parameters depend on s
}

TEST_CASE("explicit layers: count repeats, param_bytes / 2, input = previous output, classes") {
  const ModelSpec model = ParseModelToml(R"(
[model]
family = "explicit"
cut_cost_seconds = 2
[[model.layer]]
name = "stem"
forward_flops = 10
param_bytes = 8
activation_bytes = 3
output_bytes = 5
[[model.layer]]
forward_flops = 1
param_bytes = 2
activation_bytes = 1
count = 3
)",
                                         "e.toml");
  REQUIRE(model.NumLayers() == 4);
  CHECK(model.cut_cost_seconds == 2);
  CHECK(model.backward_to_forward_ratio == 2);
  CHECK(model.seq_length == 1);
  CHECK(model.layers[0].name == "stem");
  CHECK(model.layers[0].param_count == 4);
  CHECK(model.layers[0].activation_sharded_bytes == 3);
  CHECK(model.layers[0].input_bytes == 0);
  CHECK(model.layers[1].input_bytes == 5);
  CHECK(model.layers[2].input_bytes == 0);
  CHECK(model.layers[2].name == "layer.2");
  // Layer 1 differs from 2 and 3 by its input (the stem's output); 2 and 3 are identical.
  CHECK(model.layers[0].cost_class == 0);
  CHECK(model.layers[1].cost_class == 1);
  CHECK(model.layers[2].cost_class == 2);
  CHECK(model.layers[3].cost_class == 2);
  CHECK(model.NumCostClasses() == 3);
  CHECK(model.ParameterCount() == 4 + 3 * 1);
  CHECK(model.TrainingFlopsPerSample() == 3 * (10 + 3 * 1));
}

TEST_CASE("every zoo model loads") {
  const std::vector<std::string> names = ZooModels();
  CHECK(names.size() >= 12);
  for (const std::string& name : names) {
    INFO("model: ", name);
    const ModelSpec model = ReadModelFile(ResolveModelPath(name));
    CHECK(model.ParameterCount() > 0);
    CHECK(model.NumLayers() == model.num_layers + 2);
  }
}

TEST_CASE("a path that exists resolves to itself") {
  const std::string path = kHfConfigs + "gpt2.config.json";
  CHECK(ResolveModelPath(path) == path);
  CHECK(ResolveModelPath("gpt2").find("gpt2.config.json") != std::string::npos);
}

// ---- one test per input rule ----

TEST_CASE("malformed TOML is an InputError with file, line, column and the TOML message") {
  CheckModelTomlError("[model]\nfamily = \"gpt\nhidden_size = 4\n",
                      {"x.toml:2:", "TOML parse error"});
}

TEST_CASE("an unknown model key is an InputError listing the known keys") {
  CheckModelTomlError(std::string(kTinyGpt) + "hiden_size = 64\n",
                      {"x.toml: model.hiden_size: unknown key (known keys:", "hidden_size"});
}

TEST_CASE("an unknown top-level table is an InputError") {
  CheckModelTomlError(std::string(kTinyGpt) + "[training]\nbatch = 1\n",
                      {"x.toml: training: unknown key (known keys: model)"});
}

TEST_CASE("a missing required model key is an InputError") {
  CheckModelTomlError(
      "[model]\nfamily = \"gpt\"\nhidden_size = 64\nnum_attention_heads = 4\n"
      "vocab_size = 100\nseq_length = 32\n",
      {"x.toml: model.num_layers: missing required key"});
  CheckModelTomlError(
      "[model]\nfamily = \"llama\"\nhidden_size = 64\nnum_layers = 1\nnum_attention_heads = 4\n"
      "vocab_size = 100\nseq_length = 32\n",
      {"x.toml: model.ffn_hidden_size: missing required key"});
}

TEST_CASE("a wrongly typed model key is an InputError") {
  CheckModelTomlError(
      "[model]\nfamily = \"gpt\"\nhidden_size = 64\nnum_layers = 1\nnum_attention_heads = 4\n"
      "vocab_size = \"big\"\nseq_length = 32\n",
      {"x.toml: model.vocab_size = \"big\": must be an integer"});
  CheckModelTomlError(std::string(kTinyGpt) + "tie_word_embeddings = 1\n",
                      {"x.toml: model.tie_word_embeddings = 1: must be a boolean"});
}

TEST_CASE("a size <= 0 is an InputError") {
  CheckModelTomlError(
      "[model]\nfamily = \"gpt\"\nhidden_size = -5\nnum_layers = 1\nnum_attention_heads = 4\n"
      "vocab_size = 100\nseq_length = 32\n",
      {"x.toml: model.hidden_size = -5: must be >= 1"});
}

TEST_CASE("heads not dividing hidden size in a TOML file is an InputError") {
  CheckModelTomlError(
      "[model]\nfamily = \"gpt\"\nhidden_size = 100\nnum_layers = 1\nnum_attention_heads = 7\n"
      "vocab_size = 100\nseq_length = 32\n",
      {"x.toml: model.num_attention_heads = 7: must divide model.hidden_size = 100"});
}

TEST_CASE("an unknown family is an InputError listing the families") {
  CheckModelTomlError(
      "[model]\nfamily = \"rnn\"\n",
      {"x.toml: model.family = \"rnn\": must be one of", "\"llama\"", "\"explicit\""});
}

TEST_CASE("a transformer key in an explicit model is an unknown key") {
  CheckModelTomlError(
      "[model]\nfamily = \"explicit\"\nhidden_size = 4\n"
      "[[model.layer]]\nforward_flops = 1\nparam_bytes = 2\nactivation_bytes = 1\n",
      {"x.toml: model.hidden_size: unknown key"});
}

TEST_CASE("explicit layer rules: negative numbers, count < 1, no layers") {
  CheckModelTomlError(
      "[model]\nfamily = \"explicit\"\n"
      "[[model.layer]]\nforward_flops = -1.5\nparam_bytes = 2\nactivation_bytes = 1\n",
      {"x.toml: model.layer[0].forward_flops = -1.5: must be >= 0"});
  CheckModelTomlError(
      "[model]\nfamily = \"explicit\"\n"
      "[[model.layer]]\nforward_flops = 1\nparam_bytes = 2\nactivation_bytes = 1\ncount = 0\n",
      {"x.toml: model.layer[0].count = 0: must be >= 1"});
  CheckModelTomlError("[model]\nfamily = \"explicit\"\n",
                      {"x.toml: model.layer: missing required key"});
  CheckModelTomlError(
      "[model]\nfamily = \"explicit\"\n"
      "[[model.layer]]\nforward_flops = 1\nparam_bytes = 2\n",
      {"x.toml: model.layer[0].activation_bytes: missing required key"});
}

TEST_CASE("a missing model file is an InputError naming the path") {
  const std::string message = InputErrorMessage([] { ReadModelFile("/nonexistent/m.toml"); });
  CHECK(message == "/nonexistent/m.toml: cannot open model file");
}

TEST_CASE("malformed JSON is an InputError with the JSON parser's message") {
  CheckHfError("{\"hidden_size\": 4,", {"c.json: JSON parse error:", "parse error"});
}

TEST_CASE("an MoE HF config (Mixtral) is an InputError naming num_local_experts") {
  const std::string message =
      InputErrorMessage([] { ReadModelFile(kHfConfigs + "mixtral_8x7b.config.json"); });
  CHECK(message.find("mixtral_8x7b.config.json: num_local_experts = 8: MoE models are not "
                     "supported yet") != std::string::npos);
}

TEST_CASE("an unsupported HF model_type is an InputError listing the supported ones") {
  CheckHfError(R"({"model_type": "t5", "hidden_size": 4})",
               {"c.json: model_type = \"t5\": not supported (supported: gpt2, llama"});
}

TEST_CASE("HF sizes: missing, non-integer and <= 0 are InputErrors with the HF key") {
  CheckHfError(R"({"model_type": "gpt2", "n_embd": 64, "n_layer": 1, "n_head": 4,
                   "n_positions": 32})",
               {"c.json: vocab_size: missing required key"});
  CheckHfError(R"({"model_type": "gpt2", "n_embd": 64.5, "n_layer": 1, "n_head": 4,
                   "vocab_size": 10, "n_positions": 32})",
               {"c.json: n_embd = 64.5: must be an integer"});
  CheckHfError(R"({"model_type": "gpt2", "n_embd": 64, "n_layer": 0, "n_head": 4,
                   "vocab_size": 10, "n_positions": 32})",
               {"c.json: n_layer = 0: must be >= 1"});
}

TEST_CASE("HF numbers that do not fit an int or a double are InputErrors with the HF key") {
  const std::string head = R"({"model_type": "gpt2", "n_layer": 1, "n_head": 4, "n_positions": 32, )";
  CheckHfError(head + R"("n_embd": 64, "vocab_size": 1e400})",
               {"c.json: vocab_size = 1e400: must be a finite number"});
  CheckHfError(head + R"("n_embd": 4294967360, "vocab_size": 10})",
               {"c.json: n_embd = 4294967360: must be an integer in [-2147483648, 2147483647]"});
  CheckHfError(head + R"("n_embd": 1000000000000000000000000000000, "vocab_size": 10})",
               {"c.json: n_embd = 1e+30: must be an integer in [-2147483648, 2147483647]"});
  CheckHfError(head + R"("n_embd": -64, "vocab_size": 10})", {"c.json: n_embd = -64: must be >= 1"});
}

TEST_CASE("TOML numbers: inf, nan and integers beyond 64 bits are InputErrors naming the key") {
  CheckModelTomlError("[model]\nfamily = \"explicit\"\n[[model.layer]]\nforward_flops = inf\n"
                      "param_bytes = 2\nactivation_bytes = 1\n",
                      {"x.toml: model.layer[0].forward_flops = inf: must be a finite number"});
  CheckModelTomlError("[model]\nfamily = \"explicit\"\ncut_cost_seconds = nan\n",
                      {"x.toml: model.cut_cost_seconds = nan: must be a finite number"});
  CheckModelTomlError("[model]\nfamily = \"gpt\"\nhidden_size = 99999999999999999999\n",
                      {"x.toml:3:", "not representable in 64 bits",
                       "(in `hidden_size = 99999999999999999999`)"});
  CheckModelTomlError(std::string(kTinyGpt) + "max_position_embeddings = 4294967296\n",
                      {"x.toml: model.max_position_embeddings = 4294967296: must be <= 2147483647"});
}

TEST_CASE("an unknown zoo model name is an InputError listing the zoo") {
  const std::string message = InputErrorMessage([] { ResolveModelPath("gpt5"); });
  CHECK(message.find("--model = gpt5: not a file and not a zoo model (zoo: ") == 0);
  CHECK(message.find("llama3-8b") != std::string::npos);
  CHECK(message.find("gpt2") != std::string::npos);
}

}  // namespace
}  // namespace stratos
