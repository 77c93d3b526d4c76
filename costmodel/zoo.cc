#include "costmodel/zoo.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <map>
#include <system_error>

#include "costmodel/data_dir.h"
#include "costmodel/error.h"

namespace stratos {

namespace {

namespace fs = std::filesystem;

std::string ModelsDir() { return DataPath("data/models"); }
std::string ClustersDir() { return DataPath("data/clusters"); }
std::string HfConfigsDir() { return SharedDataPath("hf_configs"); }

// Zoo names served by a HuggingFace config.json (golden parameter counts in the data README).
const std::map<std::string, std::string>& HfConfigs() {
  static const std::map<std::string, std::string> configs = {
      {"gpt2", "gpt2.config.json"},
      {"llama3-8b", "llama3_8b.config.json"},
  };
  return configs;
}

bool IsFile(const std::string& path) {
  std::error_code error;
  return fs::is_regular_file(path, error);
}

// Stems of the *.toml files of `dir`, sorted; empty if the directory is missing.
std::vector<std::string> TomlStems(const std::string& dir) {
  std::vector<std::string> names;
  std::error_code error;
  for (fs::directory_iterator it(dir, error), end; !error && it != end; it.increment(error)) {
    if (it->is_regular_file() && it->path().extension() == ".toml") {
      names.push_back(it->path().stem().string());
    }
  }
  std::sort(names.begin(), names.end());
  return names;
}

}  // namespace

std::vector<std::string> ZooModels() {
  std::vector<std::string> names = TomlStems(ModelsDir());
  for (const auto& [name, file] : HfConfigs()) {
    if (IsFile(fmt::format("{}/{}", HfConfigsDir(), file))) names.push_back(name);
  }
  std::sort(names.begin(), names.end());
  names.erase(std::unique(names.begin(), names.end()), names.end());
  return names;
}

std::vector<std::string> ZooClusters() {
  std::vector<std::string> names = TomlStems(ClustersDir());
  const std::string user = UserZooDir();
  if (!user.empty())
    for (const std::string& name : TomlStems(user + "/clusters")) names.push_back(name);
  std::sort(names.begin(), names.end());
  names.erase(std::unique(names.begin(), names.end()), names.end());
  return names;
}

std::string UserZooDir() {
  const char* own = std::getenv("STRATOS_USER_ZOO");
  if (own != nullptr && *own != '\0') return own;
  const char* xdg = std::getenv("XDG_DATA_HOME");
  if (xdg != nullptr && *xdg != '\0') return fmt::format("{}/stratos", xdg);
  const char* home = std::getenv("HOME");
  if (home != nullptr && *home != '\0') return fmt::format("{}/.local/share/stratos", home);
  return "";
}

std::string UserClusterPath(const std::string& name) {
  if (name.empty() || name.find_first_not_of("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ"
                                             "0123456789._-") != std::string::npos ||
      name[0] == '.')
    throw InputError(fmt::format("cluster name '{}': must be a file stem of letters, digits, "
                                 "'.', '_' and '-' (not starting with '.')",
                                 name));
  const std::string dir = UserZooDir();
  if (dir.empty())
    throw InputError(fmt::format("cluster name '{}': no user zoo (set STRATOS_USER_ZOO, "
                                 "XDG_DATA_HOME or HOME)",
                                 name));
  return fmt::format("{}/clusters/{}.toml", dir, name);
}

std::string ResolveModelPath(const std::string& name_or_path) {
  if (IsFile(name_or_path)) return name_or_path;
  const std::string toml = fmt::format("{}/{}.toml", ModelsDir(), name_or_path);
  if (IsFile(toml)) return toml;
  const auto hf = HfConfigs().find(name_or_path);
  if (hf != HfConfigs().end()) {
    const std::string json = fmt::format("{}/{}", HfConfigsDir(), hf->second);
    if (IsFile(json)) return json;
  }
  throw InputError(fmt::format("--model = {}: not a file and not a zoo model (zoo: {})",
                               name_or_path, fmt::join(ZooModels(), ", ")));
}

std::string ResolveClusterPath(const std::string& name_or_path) {
  if (IsFile(name_or_path)) return name_or_path;
  const std::string toml = fmt::format("{}/{}.toml", ClustersDir(), name_or_path);
  if (IsFile(toml)) return toml;
  const std::string user = UserZooDir();
  if (!user.empty()) {
    const std::string own = fmt::format("{}/clusters/{}.toml", user, name_or_path);
    if (IsFile(own)) return own;
  }
  throw InputError(fmt::format("--cluster = {}: not a file and not a zoo cluster (zoo: {})",
                               name_or_path, fmt::join(ZooClusters(), ", ")));
}

}  // namespace stratos
