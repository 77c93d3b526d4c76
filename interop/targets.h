#pragma once
// Internal to interop/: the per-target writers and readers behind interop.h.
#include <map>
#include <string>
#include <vector>

#include "interop/interop.h"

namespace stratos {

// Throws InputError naming `where` unless `model` is a gpt or llama transformer expanded to
// [embedding, blocks, head].
void CheckTransformerModel(const ModelSpec& model, Target target, const std::string& where);

// The torchtitan llama3 flavor with `model`'s shape ("8B", "70B", "405B"; torchtitan
// models/llama3/__init__.py). Throws InputError naming `where` and the known shapes otherwise.
std::string TorchtitanFlavor(const ModelSpec& model, const std::string& where);
// The model shape of a torchtitan llama3 flavor; throws InputError naming `where` for others.
ModelSpec TorchtitanFlavorModel(const std::string& flavor, const std::string& where);

// Megatron-LM flags of a layout, in groups ("MODEL_ARGS", ...), each a list of "--flag [value]"
// lines; shared by the Megatron and Megatron-DeepSpeed launch scripts.
struct FlagGroup {
  std::string name;
  std::vector<std::string> lines;
};
std::vector<FlagGroup> MegatronFlagGroups(const Problem& problem, const ParallelLayout& layout,
                                          bool deepspeed);
// "#!/bin/bash" script body lines that print a bash array per group.
std::string BashArrays(const std::vector<FlagGroup>& groups);
// TrainingSpec::dp_bucket_bytes as the bucket's element count (the gradients' dtype), >= 1, as
// Megatron's --ddp-bucket-size and DeepSpeed's reduce_bucket_size count it.
long long DpBucketElements(const TrainingSpec& training);

// The module names of each virtual stage in torchtitan's and torch's llama naming: the first
// stage starts with "tok_embeddings", blocks are "layers.<k>", the last ends with "norm",
// "output". One entry per layout.blocks entry.
std::vector<std::vector<std::string>> StageModules(const ParallelLayout& layout);

ExportFile MegatronScript(const Problem& problem, const ParallelLayout& layout);
std::vector<ExportFile> DeepSpeedFiles(const Problem& problem, const ParallelLayout& layout);
ExportFile TorchtitanToml(const Problem& problem, const ParallelLayout& layout,
                          const std::string& where);
std::vector<ExportFile> TorchPipeliningFiles(const Problem& problem, const Plan& plan,
                                             const ParallelLayout& layout);

// The words of a shell script or argument list as bash would split them after expanding simple
// variables: comments, line continuations, quotes; NAME=value and NAME=${NAME:-value}
// assignments expand later $NAME, ${NAME} and ${NAME:-default}; array assignments NAME=( ... )
// contribute their words where they are defined. Good enough for launch scripts, not a shell.
std::vector<std::string> ShellWords(const std::string& text);

// "--flag value" / "--flag" pairs of a word list (a flag followed by another flag or nothing has
// the value ""); the last occurrence wins. Keys keep their leading dashes.
std::map<std::string, std::string> FlagValues(const std::vector<std::string>& words);

// The integer value of `flag` in `flags` (FlagValues), `fallback` when absent. Throws InputError
// naming `where` and the flag for a non-integer or a value outside [min_value, 1e9].
int FlagInt(const std::map<std::string, std::string>& flags, const std::string& flag,
            const std::string& where, int fallback, int min_value = 1);

ImportedConfig ImportMegatron(const std::string& path, const std::string& text, int world_size);
ImportedConfig ImportDeepSpeed(const std::string& path, const std::string& text, int world_size);
ImportedConfig ImportTorchtitan(const std::string& path, const std::string& text, int world_size);

}  // namespace stratos
