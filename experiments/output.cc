#include "experiments/output.h"

#include <filesystem>
#include <fstream>
#include <sstream>
#include <nlohmann/json.hpp>

#include "costmodel/error.h"

namespace stratos {

void EnsureDirectory(const std::string& dir) {
  std::error_code error;
  std::filesystem::create_directories(dir, error);
  if (error) throw InputError(fmt::format("{}: cannot create output directory: {}", dir, error.message()));
}

void WriteFileAtomically(const std::string& path, const std::string& text) {
  const std::string temporary = path + ".tmp";
  {
    std::ofstream out(temporary, std::ios::binary | std::ios::trunc);
    if (!out) throw InputError(fmt::format("{}: cannot write output file", temporary));
    out << text;
    if (!out.flush()) throw InputError(fmt::format("{}: write failed", temporary));
  }
  std::error_code error;
  std::filesystem::rename(temporary, path, error);
  if (error) throw InputError(fmt::format("{}: cannot move into place: {}", path, error.message()));
}

std::string ReadTextFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw InputError(fmt::format("{}: cannot open", path));
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

nlohmann::json ReadJsonFile(const std::string& path) {
  try {
    return nlohmann::json::parse(ReadTextFile(path));
  } catch (const nlohmann::json::exception& e) {
    throw InputError(fmt::format("{}: not valid JSON: {}", path, e.what()));
  }
}

void WriteJsonAtomically(const std::string& path, const nlohmann::json& json) {
  WriteFileAtomically(path, json.dump(2) + "\n");
}

}  // namespace stratos
