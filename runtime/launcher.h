#pragma once
// Local launch of worker processes on one machine (what `stratos run` does; torchrun or Slurm do
// it across machines). Workers are started with posix_spawn (no fork of a process that may have
// LibTorch threads) and the torchrun environment: RANK, LOCAL_RANK, WORLD_SIZE,
// LOCAL_WORLD_SIZE, MASTER_ADDR, MASTER_PORT.
#include <string>
#include <vector>

#include "runtime/trainer.h"

namespace stratos {

struct LaunchOptions {
  std::string executable;          // absolute path of the worker program
  std::vector<std::string> args;   // its arguments (without argv[0])
  int nproc = 1;
  std::string master_addr = "127.0.0.1";
  int master_port = 0;             // 0: a free port of this machine
  // Every worker is killed (SIGKILL) once this many seconds have passed since the launch.
  double deadline_seconds = 600;
  // After the first worker fails, the others get this long to exit on their own (their c10d
  // timeout should make them) before they are killed.
  double failure_grace_seconds = 30;
  // Once a worker has failed and every other worker but one has exited, that one has no peer
  // left to wait for: it gets this long to exit, then is killed and reported as hung.
  double hung_grace_seconds = 3;
  // > 0: hang detection through heartbeats (Heartbeat below). When no worker has failed, every
  // running worker is inside training (has beaten in a step) and none has beaten for this long,
  // the workers whose last activity is not a wait (they stopped while computing) are reported
  // hung -- or, if every one waits, those of the earliest step -- and all are killed. Set it
  // below the workers' c10d timeout, so that the hang is named before the waiting peers fail.
  double stall_seconds = 0;
  // If not empty, worker r's stdout and stderr go to log_dir/rank_r.log.
  std::string log_dir;
};

struct LaunchResult {
  std::vector<int> exit_codes;       // per rank: exit status, or -signal if killed by a signal
  std::vector<double> exit_seconds;  // per rank: seconds from launch to exit
  std::vector<bool> killed;          // per rank: killed by the launcher (deadline or grace)
  std::vector<bool> hung;            // per rank: killed as hung (hung_grace_seconds, stall_seconds)
  std::vector<std::string> activity; // per rank killed on a stall: its last heartbeat's activity
  double stalled_seconds = 0;        // how long no worker had beaten when the stall was called
  bool Succeeded() const;
  // "rank 0: exit 1 after 5.1 s; rank 1: hung (still running 3.0 s after every other rank
  // exited), killed after 8.1 s"
  std::string Summary() const;
};

// The errors the workers of a failed run wrote (output_dir/errors/rank_R.txt), each indented
// by two spaces and ending in a newline, in rank order; "" if there are none.
std::string WorkerErrors(const std::string& output_dir);

// The absolute path of this process's executable (/proc/self/exe), to launch copies of it as
// workers. Throws std::runtime_error if it cannot be read.
std::string SelfExecutable();

// A TCP port on 127.0.0.1 that was free a moment ago (bind to port 0).
int FreeTcpPort();

// A worker's progress for its launcher's hang detection (LaunchOptions::stall_seconds): each
// Beat overwrites one small file, $STRATOS_HEARTBEAT_DIR/rank_<rank>, with a counter, the step,
// whether the worker now waits for peers, and what it does. A no-op where the variable is unset
// (torchrun, Slurm, in-process runs). Throws nothing.
class Heartbeat {
 public:
  explicit Heartbeat(int rank);
  ~Heartbeat();
  Heartbeat(const Heartbeat&) = delete;
  Heartbeat& operator=(const Heartbeat&) = delete;
  // step: -1 outside the training loop; waiting: blocked on peers (receive, collective, barrier).
  void Beat(int step, bool waiting, const std::string& activity);

 private:
  int fd_ = -1;
  long long counter_ = 0;
};

// First thing in a worker process:
// - SIGPIPE is ignored, so that a write to the socket of a peer that died fails with EPIPE (an
//   error that names the peer) instead of killing this worker silently;
// - it dies with the launcher: under LaunchLocalWorkers (which sets STRATOS_LAUNCHER_PID), asks
//   the kernel for SIGKILL when the launcher exits (prctl PR_SET_PDEATHSIG), and exits at once
//   (status 1) if the launcher is already gone; elsewhere (torchrun, Slurm, tests) not.
// Throws nothing.
void SetUpWorkerProcess();

// Starts options.nproc workers and waits for all of them (or kills them, see LaunchOptions).
// Workers that call SetUpWorkerProcess() are killed when the launching process dies.
// Throws std::runtime_error if a worker cannot be started (the others are killed).
LaunchResult LaunchLocalWorkers(const LaunchOptions& options);

// `stratos run` without the CLI: checks the plan (CheckRuntimePlan, refused before launch),
// writes output_dir/run_options.json, launches nproc = plan devices workers running
// `executable worker_args... <output_dir>/run_options.json` (the path is appended) and waits.
// Returns the launch result; the worker errors are in output_dir/errors/rank_R.txt.
// Throws InputError for an invalid plan or options (nothing is launched then).
LaunchResult RunLocal(const TrainOptions& options, const std::string& executable,
                      const std::vector<std::string>& worker_args, double deadline_seconds);

}  // namespace stratos
