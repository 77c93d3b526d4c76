#pragma once
// The model and cluster zoo: named descriptions shipped with stratos (data/models/*.toml,
// data/clusters/*.toml, and HuggingFace configs under ../shared/data/hf_configs), so that
// `--model llama3-8b --cluster dgx-a100-80gb` works without writing files.
#include <string>
#include <vector>

namespace stratos {

// Returns `name_or_path` if it is an existing file; else the zoo file of that name:
// <source>/data/models/<name>.toml, or a HuggingFace config ("gpt2" ->
// ../shared/data/hf_configs/gpt2.config.json, "llama3-8b" -> llama3_8b.config.json; a zoo TOML
// of the same name wins). Throws InputError
// "--model = foo: not a file and not a zoo model (zoo: a, b, c)" otherwise.
std::string ResolveModelPath(const std::string& name_or_path);

// Returns `name_or_path` if it is an existing file; else <source>/data/clusters/<name>.toml; else
// the user's own <UserZooDir()>/clusters/<name>.toml (e.g. `local`, written by `stratos
// calibrate --cluster local --save-as local`). Throws InputError "--cluster = foo: not a file and
// not a zoo cluster (zoo: a, b, c)" otherwise.
std::string ResolveClusterPath(const std::string& name_or_path);

// Names accepted by ResolveModelPath / ResolveClusterPath (the user's clusters included),
// sorted.
std::vector<std::string> ZooModels();
std::vector<std::string> ZooClusters();

// The user's own zoo, where descriptions of the user's machines go: $STRATOS_USER_ZOO, else
// $XDG_DATA_HOME/stratos, else $HOME/.local/share/stratos; "" if none of these is set.
std::string UserZooDir();
// <UserZooDir()>/clusters/<name>.toml. Throws InputError if there is no user zoo (no
// $STRATOS_USER_ZOO, $XDG_DATA_HOME or $HOME) or the name is not a plain file stem
// (letters, digits, '.', '_', '-').
std::string UserClusterPath(const std::string& name);

}  // namespace stratos
