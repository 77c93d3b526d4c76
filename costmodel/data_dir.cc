#include "costmodel/data_dir.h"

#include <fmt/format.h>

#include <cstdlib>
#include <filesystem>
#include <system_error>

#include "costmodel/error.h"

namespace stratos {

namespace {

namespace fs = std::filesystem;

constexpr const char* kEnvironmentVariable = "STRATOS_DATA_DIR";
constexpr const char* kRule =
    "must be a stratos data directory (one holding data/models and data/clusters, as "
    "<prefix>/share/stratos or a source tree does)";

bool IsDataDir(const fs::path& dir) {
  std::error_code error;
  return fs::is_directory(dir / "data" / "models", error) &&
         fs::is_directory(dir / "data" / "clusters", error);
}

// <directory of this executable>/../share/stratos, or "" when unknown or absent.
std::string InstalledDataDir() {
  std::error_code error;
  const fs::path executable = fs::read_symlink("/proc/self/exe", error);
  if (error || executable.empty()) return "";
  const fs::path dir = executable.parent_path().parent_path() / "share" / "stratos";
  if (!IsDataDir(dir)) return "";
  return fs::weakly_canonical(dir, error).string();
}

}  // namespace

std::string DataDir() {
  if (const char* dir = std::getenv(kEnvironmentVariable); dir != nullptr && *dir != '\0') {
    if (!IsDataDir(dir)) throw InputError(fmt::format("{} = {}: {}", kEnvironmentVariable, dir, kRule));
    return dir;
  }
  const std::string installed = InstalledDataDir();
  if (!installed.empty()) return installed;
  return STRATOS_SOURCE_DIR;
}

std::string DataPath(const std::string& relative) { return DataDir() + "/" + relative; }

std::string SharedDataPath(const std::string& relative) {
  const std::string dir = DataDir();
  std::error_code error;
  if (fs::is_directory(dir + "/shared/data", error)) return dir + "/shared/data/" + relative;
  return dir + "/../shared/data/" + relative;
}

void SetDataDir(const std::string& dir) {
  if (!IsDataDir(dir)) ThrowInputError("command line", "--data-dir", dir, kRule);
  // The environment carries it to the processes stratos starts (experiment cells, workers),
  // absolute in case they start elsewhere.
  std::error_code error;
  const fs::path absolute = fs::absolute(dir, error);
  setenv(kEnvironmentVariable, (error ? fs::path(dir) : absolute).c_str(), /*overwrite=*/1);
}

}  // namespace stratos
