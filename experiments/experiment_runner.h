#pragma once
// `stratos experiment run`: runs the cells of an experiment spec (experiments/experiment_spec.h),
// each in its own process with its time and memory limits, and records one result per cell.
//
// Output directory D:
//   D/spec.toml        the spec as run (cells read it, so editing the original mid-run is safe)
//   D/manifest.json    spec name, hash, and every cell (id, hash, family, instance, searcher, seed)
//   D/cells/<hash>.json  the full result of each finished cell (written atomically; a cell is
//                      finished iff its file exists, so a killed run loses at most the cells
//                      in flight and never redoes a finished one)
//   D/results.csv      one row per finished cell (appended as cells finish; rewritten in cell
//                      order from D/cells at the start and the end of a run); its status is
//                      ok (a plan), no_plan (the searcher found none), declined (the searcher
//                      does not take the problem: exhaustive over its plan limit, ILP without
//                      CBC), timeout, out_of_memory or error
//
// A run of a directory that holds another spec's cells (a different hash) is refused unless
// `extend` is set: then the finished cells that the new spec still has are kept and the rest of
// the new spec runs. Deterministic for fixed seeds wherever the searchers are (time-limited
// searches are not).
#include <string>

#include <nlohmann/json.hpp>

namespace stratos {

struct ExperimentRunOptions {
  std::string spec_path;   // a spec file, or a shipped spec by name (ResolveSpecPath)
  std::string output_dir;  // "": out/experiments/<spec name>
  int jobs = 1;            // cells run at once, >= 1
  bool extend = false;     // accept a changed spec, keeping the finished cells it still has
  int max_cells = 0;       // stop after running this many cells (0: all); for partial runs
  bool rerun_errors = false;  // cells that ended in "error" (a crash, a failed start) run again
  bool progress = true;    // one line per finished cell on stderr, with elapsed time and ETA
};

// Returns 0 when every cell of the spec is finished (whatever the searchers found), 1 when the
// run stopped early (max_cells, or SIGINT/SIGTERM: cells in flight are killed and rerun next
// time). Throws InputError for a bad spec, a changed spec without `extend`, bad options.
int RunExperiment(const ExperimentRunOptions& options);

// The body of one cell (the hidden `stratos experiment cell` subcommand, run in the child):
// builds cell `cell_id` of the spec at `spec_path`, checks that its key hashes to
// `expected_hash`, runs the search and writes its result JSON to `output_file`. Returns 0 when
// the file was written.
int RunExperimentCell(const std::string& spec_path, int cell_id, const std::string& expected_hash,
                      const std::string& output_file);

// The CSV header of results.csv and one row of it from a cell result (cells/<hash>.json).
std::string ResultsCsvHeader();
std::string ResultsCsvRow(const nlohmann::json& cell);

}  // namespace stratos
