#include "runtime/checkpoint.h"

#include <fmt/format.h>
#include <zlib.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "costmodel/atomic_file.h"
#include "costmodel/error.h"

namespace stratos {
namespace {

namespace fs = std::filesystem;
constexpr const char* kRecordFormat = "stratos-checkpoint-1";

std::uint32_t Crc32(const std::string& bytes) {
  return static_cast<std::uint32_t>(
      crc32_z(0L, reinterpret_cast<const Bytef*>(bytes.data()), bytes.size()));
}

// The file's bytes, or false if it cannot be read.
bool ReadBytes(const std::string& path, std::string* bytes) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return false;
  std::ostringstream buffer;
  buffer << in.rdbuf();
  *bytes = buffer.str();
  return !in.bad();
}

// torch::load of a tensor list from bytes; "" or why it failed (the first line of the error).
std::string Deserialize(const std::string& bytes, std::vector<torch::Tensor>* tensors) {
  try {
    std::istringstream in(bytes);
    torch::load(*tensors, in);
    return "";
  } catch (const std::exception& e) {
    std::string what = e.what();
    return what.substr(0, what.find('\n'));
  }
}

// Reads and checks the rank's file; "" if intact (then *tensors holds its tensors when
// `load`), else the one-line problem.
std::string ReadChecked(const std::string& dir, int step, int rank, bool load,
                        std::vector<torch::Tensor>* tensors) {
  const std::string path = CheckpointFile(dir, step, rank);
  std::string bytes;
  if (!fs::exists(path)) return fmt::format("{}: missing", path);
  if (!ReadBytes(path, &bytes)) return fmt::format("{}: cannot be read", path);
  const std::string record_path = path + ".json";
  std::string record_text;
  if (ReadBytes(record_path, &record_text)) {
    std::uint64_t expected_bytes = 0, expected_crc = 0;
    try {
      const nlohmann::json record = nlohmann::json::parse(record_text);
      if (record.value("format", "") != kRecordFormat)
        return fmt::format("{}: format is not \"{}\"", record_path, kRecordFormat);
      expected_bytes = record.at("bytes").get<std::uint64_t>();
      expected_crc = record.at("crc32").get<std::uint64_t>();
    } catch (const nlohmann::json::exception& e) {
      return fmt::format("{}: not a checkpoint record ({})", record_path, e.what());
    }
    if (bytes.size() != expected_bytes)
      return fmt::format("{}: {}: {} of {} bytes", path,
                         bytes.size() < expected_bytes ? "truncated" : "longer than written",
                         bytes.size(), expected_bytes);
    if (Crc32(bytes) != expected_crc)
      return fmt::format("{}: CRC-32 {:08x}, written as {:08x}: the file changed after it was "
                         "written",
                         path, Crc32(bytes), expected_crc);
    if (!load) return "";
  }
  // Without a record (an older checkpoint), or to load: deserialize.
  std::vector<torch::Tensor> loaded;
  const std::string error = Deserialize(bytes, &loaded);
  if (!error.empty()) return fmt::format("{}: not a tensor list that torch::load reads: {}", path, error);
  if (tensors != nullptr) *tensors = std::move(loaded);
  return "";
}

}  // namespace

std::string CheckpointStepDir(const std::string& dir, int step) {
  return fmt::format("{}/step_{:06d}", dir, step);
}

std::string CheckpointFile(const std::string& dir, int step, int rank) {
  return fmt::format("{}/rank_{}.pt", CheckpointStepDir(dir, step), rank);
}

void WriteCheckpoint(const std::string& dir, int step, int rank,
                     const std::vector<torch::Tensor>& tensors) {
  const std::string path = CheckpointFile(dir, step, rank);
  std::error_code error;
  fs::create_directories(CheckpointStepDir(dir, step), error);
  if (error)
    throw InputError(fmt::format("{}: cannot create the checkpoint directory: {}",
                                 CheckpointStepDir(dir, step), error.message()));
  std::vector<torch::Tensor> cpu;
  for (const torch::Tensor& t : tensors) cpu.push_back(t.detach().cpu());
  std::ostringstream out;
  torch::save(cpu, out);
  const std::string bytes = out.str();
  WriteFileAtomically(path, bytes);
  const nlohmann::json record{{"format", kRecordFormat},
                              {"bytes", bytes.size()},
                              {"crc32", Crc32(bytes)}};
  WriteFileAtomically(path + ".json", record.dump() + "\n");
}

std::vector<int> CheckpointSteps(const std::string& dir) {
  std::vector<int> steps;
  std::error_code error;
  if (!fs::is_directory(dir, error)) return steps;
  for (const fs::directory_entry& entry : fs::directory_iterator(dir, error)) {
    const std::string name = entry.path().filename().string();
    if (!entry.is_directory() || name.rfind("step_", 0) != 0 || name.size() <= 5) continue;
    const std::string digits = name.substr(5);
    if (digits.find_first_not_of("0123456789") != std::string::npos || digits.size() > 9) continue;
    steps.push_back(std::stoi(digits));
  }
  std::sort(steps.rbegin(), steps.rend());
  return steps;
}

std::string CheckpointProblem(const std::string& dir, int step, int rank) {
  return ReadChecked(dir, step, rank, false, nullptr);
}

std::vector<torch::Tensor> LoadCheckpoint(const std::string& dir, int step, int rank) {
  std::vector<torch::Tensor> tensors;
  const std::string problem = ReadChecked(dir, step, rank, true, &tensors);
  if (!problem.empty()) throw InputError(problem);
  return tensors;
}

}  // namespace stratos
