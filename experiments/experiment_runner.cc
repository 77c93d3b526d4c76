#include "experiments/experiment_runner.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <csignal>
#include <cstdio>
#include <deque>
#include <filesystem>
#include <fstream>
#include <map>
#include <set>
#include <sstream>
#include <thread>

#include "costmodel/error.h"
#include "costmodel/evaluate.h"
#include "experiments/commands.h"
#include "experiments/experiment_spec.h"
#include "experiments/output.h"
#include "experiments/searchers.h"
#include "runtime/launcher.h"

namespace stratos {

namespace fs = std::filesystem;

namespace {

volatile std::sig_atomic_t g_interrupted = 0;
void OnInterrupt(int) { g_interrupted = 1; }

std::string CsvField(const std::string& text) {
  if (text.find_first_of(",\"\n") == std::string::npos) return text;
  std::string quoted = "\"";
  for (char c : text) {
    if (c == '"') quoted += '"';
    quoted += c == '\n' ? ' ' : c;
  }
  return quoted + "\"";
}

std::string Number(const nlohmann::json& value) {
  if (value.is_null()) return "";
  if (value.is_number_float()) return fmt::format("{:.9g}", value.get<double>());
  return value.dump();
}

std::string Duration(double seconds) {
  if (!std::isfinite(seconds)) return "?";
  const long s = std::lround(seconds);
  if (s >= 3600) return fmt::format("{}h{:02}m", s / 3600, (s % 3600) / 60);
  if (s >= 60) return fmt::format("{}m{:02}s", s / 60, s % 60);
  return fmt::format("{}s", s);
}

struct Running {
  const ExperimentCell* cell;
  pid_t pid;
  std::chrono::steady_clock::time_point start;
  double hard_limit_seconds;
  bool killed_for_time = false;
};

// What every cell result starts with: the cell's identity and settings.
nlohmann::json CellHeaderJson(const ExperimentCell& cell) {
  return {{"cell", cell.id},          {"cell_hash", StableHash(cell.key)},
          {"family", cell.family},    {"instance", cell.instance},
          {"searcher", cell.searcher}, {"algorithm", cell.algorithm},
          {"seed", cell.seed},        {"problem", cell.problem},
          {"time_limit_seconds", cell.time_limit_seconds}};
}

// results.csv from the finished cells, in cell order (ids as in `cells`). Returns the count.
int RewriteResultsCsv(const std::string& dir, const std::vector<ExperimentCell>& cells);

}  // namespace

std::string ResultsCsvHeader() {
  return "cell,cell_hash,family,instance,searcher,algorithm,seed,status,termination,"
         "predicted_iteration_seconds,lower_bound_seconds,proven_optimal,wall_seconds,"
         "evaluations,iterations,peak_memory_MiB,layers,devices,time_limit_seconds,plan,"
         "message\n";
}

std::string ResultsCsvRow(const nlohmann::json& c) {
  auto text = [&](const char* key) { return CsvField(c.value(key, std::string())); };
  auto number = [&](const char* key) { return c.contains(key) ? Number(c[key]) : std::string(); };
  return fmt::format(
      "{},{},{},{},{},{},{},{},{},{},{},{},{},{},{},{},{},{},{},{},{}\n", number("cell"),
      text("cell_hash"), text("family"), text("instance"), text("searcher"), text("algorithm"),
      number("seed"), text("status"), text("termination"), number("predicted_iteration_seconds"),
      number("lower_bound_seconds"), c.value("proven_optimal", false) ? "true" : "false",
      number("wall_seconds"), number("evaluations"), number("iterations"),
      c.contains("peak_memory_bytes") && c["peak_memory_bytes"].is_number()
          ? fmt::format("{:.1f}", c["peak_memory_bytes"].get<double>() / (1024.0 * 1024.0))
          : std::string(),
      number("layers"), number("devices"), number("time_limit_seconds"), text("plan_summary"),
      text("message"));
}

int RunExperimentCell(const std::string& spec_path, int cell_id, const std::string& expected_hash,
                      const std::string& output_file) {
  const ExperimentSpec spec = ReadExperimentSpec(spec_path);
  const std::vector<ExperimentCell> cells = spec.Expand();
  if (cell_id < 0 || cell_id >= static_cast<int>(cells.size()))
    ThrowInputError(spec_path, "cell", cell_id, fmt::format("must be in [0, {})", cells.size()));
  const ExperimentCell& cell = cells[cell_id];
  if (StableHash(cell.key) != expected_hash)
    throw InputError(fmt::format("{}: cell {} has hash {}, expected {}: the spec changed", spec_path,
                                 cell_id, StableHash(cell.key), expected_hash));
  nlohmann::json out = CellHeaderJson(cell);
  try {
    const CellProblem cp = BuildCellProblem(cell.problem);
    out["layers"] = cp.problem.NumLayers();
    out["devices"] = cp.problem.NumDevices();
    out["model"] = cp.problem.model.name;
    SearcherSetup setup(cell.algorithm, spec_path + ": algorithm");
    SearchOptions& options = setup.search_options();
    options.space = cp.space;
    options.time_limit_seconds = cell.time_limit_seconds;
    options.seed = cell.seed;
    options.progress = false;
    for (const auto& [name, value] : cell.options) setup.Set(name, value, spec_path);
    setup.Validate(spec_path);
    out["options"] = setup.ToJson()["options"];
    const SearchResult result = setup.MakeSearcher()->Search(cp.problem, options);
    const SearchSummary& s = result.summary;
    out["termination"] = TerminationTypeName(s.termination);
    out["message"] = s.message;
    out["wall_seconds"] = s.wall_seconds;
    out["evaluations"] = s.evaluations;
    out["iterations"] = s.iterations;
    if (s.lower_bound_seconds) out["lower_bound_seconds"] = *s.lower_bound_seconds;
    nlohmann::json anytime = nlohmann::json::array();
    for (const AnytimePoint& p : s.anytime) anytime.push_back({p.wall_seconds, p.best_iteration_seconds});
    out["anytime"] = anytime;
    if (result.plan) {
      const Estimate estimate = Evaluate(cp.problem, *result.plan);
      out["status"] = "ok";
      out["predicted_iteration_seconds"] = estimate.iteration_seconds;
      out["proven_optimal"] = s.termination == TerminationType::kOptimal;
      out["plan_summary"] = result.plan->Summary();
      out["plan"] = PlanToJson(*result.plan);
    } else {
      // A searcher that declined the problem did not search: its cell is not a failure to
      // find a plan.
      out["status"] = s.termination == TerminationType::kDeclined ? "declined" : "no_plan";
      out["proven_optimal"] = false;
    }
  } catch (const std::bad_alloc&) {
    out["status"] = "out_of_memory";
    out["message"] = "allocation failed (memory limit of the cell)";
  } catch (const std::exception& e) {
    out["status"] = "error";
    out["message"] = e.what();
  }
  WriteJsonAtomically(output_file, out);
  return kExitSuccess;
}

int RunExperiment(const ExperimentRunOptions& options) {
  if (options.jobs < 1) ThrowInputError("command line", "--jobs", options.jobs, "must be >= 1");
  if (options.max_cells < 0)
    ThrowInputError("command line", "--max-cells", options.max_cells, "must be >= 0");
  const std::string spec_path = ResolveSpecPath(options.spec_path);
  const ExperimentSpec spec = ReadExperimentSpec(spec_path);
  const std::string dir =
      options.output_dir.empty() ? "out/experiments/" + spec.name : options.output_dir;
  const std::vector<ExperimentCell> cells = spec.Expand();
  const std::string hash = spec.Hash();
  EnsureDirectory(dir + "/cells");

  // The spec this directory was started with.
  const std::string manifest_path = dir + "/manifest.json";
  if (fs::exists(manifest_path)) {
    const nlohmann::json old = ReadJsonFile(manifest_path);  // names the file when unreadable
    const std::string old_hash = old.value("spec_hash", "");
    if (old_hash != hash && !options.extend)
      throw InputError(fmt::format(
          "{}: holds the results of another spec (hash {}, this spec {}): the spec changed since "
          "this directory was started; pass --extend to keep the finished cells the new spec "
          "still has and run the rest, or use a new --output-dir",
          dir, old_hash, hash));
  }
  std::map<std::string, const ExperimentCell*> by_hash;
  nlohmann::json manifest_cells = nlohmann::json::array();
  for (const ExperimentCell& cell : cells) {
    const std::string h = StableHash(cell.key);
    if (!by_hash.emplace(h, &cell).second)
      throw InputError(fmt::format("{}: cells {} and {} are identical (same family, problem, "
                                   "searcher and seed)",
                                   spec_path, by_hash[h]->id, cell.id));
    manifest_cells.push_back({{"id", cell.id}, {"hash", h}, {"family", cell.family},
                              {"instance", cell.instance}, {"searcher", cell.searcher},
                              {"algorithm", cell.algorithm}, {"seed", cell.seed}});
  }
  std::vector<std::string> searcher_order;
  for (const ExperimentSearcher& s : spec.searchers) searcher_order.push_back(s.name);
  std::vector<std::string> family_order;
  for (const ExperimentFamily& f : spec.families) family_order.push_back(f.name);
  WriteFileAtomically(dir + "/spec.toml", ReadTextFile(spec_path));
  WriteJsonAtomically(manifest_path, {{"schema", "stratos.experiment/1"},
                                      {"name", spec.name},
                                      {"description", spec.description},
                                      {"spec_source", spec_path},
                                      {"spec_hash", hash},
                                      {"families", family_order},
                                      {"searchers", searcher_order},
                                      {"memory_limit_bytes", spec.memory_limit_bytes},
                                      {"cells", manifest_cells}});

  // Finished cells, and results.csv rebuilt from them (a kill may have torn its last row).
  std::vector<const ExperimentCell*> pending;
  for (const ExperimentCell& cell : cells) {
    const std::string path = dir + "/cells/" + StableHash(cell.key) + ".json";
    if (fs::exists(path) && options.rerun_errors &&
        ReadJsonFile(path).value("status", "") == "error")
      fs::remove(path);
    if (!fs::exists(path)) pending.push_back(&cell);
  }
  const int finished = RewriteResultsCsv(dir, cells);
  if (options.progress)
    fmt::print(stderr, "experiment {}: {} cells, {} finished earlier, {} to run ({} at a time) -> {}\n",
               spec.name, cells.size(), finished, pending.size(), options.jobs, dir);

  const std::string self = SelfExecutable();
  const std::string spec_copy = dir + "/spec.toml";
  struct sigaction action {};
  action.sa_handler = OnInterrupt;
  sigaction(SIGINT, &action, nullptr);
  sigaction(SIGTERM, &action, nullptr);
  g_interrupted = 0;

  const auto run_start = std::chrono::steady_clock::now();
  std::deque<const ExperimentCell*> queue(pending.begin(), pending.end());
  if (options.max_cells > 0 && static_cast<int>(queue.size()) > options.max_cells)
    queue.resize(options.max_cells);
  const size_t to_run = queue.size();
  size_t done_now = 0;
  std::vector<Running> running;
  auto launch = [&](const ExperimentCell* cell) {
    const std::string h = StableHash(cell->key);
    const std::string child_file = dir + "/cells/" + h + ".child.json";
    std::vector<std::string> args = {self, "experiment", "cell", spec_copy, "--cell",
                                     std::to_string(cell->id), "--hash", h, "--output", child_file};
    std::vector<char*> argv;
    for (std::string& a : args) argv.push_back(a.data());
    argv.push_back(nullptr);
    const pid_t pid = fork();
    if (pid < 0) throw InputError("experiment: cannot start a cell process (fork failed)");
    if (pid == 0) {
      // Only async-signal-safe calls between fork and exec.
      prctl(PR_SET_PDEATHSIG, SIGKILL);
      struct rlimit limit;
      limit.rlim_cur = limit.rlim_max = static_cast<rlim_t>(spec.memory_limit_bytes);
      setrlimit(RLIMIT_AS, &limit);
      const int null = open("/dev/null", O_WRONLY);
      if (null >= 0) dup2(null, STDOUT_FILENO);
      // The runner's own binary, even if its path was rebuilt or replaced since the run began
      // (/proc/self/exe names the inode this process runs): every cell of a run runs the same
      // code, and a rebuild during a long run neither fails nor mixes its cells.
      execv("/proc/self/exe", argv.data());
      execv(argv[0], argv.data());
      _exit(127);
    }
    running.push_back({cell, pid, std::chrono::steady_clock::now(),
                       2 * cell->time_limit_seconds + 30});
  };
  auto finish = [&](const Running& r, int status, const struct rusage& usage) {
    const std::string h = StableHash(r.cell->key);
    const std::string child_file = dir + "/cells/" + h + ".child.json";
    nlohmann::json result;
    if (fs::exists(child_file)) {
      result = ReadJsonFile(child_file);
      fs::remove(child_file);
    } else {
      result = CellHeaderJson(*r.cell);
      result["wall_seconds"] =
          std::chrono::duration<double>(std::chrono::steady_clock::now() - r.start).count();
      if (r.killed_for_time) {
        result["status"] = "timeout";
        result["message"] = fmt::format("killed after {:.0f} s (time limit {} s)",
                                        r.hard_limit_seconds, r.cell->time_limit_seconds);
      } else if (WIFSIGNALED(status)) {
        result["status"] = "error";
        result["message"] = fmt::format("the cell process died of signal {} ({}; memory limit {:.1f} GiB)",
                                        WTERMSIG(status), strsignal(WTERMSIG(status)),
                                        spec.memory_limit_bytes / (1024.0 * 1024 * 1024));
      } else if (WEXITSTATUS(status) == 127) {
        result["status"] = "error";
        result["message"] = "the cell process could not start (exec of this executable failed)";
      } else {
        result["status"] = "error";
        result["message"] = fmt::format("the cell process exited with {} without a result",
                                        WEXITSTATUS(status));
      }
    }
    result["peak_memory_bytes"] = usage.ru_maxrss * 1024.0;  // Linux: kilobytes
    WriteJsonAtomically(dir + "/cells/" + h + ".json", result);
    {
      std::ofstream out(dir + "/results.csv", std::ios::app | std::ios::binary);
      out << ResultsCsvRow(result);
    }
    ++done_now;
    if (options.progress) {
      const double elapsed =
          std::chrono::duration<double>(std::chrono::steady_clock::now() - run_start).count();
      const double eta = elapsed / done_now * (to_run - done_now);
      std::string value = result.contains("predicted_iteration_seconds")
                              ? fmt::format("{:.6g} s", result["predicted_iteration_seconds"].get<double>())
                              : result.value("status", "?");
      fmt::print(stderr, "[{}/{} {:3.0f}%] {} {} {} seed {}: {} ({}, {:.2f} s) elapsed {}, ETA {}\n",
                 finished + done_now, cells.size(),
                 100.0 * (finished + done_now) / std::max<size_t>(1, cells.size()), r.cell->family,
                 r.cell->instance, r.cell->searcher, r.cell->seed, value, result.value("status", "?"),
                 result.value("wall_seconds", 0.0), Duration(elapsed), Duration(eta));
    }
  };

  while ((!queue.empty() || !running.empty())) {
    if (g_interrupted) {
      for (Running& r : running) kill(r.pid, SIGKILL);
      for (Running& r : running) waitpid(r.pid, nullptr, 0);
      for (Running& r : running) {
        std::error_code ignored;
        fs::remove(dir + "/cells/" + StableHash(r.cell->key) + ".child.json", ignored);
      }
      fmt::print(stderr, "experiment interrupted: {} cells finished this run; the cells in "
                         "flight will run again when the same command is repeated\n", done_now);
      return kExitNoResult;
    }
    while (!queue.empty() && static_cast<int>(running.size()) < options.jobs) {
      launch(queue.front());
      queue.pop_front();
    }
    bool reaped = false;
    for (size_t i = 0; i < running.size(); ++i) {
      Running& r = running[i];
      int status = 0;
      struct rusage usage {};
      const pid_t got = wait4(r.pid, &status, WNOHANG, &usage);
      if (got == r.pid) {
        finish(r, status, usage);
        running.erase(running.begin() + i);
        reaped = true;
        break;
      }
      const double age =
          std::chrono::duration<double>(std::chrono::steady_clock::now() - r.start).count();
      if (age > r.hard_limit_seconds && !r.killed_for_time) {
        r.killed_for_time = true;
        kill(r.pid, SIGKILL);
      }
    }
    if (!reaped) std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }

  const int complete = RewriteResultsCsv(dir, cells);
  if (options.progress)
    fmt::print(stderr, "experiment {}: {} of {} cells finished; results in {}/results.csv "
                       "(stratos experiment report {})\n",
               spec.name, complete, cells.size(), dir, dir);
  return complete == static_cast<int>(cells.size()) ? kExitSuccess : kExitNoResult;
}

namespace {

int RewriteResultsCsv(const std::string& dir, const std::vector<ExperimentCell>& cells) {
  std::string csv = ResultsCsvHeader();
  int count = 0;
  for (const ExperimentCell& cell : cells) {
    const std::string path = dir + "/cells/" + StableHash(cell.key) + ".json";
    if (!fs::exists(path)) continue;
    nlohmann::json result = ReadJsonFile(path);
    result["cell"] = cell.id;  // ids move when a spec is extended
    csv += ResultsCsvRow(result);
    ++count;
  }
  WriteFileAtomically(dir + "/results.csv", csv);
  return count;
}

}  // namespace

}  // namespace stratos
