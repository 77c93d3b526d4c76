// Layer lists of transformer families: published parameter counts, Megatron FLOPs and
// Korthikanti activation memory, pinned exactly.
#include <doctest/doctest.h>

#include <string>

#include "costmodel/data_dir.h"
#include "costmodel/error.h"
#include "costmodel/model.h"
#include "costmodel/model_io.h"
#include "costmodel/zoo.h"
#include "test_util.h"

namespace stratos {
using testing::InputErrorMessage;
namespace {

const std::string kHfConfigs = SharedDataPath("hf_configs/");

ModelSpec GptShape(int h, int layers, int heads, int seq) {
  ModelSpec model;
  model.name = "test";
  model.family = "gpt";
  model.source = "test.toml";
  model.hidden_size = h;
  model.num_layers = layers;
  model.num_attention_heads = heads;
  model.vocab_size = 50257;
  model.seq_length = seq;
  model.tie_word_embeddings = true;
  BuildTransformerLayers(model);
  return model;
}

TEST_CASE("GPT-2 parameter count from its HF config is the published 124,439,808") {
  const ModelSpec model = ReadModelFile(kHfConfigs + "gpt2.config.json");
  CHECK(model.family == "gpt");
  CHECK(model.ParameterCount() == 124439808.0);
  CHECK(model.NumLayers() == 12 + 2);
  CHECK(model.seq_length == 1024);
}

TEST_CASE("Llama-3-8B parameter count from its HF config is the published 8,030,261,248") {
  const ModelSpec model = ReadModelFile(kHfConfigs + "llama3_8b.config.json");
  CHECK(model.family == "llama");
  CHECK(model.num_key_value_heads == 8);
  CHECK(model.ParameterCount() == 8030261248.0);
}

TEST_CASE("Llama-3-8B zoo TOML and HF config give the same parameter count and layers") {
  const ModelSpec toml = ReadModelFile(DataPath("data/models/llama3-8b.toml"));
  const ModelSpec hf = ReadModelFile(kHfConfigs + "llama3_8b.config.json");
  CHECK(toml.ParameterCount() == 8030261248.0);
  REQUIRE(toml.NumLayers() == hf.NumLayers());
  for (int i = 0; i < toml.NumLayers(); ++i) {
    CHECK(toml.layers[i].forward_flops == hf.layers[i].forward_flops);
    CHECK(toml.layers[i].ActivationBytes() == hf.layers[i].ActivationBytes());
  }
}

TEST_CASE("Llama-2 and Llama-3-70B zoo parameter counts equal the HF checkpoints' counts") {
  // num_parameters() of the HuggingFace checkpoints (meta-llama/*-hf).
  CHECK(ReadModelFile(ResolveModelPath("llama2-7b")).ParameterCount() == 6738415616.0);
  CHECK(ReadModelFile(ResolveModelPath("llama2-13b")).ParameterCount() == 13015864320.0);
  CHECK(ReadModelFile(ResolveModelPath("llama2-70b")).ParameterCount() == 68976648192.0);
  CHECK(ReadModelFile(ResolveModelPath("llama3-70b")).ParameterCount() == 70553706496.0);
}

TEST_CASE("BERT-Large encoder + pooler has the HF BertModel count 335,141,888") {
  const ModelSpec model = ReadModelFile(ResolveModelPath("bert-large"));
  const double h = 1024, V = 30522;
  const double mlm_head = (h * h + h) + 2 * h + V;  // transform dense + LayerNorm + decoder bias
  CHECK(model.ParameterCount() - mlm_head == 335141888.0);
}

TEST_CASE("GPT block forward FLOPs are 24 s h^2 + 4 s^2 h (Megatron SC'21) for gpt3-6.7b") {
  const ModelSpec model = ReadModelFile(ResolveModelPath("gpt3-6.7b"));
  const double s = 2048, h = 4096;
  const LayerSpec& block = model.layers.at(1);
  CHECK(block.kind == LayerKind::kTransformer);
  CHECK(block.forward_flops == 24 * s * h * h + 4 * s * s * h);
  CHECK(block.attention_flops == 4 * s * s * h);
  const LayerSpec& head = model.layers.back();
  CHECK(head.forward_flops == 2 * s * h * 50257);
  // 1 forward + 2 backward, the 6 N s rule plus attention and logits.
  double forward = 0;
  for (const LayerSpec& layer : model.layers) forward += layer.forward_flops;
  CHECK(model.TrainingFlopsPerSample() == doctest::Approx(3 * forward).epsilon(1e-12));
}

TEST_CASE("GPT block activations are s h (34 + 5 a s / h) bytes (Korthikanti et al. Table 2)") {
  const int h = 4096, a = 32, s = 2048;
  const ModelSpec model = GptShape(h, 2, a, s);
  const LayerSpec& block = model.layers.at(1);
  const double expected = double(s) * h * (34.0 + 5.0 * a * s / h);
  CHECK(block.ActivationBytes() == doctest::Approx(expected).epsilon(1e-12));
  CHECK(block.activation_replicated_bytes == 10.0 * s * h);
  CHECK(block.activation_sharded_bytes == 24.0 * s * h);
  CHECK(block.activation_attention_bytes == 5.0 * a * s * s);
  CHECK(block.output_bytes == 2.0 * s * h);
  CHECK(block.tp_allreduces_per_forward == 2);
}

TEST_CASE("transformer families share one cost class for all blocks") {
  const ModelSpec model = GptShape(256, 4, 8, 128);
  CHECK(model.NumCostClasses() == 3);
  CHECK(model.layers.front().cost_class == 0);
  CHECK(model.layers.front().kind == LayerKind::kEmbedding);
  for (int i = 1; i <= 4; ++i) CHECK(model.layers[i].cost_class == 1);
  CHECK(model.layers.back().cost_class == 2);
  CHECK(std::string(LayerKindName(model.layers.back().kind)) == "head");
  CHECK(model.layers[2].name == "block.1");
}

TEST_CASE("tied head stores the word embeddings but does not count them twice") {
  const ModelSpec model = GptShape(256, 1, 8, 128);
  const LayerSpec& head = model.layers.back();
  CHECK(head.param_count == 2 * 256);  // final LayerNorm only
  CHECK(head.stored_param_count == 2 * 256 + 50257.0 * 256);
}

TEST_CASE("BuildTransformerLayers fills defaults: kv heads = heads, ffn = 4h, positions = seq") {
  const ModelSpec model = GptShape(256, 1, 8, 128);
  CHECK(model.num_key_value_heads == 8);
  CHECK(model.ffn_hidden_size == 1024);
  CHECK(model.max_position_embeddings == 128);
}

TEST_CASE("heads not dividing the hidden size is an InputError naming key, value and rule") {
  const std::string message = InputErrorMessage([] { GptShape(100, 1, 7, 16); });
  CHECK(message.find("test.toml") != std::string::npos);
  CHECK(message.find("model.num_attention_heads = 7") != std::string::npos);
  CHECK(message.find("must divide model.hidden_size = 100") != std::string::npos);
}

TEST_CASE("kv heads not dividing the heads is an InputError naming key, value and rule") {
  ModelSpec model;
  model.family = "llama";
  model.source = "kv.toml";
  model.hidden_size = 128;
  model.num_layers = 1;
  model.num_attention_heads = 8;
  model.num_key_value_heads = 3;
  model.ffn_hidden_size = 256;
  model.vocab_size = 100;
  model.seq_length = 16;
  const std::string message = InputErrorMessage([&] { BuildTransformerLayers(model); });
  CHECK(message.find("kv.toml: model.num_key_value_heads = 3: must divide") != std::string::npos);
}

TEST_CASE("a sequence longer than learned positions is an InputError") {
  ModelSpec model;
  model.family = "gpt";
  model.source = "pos.toml";
  model.hidden_size = 64;
  model.num_layers = 1;
  model.num_attention_heads = 4;
  model.vocab_size = 100;
  model.seq_length = 2048;
  model.max_position_embeddings = 1024;
  const std::string message = InputErrorMessage([&] { BuildTransformerLayers(model); });
  CHECK(message.find("pos.toml: model.seq_length = 2048: must be <= "
                     "model.max_position_embeddings = 1024") != std::string::npos);
}

}  // namespace
}  // namespace stratos
