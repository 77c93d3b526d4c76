#pragma once
// Reading model descriptions: stratos TOML files and HuggingFace config.json (DESIGN.md §3).
//
// Every bad input throws InputError whose message names the file, the key path, the value and
// the rule broken, e.g. "gpt3.toml: model.hidden_size = -5: must be >= 1". Unknown keys are
// errors in TOML files; HuggingFace configs carry many keys stratos does not use, which are
// ignored.
#include <string>
#include <string_view>

#include "costmodel/model.h"

namespace stratos {

// Reads a model file, dispatching on its extension: ".toml" (ParseModelToml) or ".json"
// (ParseHfConfigJson). seq_length_override > 0 replaces the sequence length of a transformer
// family (for HuggingFace configs the default is max_position_embeddings); it is ignored for
// explicit models. Throws InputError "<path>: cannot open model file" if the file cannot be
// read, and the parsers' errors otherwise.
ModelSpec ReadModelFile(const std::string& path, int seq_length_override = 0);

// Parses a stratos model TOML document; `where` names it in error messages (a file name).
//
// Transformer families:
//   [model]
//   name = "gpt3-6.7b"             # optional, default: file stem
//   source = "..."                 # optional prose: where the numbers come from
//   family = "gpt"                 # "gpt" | "llama" | "bert" | "explicit"
//   hidden_size = 4096
//   num_layers = 32                # transformer blocks
//   num_attention_heads = 32
//   num_key_value_heads = 32       # optional, default: num_attention_heads (GQA when fewer)
//   ffn_hidden_size = 16384        # optional for gpt/bert (default 4 h), required for llama
//   vocab_size = 50257
//   seq_length = 2048
//   max_position_embeddings = 2048 # optional, default: seq_length
//   tie_word_embeddings = true     # optional, default true for gpt/bert, false for llama
// Explicit layer lists (non-transformer models, synthetic partition problems):
//   [model]
//   family = "explicit"
//   cut_cost_seconds = 2           # optional, >= 0, default 0: cost of each stage boundary
//   backward_to_forward_ratio = 2  # optional, >= 0, default 2
//   seq_length = 1                 # optional, default 1
//   [[model.layer]]
//   name = "conv1"                 # optional, default "layer.<index>"
//   forward_flops = 1e9            # >= 0, per sample
//   param_bytes = 2e6              # >= 0, bf16: param_count = param_bytes / 2
//   activation_bytes = 1e6         # >= 0, per sample, kept for backward (sharded by TP)
//   output_bytes = 1e5             # optional, >= 0, default 0: sent to the next stage
//   count = 4                      # optional, >= 1: repeats the layer
// Explicit layers with identical numbers (including their input, the previous layer's output)
// share a cost class, numbered in order of first appearance.
// Throws InputError on TOML syntax errors ("<where>:<line>:<col>: TOML parse error: ..."),
// unknown, missing or wrongly typed keys and impossible values (BuildTransformerLayers).
ModelSpec ParseModelToml(std::string_view text, const std::string& where,
                         int seq_length_override = 0);

// Parses a HuggingFace config.json (model_type gpt2, llama, mistral, bert; GPT-2 aliases n_embd,
// n_layer, n_head, n_inner, n_positions, n_ctx). seq_length = max_position_embeddings unless
// seq_length_override > 0. tie_word_embeddings defaults to true for gpt2/bert, false otherwise.
// Throws InputError on malformed JSON ("<where>: JSON parse error: ..."), unsupported
// model_type, MoE configs (num_local_experts), missing or non-integer sizes, impossible shapes.
ModelSpec ParseHfConfigJson(std::string_view text, const std::string& where,
                            int seq_length_override = 0);

}  // namespace stratos
