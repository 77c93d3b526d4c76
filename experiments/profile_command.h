#pragma once
// `stratos profile` (issue 6): measures this machine's device and network through the runtime
// and writes a profile database that `stratos calibrate` fits the cost model's constants from.
#include <string>
#include <vector>

namespace stratos {

struct ProfileArgs {
  std::string output_dir = "out/profile";
  std::string device = "cpu";     // cpu | cuda
  std::string dtype = "f32";      // f32 | bf16 | f16 (bf16, f16: cuda)
  std::vector<std::string> parts = {"matmul", "layer", "collective"};  // what to profile
  int nproc = 4;                  // worker processes for the collective sweep (>= 2)
  int repeats = 5;
  int threads = 1;                // intra-op threads (per worker in the collective sweep)
  bool quick = false;             // a smaller grid (for tests)
  double timeout_seconds = 60;    // c10d timeout of the collective workers
  bool collective_worker = false; // internal: one rank of the collective sweep
};

// Writes the profile database (calibrate/profile.h: DIR/matmul.csv, DIR/layer.csv,
// DIR/collective.csv, DIR/profile.json), each atomically; prints progress and a summary.
// The collective sweep runs in `nproc` spawned worker processes (Gloo on CPU). Returns 0 on
// success, 1 if the workers failed. Throws InputError for bad options.
int RunProfile(const ProfileArgs& args);

}  // namespace stratos
