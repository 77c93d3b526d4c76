#pragma once
// Output files of a run. Each file is written to a temporary name and renamed into place, so a
// failed or interrupted run never leaves a half-written file or destroys an earlier output.
#include <nlohmann/json_fwd.hpp>

#include <string>
#include <vector>

#include "costmodel/atomic_file.h"

namespace stratos {

struct Estimate;
struct Plan;

// Creates `dir` (and parents). Throws InputError naming the directory if that fails.
void EnsureDirectory(const std::string& dir);

// WriteFileAtomically (costmodel/atomic_file.h) of the JSON, indented, with a final newline.
void WriteJsonAtomically(const std::string& path, const nlohmann::json& json);

// The outputs of one run as a set: written into a staging directory of their own inside `dir`
// (dir/.staging-XXXXXX, mkdtemp), then moved into place together by Commit(), which also removes
// the listed entries that this run did not write -- so `dir` never mixes the files of two runs
// (a search without plans does not leave an earlier search's plans/ beside its summary.json).
// Without Commit() (an exception, a failed run) the destructor removes the staging directory and
// `dir` keeps what it had. Files in `dir` that are not listed entries are never touched.
class OutputSet {
 public:
  // `entries`: the names of the set's files and directories in `dir`, moved in this order (put
  // the one readers look at first, e.g. summary.json, last). Creates `dir` and the staging
  // directory. Throws InputError naming the directory if either cannot be created.
  OutputSet(std::string dir, std::vector<std::string> entries);
  ~OutputSet();
  OutputSet(const OutputSet&) = delete;
  OutputSet& operator=(const OutputSet&) = delete;
  // Where to write entry `name` (one of the entries) before Commit(). Throws InternalError for
  // a name not listed.
  std::string Path(const std::string& name) const;
  // Moves every entry into place (each an atomic rename; the earlier version of each goes into
  // the staging directory, which is then removed). Throws InputError naming the entry if a move
  // fails.
  void Commit();

 private:
  std::string dir_, staging_;
  std::vector<std::string> entries_;
  bool committed_ = false;
};

// Runs experiments/plot.py (matplotlib) with `arguments` (already quoted for the shell), its
// output into `log_path`; tries the first python3 on PATH, then Debian's (a pyenv or venv
// python3 may lack matplotlib). Returns whether it succeeded; never throws for a failed plot.
bool RunPlotScript(const std::string& arguments, const std::string& log_path);

// The whole file. Throws InputError "<path>: cannot open" if it cannot be read.
std::string ReadTextFile(const std::string& path);
// The file parsed as JSON. Throws InputError naming the file for a missing file or bad JSON.
nlohmann::json ReadJsonFile(const std::string& path);

// The plan's simulated pipeline (costmodel/pipeline_sim.h) as a Chrome trace at `path`, or, when
// it would have more than kMaxTraceEvents events, a one-line note on stderr naming the path and
// nothing written. Throws InputError if the file cannot be written.
void WritePlanTrace(const std::string& path, const Estimate& estimate, const Plan& plan,
                    const std::string& process_name);

}  // namespace stratos
