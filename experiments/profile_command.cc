// `stratos profile` (experiments/profile_command.h).
#include "experiments/profile_command.h"

#include <fmt/format.h>
#include <torch/torch.h>

#include <algorithm>
#include <filesystem>
#include <optional>
#include <thread>

#include "calibrate/profile.h"
#include "costmodel/error.h"
#include "experiments/commands.h"
#include "experiments/output.h"
#include "runtime/communicator.h"
#include "runtime/device.h"
#include "runtime/device_info.h"
#include "runtime/launcher.h"
#include "runtime/profiler.h"
#include "runtime/runtime_plan.h"

namespace stratos {

namespace {

ProfileOptions OptionsFromArgs(const ProfileArgs& args) {
  if (args.device == "cpu" && args.dtype != "f32")  // one rule over two flags
    ThrowInputError("command line", "--dtype", fmt::format("\"{}\"", args.dtype),
                    "the CPU profile is f32 only (bf16 and f16 need --device cuda)");
  ProfileOptions options;
  options.device = args.device;
  options.dtype = args.dtype;
  options.repeats = args.repeats;
  if (args.quick) {
    options.gemm_sizes = {64, 256};
    options.layer_hiddens = {64, 128};
    options.layer_seq_lens = {64};
    options.layer_micro_batches = {1, 2};
    options.collective_bytes = {1 << 10, 1 << 20, 1 << 24};  // wide: bandwidth shows above scheduling noise
  } else if (args.device == "cuda") {
    // A GPU's grid: GEMMs up to the sizes of large models' layers, blocks of 350M- to 7B-class
    // hidden sizes, messages up to 256 MiB.
    options.gemm_sizes = {256, 512, 1024, 2048, 4096, 8192};
    options.layer_hiddens = {1024, 2048, 4096};
    options.layer_head_dims = {64, 128};
    options.layer_seq_lens = {1024, 2048};
    options.layer_micro_batches = {1, 4};
    options.layer_tensor_parallel = {1, 2};
    options.layer_stack = 8;  // blocks in a row, as in a model, not one synchronized block
    options.collective_bytes = {1 << 16, 1 << 20, 1 << 24, 1 << 28};
  }
  options.Validate();
  return options;
}

// Where the collective workers leave their rows for the parent process.
std::string CollectivePartDir(const std::string& output_dir) {
  return output_dir + "/collective-workers";
}

bool HasPart(const std::vector<std::string>& parts, const std::string& part) {
  return std::find(parts.begin(), parts.end(), part) != parts.end();
}

int RunCollectiveWorker(const ProfileArgs& args) {
  SetUpWorkerProcess();
  torch::set_num_threads(args.threads);
  const ProfileOptions options = OptionsFromArgs(args);
  RendezvousOptions rendezvous = RendezvousFromEnvironment();
  rendezvous.timeout = std::chrono::milliseconds(static_cast<int64_t>(args.timeout_seconds * 1e3));
  rendezvous.device = args.device;
  std::optional<c10::DeviceGuard> device_guard;  // one GPU per rank (NCCL)
  if (args.device == "cuda") device_guard.emplace(RankDevice("cuda", rendezvous.local_rank));
  ProcessGroups groups(rendezvous);
  Profile part;
  part.info = {args.device == "cpu" ? "cpu-worker" : "cuda", groups.Backend(),
               "stratos profile (collective workers)", ""};
  part.collectives = ProfileCollectives(options, groups);
  if (groups.Rank() == 0) WriteProfileDir(part, CollectivePartDir(args.output_dir));
  groups.World().Barrier();
  return kExitSuccess;
}

}  // namespace

int RunProfile(const ProfileArgs& args) {
  if (args.collective_worker) return RunCollectiveWorker(args);
  const ProfileOptions options = OptionsFromArgs(args);
  torch::set_num_threads(args.threads);
  EnsureDirectory(args.output_dir);

  const RuntimeInfo runtime = QueryRuntimeInfo();
  Profile profile;
  profile.info.device = args.device == "cpu" ? "cpu-worker" : "cuda:0";
  profile.info.backend = args.device == "cpu" ? "gloo" : (NcclAvailable() ? "nccl" : "gloo");
  profile.info.produced_by = "stratos profile";
  profile.info.attention = RuntimeFlashAttention() ? "fused" : "materialized";
  profile.info.notes = fmt::format(
      "LibTorch {}; {} intra-op thread(s) per process; collectives over {} processes; {} "
      "hardware threads; median of {} runs; blocks timed per block of a stack of {}",
      runtime.torch_version, args.threads, args.nproc, std::thread::hardware_concurrency(),
      args.repeats, options.layer_stack);

  if (HasPart(args.parts, "collective") && args.device == "cuda" &&
      args.nproc > static_cast<int>(torch::cuda::device_count()))
    ThrowInputError("command line", "--nproc", args.nproc,
                    fmt::format("the CUDA collective sweep runs one rank per GPU, and this machine "
                                "has {} (profile --parts matmul,layer alone here)",
                                torch::cuda::device_count()));
  if (HasPart(args.parts, "matmul")) {
    fmt::print("profiling GEMMs ({} shapes) ...\n",
               options.gemm_sizes.size() * options.gemm_sizes.size() * options.gemm_sizes.size());
    std::fflush(stdout);
    profile.matmuls = ProfileMatmuls(options);
    double best = 0;
    for (const MatmulRow& r : profile.matmuls) best = std::max(best, r.flops / r.seconds);
    fmt::print("  best {:.2f} GFLOP/s\n", best / 1e9);
  }
  if (HasPart(args.parts, "layer")) {
    fmt::print("profiling transformer blocks ...\n");
    std::fflush(stdout);
    profile.layers = ProfileLayers(options);
    for (const LayerRow& r : profile.layers)
      fmt::print("  h {:4d} s {:4d} b {:2d} tp {}: forward {:8.3f} ms, backward {:8.3f} ms\n",
                 r.hidden, r.seq_len, r.micro_batch, r.tensor_parallel, r.forward_seconds * 1e3,
                 r.backward_seconds * 1e3);
  }
  if (HasPart(args.parts, "collective")) {
    fmt::print("profiling collectives over {} worker processes ...\n", args.nproc);
    std::fflush(stdout);
    LaunchOptions launch;
    launch.executable = SelfExecutable();
    launch.args = {"profile",     "--collective-worker", "--output-dir",
                   args.output_dir, "--repeats",        std::to_string(args.repeats),
                   "--threads",    std::to_string(args.threads), "--timeout",
                   fmt::format("{}", args.timeout_seconds), "--device", args.device};
    if (args.quick) launch.args.push_back("--quick");
    launch.nproc = args.nproc;
    launch.deadline_seconds = 600;
    launch.log_dir = args.output_dir + "/logs";
    const LaunchResult result = LaunchLocalWorkers(launch);
    if (!result.Succeeded()) {
      fmt::print(stderr, "stratos profile: collective workers failed: {} (logs in {}/logs)\n",
                 result.Summary(), args.output_dir);
      return kExitNoResult;
    }
    profile.collectives = ReadProfileDir(CollectivePartDir(args.output_dir)).collectives;
    std::filesystem::remove_all(CollectivePartDir(args.output_dir));
  }
  WriteProfileDir(profile, args.output_dir);
  fmt::print("wrote the profile database to {}/\n", args.output_dir);
  return kExitSuccess;
}

}  // namespace stratos
