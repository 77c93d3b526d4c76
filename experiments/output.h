#pragma once
// Output files of a run. Each file is written to a temporary name and renamed into place, so a
// failed or interrupted run never leaves a half-written file or destroys an earlier output.
#include <nlohmann/json_fwd.hpp>

#include <string>

namespace stratos {

struct Estimate;
struct Plan;

// Creates `dir` (and parents). Throws InputError naming the directory if that fails.
void EnsureDirectory(const std::string& dir);

// Writes `text` to `path` atomically: into a temporary file of its own beside it
// (path.tmp-XXXXXX, mkstemp), then renamed over it, so concurrent writers of one path never share
// a temporary and a reader sees a whole file; the temporary is removed if anything fails.
// Throws InputError naming the file on failure.
void WriteFileAtomically(const std::string& path, const std::string& text);
void WriteJsonAtomically(const std::string& path, const nlohmann::json& json);

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
