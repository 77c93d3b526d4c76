#include "runtime/launcher.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <fmt/format.h>
#include <netinet/in.h>
#include <signal.h>
#include <spawn.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <climits>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <stdexcept>
#include <thread>

#include "costmodel/error.h"
#include "runtime/data.h"

extern char** environ;

namespace stratos {

bool LaunchResult::Succeeded() const {
  for (int code : exit_codes)
    if (code != 0) return false;
  return !exit_codes.empty();
}

std::string LaunchResult::Summary() const {
  std::string text;
  for (size_t r = 0; r < exit_codes.size(); ++r) {
    if (!text.empty()) text += "; ";
    const bool stalled = r < activity.size() && !activity[r].empty();
    if (r < hung.size() && hung[r] && stalled) {
      text += fmt::format("rank {}: hung while {} (no rank progressed for {:.1f} s), killed after "
                          "{:.1f} s", r, activity[r], stalled_seconds, exit_seconds[r]);
    } else if (r < hung.size() && hung[r]) {
      text += fmt::format("rank {}: hung (still running after every other rank exited), killed "
                          "after {:.1f} s", r, exit_seconds[r]);
    } else if (stalled) {
      text += fmt::format("rank {}: killed after {:.1f} s while {}", r, exit_seconds[r],
                          activity[r]);
    } else if (killed[r]) {
      text += fmt::format("rank {}: killed after {:.1f} s", r, exit_seconds[r]);
    } else if (exit_codes[r] < 0) {
      text += fmt::format("rank {}: signal {} after {:.1f} s", r, -exit_codes[r], exit_seconds[r]);
    } else {
      text += fmt::format("rank {}: exit {} after {:.1f} s", r, exit_codes[r], exit_seconds[r]);
    }
  }
  return text;
}

std::string WorkerErrors(const std::string& output_dir) {
  const std::filesystem::path dir = std::filesystem::path(output_dir) / "errors";
  std::error_code error;
  if (!std::filesystem::is_directory(dir, error)) return "";
  std::vector<std::filesystem::path> files;
  for (const auto& entry : std::filesystem::directory_iterator(dir, error))
    if (entry.is_regular_file()) files.push_back(entry.path());
  // rank_2 before rank_10.
  std::sort(files.begin(), files.end(), [](const auto& a, const auto& b) {
    const std::string x = a.filename().string(), y = b.filename().string();
    return x.size() != y.size() ? x.size() < y.size() : x < y;
  });
  std::string text;
  for (const auto& file : files) {
    std::ifstream in(file);
    std::stringstream buffer;
    buffer << in.rdbuf();
    std::string line = buffer.str();
    if (line.empty()) continue;
    if (line.back() != '\n') line += '\n';
    text += "  " + line;
  }
  return text;
}

std::string SelfExecutable() {
  char buffer[PATH_MAX];
  const ssize_t length = readlink("/proc/self/exe", buffer, sizeof(buffer) - 1);
  if (length <= 0) throw std::runtime_error("cannot find this executable (/proc/self/exe)");
  return std::string(buffer, static_cast<size_t>(length));
}

int FreeTcpPort() {
  const int fd = socket(AF_INET, SOCK_STREAM, 0);
  if (fd < 0) throw std::runtime_error("cannot create a socket to find a free port");
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  addr.sin_port = 0;
  socklen_t length = sizeof(addr);
  if (bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0 ||
      getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &length) != 0) {
    close(fd);
    throw std::runtime_error("cannot bind a socket to find a free port");
  }
  const int port = ntohs(addr.sin_port);
  close(fd);
  return port;
}

namespace {
constexpr const char* kLauncherPidVariable = "STRATOS_LAUNCHER_PID";
constexpr const char* kHeartbeatDirVariable = "STRATOS_HEARTBEAT_DIR";

// One heartbeat as the launcher reads it: "<counter> <step> <waiting> <activity>".
struct BeatRecord {
  long long counter = -1;  // -1: none yet
  int step = -1;
  bool waiting = false;
  std::string activity;
};

BeatRecord ReadBeat(const std::string& path) {
  BeatRecord beat;
  std::ifstream in(path);
  int waiting = 0;
  if (!(in >> beat.counter >> beat.step >> waiting)) return BeatRecord{};
  beat.waiting = waiting != 0;
  std::getline(in >> std::ws, beat.activity);
  beat.activity.erase(beat.activity.find_last_not_of(' ') + 1);  // the fixed width's padding
  return beat;
}
}  // namespace

Heartbeat::Heartbeat(int rank) {
  const char* dir = std::getenv(kHeartbeatDirVariable);
  if (dir == nullptr || *dir == '\0') return;
  fd_ = open(fmt::format("{}/rank_{}", dir, rank).c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC,
             0644);
}

Heartbeat::~Heartbeat() {
  if (fd_ >= 0) close(fd_);
}

void Heartbeat::Beat(int step, bool waiting, const std::string& activity) {
  if (fd_ < 0) return;
  // Fixed width, so that each beat overwrites the whole of the previous one.
  const std::string line =
      fmt::format("{:<160}\n", fmt::format("{} {} {} {}", ++counter_, step, waiting ? 1 : 0,
                                           activity.substr(0, 120)));
  if (pwrite(fd_, line.data(), line.size(), 0) < 0) {
    close(fd_);  // a launcher that cannot read us anyway; stop trying
    fd_ = -1;
  }
}

void SetUpWorkerProcess() {
  signal(SIGPIPE, SIG_IGN);
  const char* launcher = std::getenv(kLauncherPidVariable);
  if (launcher == nullptr) return;
  prctl(PR_SET_PDEATHSIG, SIGKILL);
  // The launcher may have died before the prctl: then this process was re-parented already.
  if (getppid() != static_cast<pid_t>(std::atol(launcher))) std::_Exit(1);
}

LaunchResult LaunchLocalWorkers(const LaunchOptions& options) {
  using Clock = std::chrono::steady_clock;
  const int port = options.master_port > 0 ? options.master_port : FreeTcpPort();
  // The environment without torchrun's variables, which each worker gets anew.
  std::vector<std::string> base_env;
  const char* skip[] = {"RANK=", "LOCAL_RANK=", "WORLD_SIZE=", "LOCAL_WORLD_SIZE=",
                        "MASTER_ADDR=", "MASTER_PORT=", "STRATOS_LAUNCHER_PID=",
                        "STRATOS_HEARTBEAT_DIR="};
  for (char** e = environ; *e != nullptr; ++e) {
    bool drop = false;
    for (const char* prefix : skip) drop = drop || std::strncmp(*e, prefix, std::strlen(prefix)) == 0;
    if (!drop) base_env.push_back(*e);
  }
  if (!options.log_dir.empty()) std::filesystem::create_directories(options.log_dir);
  // Heartbeat files: beside the logs, or in a temporary directory removed at the end.
  std::string heartbeat_dir;
  bool remove_heartbeat_dir = false;
  if (options.stall_seconds > 0) {
    if (!options.log_dir.empty()) {
      heartbeat_dir = options.log_dir + "/heartbeat";
      std::filesystem::remove_all(heartbeat_dir);
      std::filesystem::create_directories(heartbeat_dir);
    } else {
      std::string pattern =
          (std::filesystem::temp_directory_path() / "stratos_heartbeat_XXXXXX").string();
      if (mkdtemp(pattern.data()) == nullptr)
        throw std::runtime_error("cannot create a heartbeat directory");
      heartbeat_dir = pattern;
      remove_heartbeat_dir = true;
    }
    base_env.push_back(fmt::format("{}={}", kHeartbeatDirVariable, heartbeat_dir));
  }

  const int n = options.nproc;
  std::vector<pid_t> pids(n, -1);
  LaunchResult result;
  result.exit_codes.assign(n, 0);
  result.exit_seconds.assign(n, 0);
  result.killed.assign(n, false);
  result.hung.assign(n, false);
  result.activity.assign(n, "");
  const auto start = Clock::now();
  auto kill_all = [&] {
    for (pid_t pid : pids)
      if (pid > 0) kill(pid, SIGKILL);
  };
  for (int r = 0; r < n; ++r) {
    std::vector<std::string> env = base_env;
    env.push_back(fmt::format("RANK={}", r));
    env.push_back(fmt::format("LOCAL_RANK={}", r));
    env.push_back(fmt::format("WORLD_SIZE={}", n));
    env.push_back(fmt::format("LOCAL_WORLD_SIZE={}", n));
    env.push_back("MASTER_ADDR=" + options.master_addr);
    env.push_back(fmt::format("MASTER_PORT={}", port));
    env.push_back(fmt::format("{}={}", kLauncherPidVariable, getpid()));
    std::vector<char*> envp;
    for (std::string& e : env) envp.push_back(e.data());
    envp.push_back(nullptr);
    std::vector<std::string> argv_strings{options.executable};
    argv_strings.insert(argv_strings.end(), options.args.begin(), options.args.end());
    std::vector<char*> argv;
    for (std::string& a : argv_strings) argv.push_back(a.data());
    argv.push_back(nullptr);
    posix_spawn_file_actions_t actions;
    posix_spawn_file_actions_init(&actions);
    std::string log;
    if (!options.log_dir.empty()) {
      log = fmt::format("{}/rank_{}.log", options.log_dir, r);
      posix_spawn_file_actions_addopen(&actions, 1, log.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
      posix_spawn_file_actions_adddup2(&actions, 1, 2);
    }
    pid_t pid = -1;
    const int rc = posix_spawn(&pid, options.executable.c_str(), &actions, nullptr, argv.data(),
                               envp.data());
    posix_spawn_file_actions_destroy(&actions);
    if (rc != 0) {
      kill_all();
      for (pid_t p : pids)
        if (p > 0) waitpid(p, nullptr, 0);
      throw std::runtime_error(fmt::format("cannot start worker {} ({}): {}", r,
                                           options.executable, std::strerror(rc)));
    }
    pids[r] = pid;
  }

  int running = n;
  double first_failure = -1;
  double alone_since = -1;  // since when one rank runs alone after a failure
  std::vector<BeatRecord> beats(n);
  std::vector<double> beat_seconds(n, 0);  // when rank r's beat last changed
  std::vector<bool> in_training(n, false);  // rank r has beaten in a step
  while (running > 0) {
    for (int r = 0; r < n; ++r) {
      if (pids[r] <= 0) continue;
      int status = 0;
      if (waitpid(pids[r], &status, WNOHANG) == pids[r]) {
        result.exit_seconds[r] =
            std::chrono::duration<double>(Clock::now() - start).count();
        result.exit_codes[r] = WIFEXITED(status) ? WEXITSTATUS(status)
                                                 : (WIFSIGNALED(status) ? -WTERMSIG(status) : -1);
        if (result.exit_codes[r] != 0 && first_failure < 0) first_failure = result.exit_seconds[r];
        pids[r] = -1;
        --running;
      }
    }
    if (running == 0) break;
    const double now = std::chrono::duration<double>(Clock::now() - start).count();
    const bool deadline = now > options.deadline_seconds;
    const bool grace = first_failure >= 0 && now > first_failure + options.failure_grace_seconds;
    // After a failure, the last rank running waits for nobody: a healthy one fails at its next
    // collective, so one still running after hung_grace_seconds is hung.
    if (first_failure >= 0 && running == 1 && alone_since < 0) alone_since = now;
    const bool hung = alone_since >= 0 && now > alone_since + options.hung_grace_seconds;
    // Heartbeats: a stall is every running rank inside training and silent for stall_seconds
    // while none has failed.
    std::vector<bool> stalled_hung;
    if (!heartbeat_dir.empty() && first_failure < 0) {
      bool all_silent = true;
      double newest = 0;
      for (int r = 0; r < n; ++r) {
        if (pids[r] <= 0) continue;
        const BeatRecord beat = ReadBeat(fmt::format("{}/rank_{}", heartbeat_dir, r));
        if (beat.counter != beats[r].counter) {
          beats[r] = beat;
          beat_seconds[r] = now;
          if (beat.step >= 0) in_training[r] = true;
        }
        newest = std::max(newest, beat_seconds[r]);
        all_silent = all_silent && in_training[r] && now > beat_seconds[r] + options.stall_seconds;
      }
      if (all_silent) {
        // Those that stopped while computing; if every one waits, those of the earliest step.
        stalled_hung.assign(n, false);
        int earliest = INT_MAX;
        bool any_computing = false;
        for (int r = 0; r < n; ++r) {
          if (pids[r] <= 0) continue;
          earliest = std::min(earliest, beats[r].step);
          any_computing = any_computing || !beats[r].waiting;
        }
        for (int r = 0; r < n; ++r)
          if (pids[r] > 0)
            stalled_hung[r] = any_computing ? !beats[r].waiting : beats[r].step == earliest;
        result.stalled_seconds = now - newest;
      }
    }
    const bool stall = !stalled_hung.empty();
    if (deadline || grace || hung || stall) {
      for (int r = 0; r < n; ++r) {
        if (pids[r] <= 0) continue;
        kill(pids[r], SIGKILL);
        int status = 0;
        waitpid(pids[r], &status, 0);
        result.killed[r] = true;
        result.hung[r] = !deadline && (hung || (stall && stalled_hung[r]));
        if (stall && !deadline) result.activity[r] = beats[r].activity;
        result.exit_codes[r] = -SIGKILL;
        result.exit_seconds[r] = now;
        pids[r] = -1;
        --running;
      }
      break;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  if (remove_heartbeat_dir) {
    std::error_code ignored;
    std::filesystem::remove_all(heartbeat_dir, ignored);
  }
  return result;
}

LaunchResult RunLocal(const TrainOptions& options, const std::string& executable,
                      const std::vector<std::string>& worker_args, double deadline_seconds) {
  options.Validate();
  if (options.output_dir.empty())
    throw InputError("run options: output_dir is required for a local launch");
  const ModelSpec model = LoadRuntimeModel(options.model, options.seq_length);
  const CharDataset data(options.data_path.empty() ? DefaultDataPath() : options.data_path,
                         model.seq_length);
  const int nproc = options.plan.NumDevices();
  CheckRuntimePlan(model, options.plan, nproc, "plan", data.VocabSize(), options.cluster);

  std::filesystem::create_directories(options.output_dir);
  std::filesystem::remove_all(options.output_dir + "/errors");
  const std::string config = options.output_dir + "/run_options.json";
  {
    std::ofstream out(config);
    if (!out) throw InputError(fmt::format("{}: cannot write", config));
    out << TrainOptionsToJson(options).dump(2) << "\n";
  }
  LaunchOptions launch;
  launch.executable = executable;
  launch.args = worker_args;
  launch.args.push_back(config);
  launch.nproc = nproc;
  launch.deadline_seconds = deadline_seconds;
  // Peers blocked on the failed worker hit their own c10d timeout within timeout_seconds.
  launch.failure_grace_seconds = options.timeout_seconds + 3;
  // A hang is named before those peers' c10d timeout: every worker silent for 0.7 of it.
  launch.stall_seconds = 0.7 * options.timeout_seconds;
  launch.log_dir = options.output_dir + "/logs";
  return LaunchLocalWorkers(launch);
}

}  // namespace stratos
