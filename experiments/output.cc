#include "experiments/output.h"

#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <nlohmann/json.hpp>

#include "costmodel/data_dir.h"
#include "costmodel/error.h"
#include "costmodel/evaluate.h"
#include "costmodel/pipeline_sim.h"
#include "costmodel/plan.h"

namespace stratos {

void EnsureDirectory(const std::string& dir) {
  std::error_code error;
  std::filesystem::create_directories(dir, error);
  if (error) throw InputError(fmt::format("{}: cannot create output directory: {}", dir, error.message()));
}

OutputSet::OutputSet(std::string dir, std::vector<std::string> entries)
    : dir_(std::move(dir)), entries_(std::move(entries)) {
  EnsureDirectory(dir_);
  std::string staging = dir_ + "/.staging-XXXXXX";
  if (mkdtemp(staging.data()) == nullptr)
    throw InputError(fmt::format("{}: cannot create a staging directory for the outputs: {}",
                                 dir_, std::strerror(errno)));
  staging_ = staging;
  std::filesystem::permissions(staging_, std::filesystem::perms::owner_all |
                                             std::filesystem::perms::group_read |
                                             std::filesystem::perms::group_exec |
                                             std::filesystem::perms::others_read |
                                             std::filesystem::perms::others_exec);
}

OutputSet::~OutputSet() {
  std::error_code error;
  std::filesystem::remove_all(staging_, error);
}

std::string OutputSet::Path(const std::string& name) const {
  STRATOS_CHECK(std::find(entries_.begin(), entries_.end(), name) != entries_.end(),
                "{} is not an entry of the output set", name);
  return staging_ + "/" + name;
}

void OutputSet::Commit() {
  STRATOS_CHECK(!committed_, "output set committed twice");
  namespace fs = std::filesystem;
  for (const std::string& name : entries_) {
    const fs::path staged = staging_ + "/" + name, target = dir_ + "/" + name;
    const fs::path earlier = staging_ + "/.earlier-" + name;
    std::error_code error;
    if (fs::exists(fs::symlink_status(target, error))) {
      fs::rename(target, earlier, error);
      if (error)
        throw InputError(fmt::format("{}: cannot replace: {}", target.string(), error.message()));
    }
    if (fs::exists(fs::symlink_status(staged, error))) {
      fs::rename(staged, target, error);
      if (error)
        throw InputError(fmt::format("{}: cannot move into place: {}", target.string(),
                                     error.message()));
    }
  }
  committed_ = true;
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

void WritePlanTrace(const std::string& path, const Estimate& estimate, const Plan& plan,
                    const std::string& process_name) {
  const long long events = SimulatedEvents(plan.NumPipelineRanks(), plan.num_microbatches);
  if (events > kMaxTraceEvents) {
    fmt::print(stderr, "stratos: {} not written: {} events (more than {})\n", path, events,
               kMaxTraceEvents);
    return;
  }
  const SimResult sim =
      SimulatePipeline(SimStagesFromEstimate(estimate), plan.num_microbatches, plan.schedule);
  WriteJsonAtomically(path, ChromeTrace(sim, process_name, StageGroupNotes(estimate)));
}

bool RunPlotScript(const std::string& arguments, const std::string& log_path) {
  const std::string script = DataPath("experiments/plot.py");
  if (!std::filesystem::exists(script)) return false;
  for (const char* python : {"python3", "/usr/bin/python3"}) {
    const std::string command =
        fmt::format("{} '{}' {} > '{}' 2>&1", python, script, arguments, log_path);
    if (std::system(command.c_str()) == 0) return true;
  }
  return false;
}

}  // namespace stratos
