#include "costmodel/model_io.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <array>
#include <climits>
#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <optional>
#include <sstream>
#include <vector>

#include "costmodel/error.h"
#include "costmodel/json_reader.h"
#include "costmodel/toml_reader.h"

namespace stratos {

namespace {

// "dir/gpt3-6.7b.toml" -> "gpt3-6.7b"; "dir/gpt2.config.json" -> "gpt2".
std::string NameFromPath(const std::string& where) {
  std::string stem = std::filesystem::path(where).stem().string();
  const std::string suffix = ".config";
  if (stem.size() > suffix.size() &&
      stem.compare(stem.size() - suffix.size(), suffix.size(), suffix) == 0) {
    stem.resize(stem.size() - suffix.size());
  }
  return stem;
}

void ApplySeqLengthOverride(ModelSpec& model, int seq_length_override, const std::string& where) {
  if (seq_length_override < 0) {
    ThrowInputError(where, "seq_length_override", seq_length_override, "must be >= 0");
  }
  if (seq_length_override > 0) model.seq_length = seq_length_override;
}

// ---------------------------------------------------------------------------------------------
// TOML models.

void ReadExplicitLayers(const TomlTableReader& m, ModelSpec& model, const std::string& where) {
  const toml::node* node = m.Find("layer");
  if (node == nullptr) m.Missing("layer");
  const toml::array* array = node->as_array();
  if (array == nullptr || !array->is_array_of_tables() || array->empty()) {
    m.Fail("layer", "must be a non-empty array of tables ([[model.layer]])");
  }
  // Cost classes: layers with identical numbers share one, in order of first appearance.
  std::map<std::array<double, 5>, int> classes;
  double previous_output_bytes = 0;
  for (size_t i = 0; i < array->size(); ++i) {
    const TomlTableReader l(*array->get(i)->as_table(), fmt::format("model.layer[{}]", i), where);
    l.AllowOnly(
        {"name", "forward_flops", "param_bytes", "activation_bytes", "output_bytes", "count"});
    LayerSpec layer;
    layer.kind = LayerKind::kExplicit;
    layer.forward_flops = l.RequireNumber("forward_flops", 0);
    const double param_bytes = l.RequireNumber("param_bytes", 0);
    layer.param_count = param_bytes / 2;  // bf16 parameters
    layer.stored_param_count = layer.param_count;
    layer.activation_sharded_bytes = l.RequireNumber("activation_bytes", 0);
    layer.output_bytes = l.Number("output_bytes", 0).value_or(0);
    layer.tp_allreduces_per_forward = 0;
    const int count = static_cast<int>(l.Int("count", 1, ModelSpec::kMaxLayers).value_or(1));
    if (model.NumLayers() + count > ModelSpec::kMaxLayers)
      l.Fail("count", fmt::format("the model would hold more than {} layers",
                                  ModelSpec::kMaxLayers));
    const std::optional<std::string> name = l.String("name");
    for (int k = 0; k < count; ++k) {
      LayerSpec copy = layer;
      const int index = model.NumLayers();
      copy.name = !name ? fmt::format("layer.{}", index)
                        : (count > 1 ? fmt::format("{}.{}", *name, k) : *name);
      copy.input_bytes = previous_output_bytes;
      const std::array<double, 5> key = {copy.forward_flops, param_bytes,
                                         copy.activation_sharded_bytes, copy.output_bytes,
                                         copy.input_bytes};
      const auto [it, inserted] = classes.emplace(key, static_cast<int>(classes.size()));
      copy.cost_class = it->second;
      previous_output_bytes = copy.output_bytes;
      model.layers.push_back(std::move(copy));
    }
  }
}

void ReadTransformerShape(const TomlTableReader& m, ModelSpec& model) {
  const bool llama = model.family == "llama";
  model.hidden_size = m.RequireInt("hidden_size", 1);
  model.num_layers = m.RequireInt("num_layers", 1);
  model.num_attention_heads = m.RequireInt("num_attention_heads", 1);
  model.num_key_value_heads =
      static_cast<int>(m.Int("num_key_value_heads", 1).value_or(model.num_attention_heads));
  model.ffn_hidden_size = llama ? m.RequireInt("ffn_hidden_size", 1)
                                : static_cast<int>(m.Int("ffn_hidden_size", 1).value_or(0));
  model.vocab_size = m.RequireInt("vocab_size", 1);
  model.seq_length = m.RequireInt("seq_length", 1);
  model.max_position_embeddings = static_cast<int>(m.Int("max_position_embeddings", 1).value_or(0));
  model.tie_word_embeddings = m.Bool("tie_word_embeddings").value_or(!llama);
}

}  // namespace

ModelSpec ParseModelToml(std::string_view text, const std::string& where, int seq_length_override) {
  const toml::table root = ParseTomlText(text, where);
  const TomlTableReader top(root, "", where);
  top.AllowOnly({"model"});
  const toml::node* model_node = top.Find("model");
  if (model_node == nullptr) top.Missing("model");
  if (!model_node->is_table()) top.Fail("model", "must be a table ([model])");
  const TomlTableReader m(*model_node->as_table(), "model", where);

  const std::vector<std::string> explicit_keys = {
      "name",       "source", "family", "cut_cost_seconds", "backward_to_forward_ratio",
      "seq_length", "layer"};
  const std::vector<std::string> transformer_keys = {"name",
                                                     "source",
                                                     "family",
                                                     "hidden_size",
                                                     "num_layers",
                                                     "num_attention_heads",
                                                     "num_key_value_heads",
                                                     "ffn_hidden_size",
                                                     "vocab_size",
                                                     "seq_length",
                                                     "max_position_embeddings",
                                                     "tie_word_embeddings"};
  const std::vector<std::string> families = {"gpt", "llama", "bert", "explicit"};
  // Typos first: a misspelled key is reported as unknown, not as a missing one; the known keys
  // listed are those of the family when it is valid.
  const toml::node* family_node = m.Find("family");
  const std::string family_text = family_node != nullptr && family_node->is_string()
                                      ? family_node->as_string()->get()
                                      : std::string();
  if (family_text == "explicit") {
    m.AllowOnly(explicit_keys);
  } else if (std::find(families.begin(), families.end(), family_text) != families.end()) {
    m.AllowOnly(transformer_keys);
  } else {
    std::vector<std::string> all_keys = transformer_keys;
    for (const std::string& key : explicit_keys) {
      if (std::find(all_keys.begin(), all_keys.end(), key) == all_keys.end()) {
        all_keys.push_back(key);
      }
    }
    m.AllowOnly(all_keys);
  }

  ModelSpec model;
  model.source = where;
  model.family = m.RequireString("family");
  if (std::find(families.begin(), families.end(), model.family) == families.end()) {
    m.Fail("family", "must be one of \"gpt\", \"llama\", \"bert\", \"explicit\"");
  }
  model.name = m.String("name").value_or(NameFromPath(where));
  if (model.family == "explicit") {
    model.cut_cost_seconds = m.Number("cut_cost_seconds", 0).value_or(0);
    model.backward_to_forward_ratio = m.Number("backward_to_forward_ratio", 0).value_or(2.0);
    model.seq_length = static_cast<int>(m.Int("seq_length", 1).value_or(1));
    m.String("source");  // type check only
    ReadExplicitLayers(m, model, where);
    return model;
  }
  m.String("source");  // type check only
  ReadTransformerShape(m, model);
  ApplySeqLengthOverride(model, seq_length_override, where);
  BuildTransformerLayers(model);
  return model;
}

// ---------------------------------------------------------------------------------------------
// HuggingFace config.json.

namespace {

class HfReader {
 public:
  HfReader(const nlohmann::json& json, std::string where) : json_(json), where_(std::move(where)) {}

  // The first of `keys` present and not null, or nullptr.
  const char* FindKey(std::initializer_list<const char*> keys) const {
    for (const char* key : keys) {
      if (json_.contains(key) && !json_.at(key).is_null()) return key;
    }
    return nullptr;
  }

  std::optional<int> Int(std::initializer_list<const char*> keys) const {
    const char* key = FindKey(keys);
    if (key == nullptr) return std::nullopt;
    const nlohmann::json& value = json_.at(key);
    const int number = JsonNumber<int>(value, where_, key);
    if (number < 1) ThrowInputError(where_, key, value.dump(), "must be >= 1");
    return number;
  }
  int RequireInt(std::initializer_list<const char*> keys) const {
    std::optional<int> value = Int(keys);
    if (!value) {
      throw InputError(fmt::format("{}: {}: missing required key", where_,
                                   fmt::join(keys.begin(), keys.end(), " | ")));
    }
    return *value;
  }

 private:
  const nlohmann::json& json_;
  std::string where_;
};

}  // namespace

ModelSpec ParseHfConfigJson(std::string_view text, const std::string& where,
                            int seq_length_override) {
  const nlohmann::json json = ParseJsonText(text, where);
  if (!json.is_object()) {
    throw InputError(fmt::format("{}: JSON parse error: top level must be an object", where));
  }
  if (json.contains("num_local_experts") && !json.at("num_local_experts").is_null()) {
    ThrowInputError(where, "num_local_experts", json.at("num_local_experts").dump(),
                    "MoE models are not supported yet");
  }
  if (!json.contains("model_type")) {
    throw InputError(fmt::format("{}: model_type: missing required key", where));
  }
  const nlohmann::json& type_json = json.at("model_type");
  const std::string model_type = type_json.is_string() ? type_json.get<std::string>() : "";
  ModelSpec model;
  if (model_type == "gpt2") {
    model.family = "gpt";
  } else if (model_type == "llama" || model_type == "mistral" || model_type == "mixtral") {
    model.family = "llama";
  } else if (model_type == "bert") {
    model.family = "bert";
  } else {
    ThrowInputError(where, "model_type", type_json.dump(),
                    "not supported (supported: gpt2, llama, mistral, mixtral, bert)");
  }
  const HfReader hf(json, where);
  const bool llama = model.family == "llama";
  model.source = where;
  model.name = NameFromPath(where);
  if (json.contains("_name_or_path") && json.at("_name_or_path").is_string() &&
      !json.at("_name_or_path").get<std::string>().empty()) {
    model.name = json.at("_name_or_path").get<std::string>();
  }
  model.hidden_size = hf.RequireInt({"hidden_size", "n_embd"});
  model.num_layers = hf.RequireInt({"num_hidden_layers", "n_layer"});
  model.num_attention_heads = hf.RequireInt({"num_attention_heads", "n_head"});
  model.num_key_value_heads = hf.Int({"num_key_value_heads"}).value_or(model.num_attention_heads);
  model.ffn_hidden_size = llama ? hf.RequireInt({"intermediate_size"})
                                : hf.Int({"intermediate_size", "n_inner"}).value_or(0);
  model.vocab_size = hf.RequireInt({"vocab_size"});
  model.max_position_embeddings =
      hf.RequireInt({"max_position_embeddings", "n_positions", "n_ctx"});
  model.seq_length = model.max_position_embeddings;
  model.tie_word_embeddings = !llama;
  if (json.contains("tie_word_embeddings") && !json.at("tie_word_embeddings").is_null()) {
    const nlohmann::json& tie = json.at("tie_word_embeddings");
    if (!tie.is_boolean()) {
      ThrowInputError(where, "tie_word_embeddings", tie.dump(), "must be a boolean");
    }
    model.tie_word_embeddings = tie.get<bool>();
  }
  ApplySeqLengthOverride(model, seq_length_override, where);
  BuildTransformerLayers(model);
  return model;
}

ModelSpec ReadModelFile(const std::string& path, int seq_length_override) {
  std::ifstream in(path, std::ios::binary);
  if (!in || std::filesystem::is_directory(path)) {
    throw InputError(fmt::format("{}: cannot open model file", path));
  }
  std::stringstream buffer;
  buffer << in.rdbuf();
  const std::string text = buffer.str();
  const std::string extension = std::filesystem::path(path).extension().string();
  if (extension == ".toml") return ParseModelToml(text, path, seq_length_override);
  if (extension == ".json") return ParseHfConfigJson(text, path, seq_length_override);
  throw InputError(fmt::format(
      "{}: unknown model file extension \"{}\" (expected .toml or a HuggingFace config .json)",
      path, extension));
}

}  // namespace stratos
