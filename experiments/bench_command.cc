#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cmath>
#include <nlohmann/json.hpp>

#include "costmodel/cluster_io.h"
#include "costmodel/error.h"
#include "costmodel/evaluate.h"
#include "costmodel/zoo.h"
#include "experiments/commands.h"
#include "experiments/output.h"
#include "experiments/searchers.h"

namespace stratos {

namespace {

// One rung of the GPT ladder: GPT-3-style shapes (Brown et al. 2020 Table 2.1; Megatron 1T from
// Narayanan et al. SC'21 Table 1), sequence 2048, vocabulary 51200, on `nodes` nodes.
struct Rung {
  const char* name;
  int num_layers;
  int hidden_size;
  int num_heads;
  int nodes;
  int global_batch_size;
};

constexpr Rung kLadder[] = {
    {"gpt-1.3b", 24, 2048, 16, 1, 128},   {"gpt-2.7b", 32, 2560, 32, 4, 256},
    {"gpt-13b", 40, 5120, 40, 8, 512},    {"gpt-39b", 64, 6144, 48, 32, 1024},
    {"gpt-175b", 96, 12288, 96, 64, 1536}, {"gpt-1t", 128, 25600, 160, 128, 2048},
};

Problem RungProblem(const Rung& rung, const ClusterSpec& cluster) {
  Problem problem;
  ModelSpec& model = problem.model;
  model.name = rung.name;
  model.family = "gpt";
  model.source = std::string("ladder:") + rung.name;
  model.hidden_size = rung.hidden_size;
  model.num_layers = rung.num_layers;
  model.num_attention_heads = rung.num_heads;
  model.num_key_value_heads = rung.num_heads;
  model.ffn_hidden_size = 4 * rung.hidden_size;
  model.vocab_size = 51200;
  model.seq_length = 2048;
  model.max_position_embeddings = 2048;
  model.tie_word_embeddings = true;
  BuildTransformerLayers(model);
  problem.cluster = cluster.WithNodes(rung.nodes);
  problem.training.global_batch_size = rung.global_batch_size;
  return problem;
}

struct RunRecord {
  std::string status = "failed";
  double iteration_seconds = NAN;
  double wall_seconds = NAN;
  double peak_memory_bytes = NAN;
  std::string plan;
};

// Runs one searcher in a child process so that its peak resident memory is its own
// (getrusage of the child), and a crash or runaway cannot take the benchmark down.
RunRecord RunIsolated(const Problem& problem, const std::string& algorithm, double time_limit) {
  int fds[2];
  if (pipe(fds) != 0) throw InputError("bench: cannot create a pipe");
  const pid_t pid = fork();
  if (pid == 0) {
    close(fds[0]);
    nlohmann::json out;
    try {
      SearchOptions options;
      options.time_limit_seconds = time_limit;
      const auto start = std::chrono::steady_clock::now();
      SearchResult result = MakeSearcher(algorithm)->Search(problem, options);
      out["wall_seconds"] =
          std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
      out["status"] = TerminationTypeName(result.summary.termination);
      if (result.plan) {
        out["iteration_seconds"] = Evaluate(problem, *result.plan).iteration_seconds;
        out["plan"] = result.plan->Summary();
      }
    } catch (const std::exception& e) {
      out["status"] = std::string("error: ") + e.what();
    }
    const std::string text = out.dump();
    if (write(fds[1], text.data(), text.size()) < 0) _exit(3);
    close(fds[1]);
    _exit(0);
  }
  close(fds[1]);
  std::string text;
  char buffer[4096];
  ssize_t n;
  while ((n = read(fds[0], buffer, sizeof buffer)) > 0) text.append(buffer, n);
  close(fds[0]);
  int status = 0;
  struct rusage usage {};
  wait4(pid, &status, 0, &usage);
  RunRecord record;
  record.peak_memory_bytes = usage.ru_maxrss * 1024.0;  // Linux: kilobytes
  if (text.empty()) return record;
  const nlohmann::json out = nlohmann::json::parse(text);
  record.status = out.value("status", "failed");
  record.wall_seconds = out.value("wall_seconds", NAN);
  if (out.contains("iteration_seconds")) record.iteration_seconds = out["iteration_seconds"];
  if (out.contains("plan")) record.plan = out["plan"];
  return record;
}

}  // namespace

int RunBenchLadder(const BenchArgs& args) {
  const std::vector<std::string> algorithms = ExpandAlgorithms(args.algorithms);
  const ClusterSpec cluster = ReadClusterFile(ResolveClusterPath(args.cluster));
  EnsureDirectory(args.output_dir);
  fmt::print("ladder on {} nodes of {} GPUs, time limit {} s per run\n", cluster.name,
             cluster.GpusPerNode(), args.time_limit_seconds);
  std::string csv = "rung,layers,gpus,algorithm,status,iteration_seconds,wall_seconds,"
                    "peak_memory_bytes,gap_to_dp\n";
  nlohmann::json rows = nlohmann::json::array();
  fmt::print("{:<10} {:>6} {:>5} {:<8} {:<12} {:>12} {:>10} {:>9} {:>9}\n", "rung", "layers",
             "gpus", "algo", "status", "iteration s", "wall s", "peak MiB", "gap %");
  int rung_index = 0;
  for (const Rung& rung : kLadder) {
    if (args.max_rungs > 0 && rung_index++ >= args.max_rungs) break;
    const Problem problem = RungProblem(rung, cluster);
    double dp_seconds = NAN;
    for (const std::string& algorithm : algorithms) {
      const RunRecord r = RunIsolated(problem, algorithm, args.time_limit_seconds);
      if (algorithm == "dp" && r.status == "optimal") dp_seconds = r.iteration_seconds;
      const double gap = r.iteration_seconds / dp_seconds - 1;
      fmt::print("{:<10} {:>6} {:>5} {:<8} {:<12} {:>12.4f} {:>10.2f} {:>9.0f} {:>9.3f}\n",
                 rung.name, rung.num_layers, problem.NumDevices(), algorithm, r.status,
                 r.iteration_seconds, r.wall_seconds, r.peak_memory_bytes / (1024.0 * 1024.0),
                 100 * gap);
      std::fflush(stdout);
      csv += fmt::format("{},{},{},{},{},{},{},{},{}\n", rung.name, rung.num_layers,
                         problem.NumDevices(), algorithm, r.status, r.iteration_seconds,
                         r.wall_seconds, r.peak_memory_bytes, gap);
      rows.push_back({{"rung", rung.name},
                      {"layers", rung.num_layers},
                      {"gpus", problem.NumDevices()},
                      {"algorithm", algorithm},
                      {"status", r.status},
                      {"iteration_seconds", r.iteration_seconds},
                      {"wall_seconds", r.wall_seconds},
                      {"peak_memory_bytes", r.peak_memory_bytes},
                      {"gap_to_dp", std::isfinite(gap) ? nlohmann::json(gap) : nlohmann::json()},
                      {"plan", r.plan}});
    }
  }
  WriteFileAtomically(args.output_dir + "/ladder.csv", csv);
  WriteJsonAtomically(args.output_dir + "/ladder.json", {{"rows", rows}});
  fmt::print("wrote {}/ladder.csv and ladder.json\n", args.output_dir);
  return kExitSuccess;
}

}  // namespace stratos
