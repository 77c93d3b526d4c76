// `stratos profile` (experiments/profile_command.h).
#include "experiments/profile_command.h"

#include <fmt/format.h>
#include <nlohmann/json.hpp>
#include <torch/torch.h>

#include <sstream>
#include <thread>

#include "costmodel/error.h"
#include "experiments/output.h"
#include "runtime/communicator.h"
#include "runtime/device_info.h"
#include "runtime/launcher.h"
#include "runtime/profiler.h"

namespace stratos {

namespace {

ProfileOptions OptionsFromArgs(const ProfileArgs& args) {
  ProfileOptions options;
  options.device = args.device;
  options.dtype = args.dtype;
  options.repeats = args.repeats;
  if (args.quick) {
    options.gemm_sizes = {64, 256};
    options.layer_hiddens = {64, 128};
    options.layer_seq_lens = {64};
    options.layer_micro_batches = {1, 2};
    options.collective_bytes = {1 << 12, 1 << 18};
  }
  options.Validate();
  return options;
}

std::string MatmulCsv(const std::vector<MatmulSample>& rows) {
  std::ostringstream out;
  out << "m,n,k,dtype,flops,seconds\n";
  for (const MatmulSample& r : rows)
    out << fmt::format("{},{},{},{},{:.17g},{:.17g}\n", r.m, r.n, r.k, r.dtype, r.flops,
                       r.seconds);
  return out.str();
}

std::string LayerCsv(const std::vector<LayerSample>& rows) {
  std::ostringstream out;
  out << "hidden,heads,seq_len,micro_batch,tensor_parallel,dtype,forward_flops,forward_seconds,"
         "backward_seconds\n";
  for (const LayerSample& r : rows)
    out << fmt::format("{},{},{},{},{},{},{:.17g},{:.17g},{:.17g}\n", r.hidden, r.heads,
                       r.seq_len, r.micro_batch, r.tensor_parallel, r.dtype, r.forward_flops,
                       r.forward_seconds, r.backward_seconds);
  return out.str();
}

std::string CollectiveCsv(const std::vector<CollectiveSample>& rows) {
  std::ostringstream out;
  out << "op,dtype,nodes,gpus_per_node,group_size,num_groups,crosses_nodes,bytes,seconds\n";
  for (const CollectiveSample& r : rows)
    out << fmt::format("{},{},{},{},{},{},{},{:.17g},{:.17g}\n", r.op, r.dtype, r.nodes,
                       r.gpus_per_node, r.group_size, r.num_groups, r.crosses_nodes ? 1 : 0,
                       r.bytes, r.seconds);
  return out.str();
}

bool HasPart(const std::string& parts, const std::string& part) {
  std::stringstream stream(parts);
  std::string item;
  while (std::getline(stream, item, ','))
    if (item == part) return true;
  return false;
}

int RunCollectiveWorker(const ProfileArgs& args) {
  torch::set_num_threads(args.threads);
  const ProfileOptions options = OptionsFromArgs(args);
  RendezvousOptions rendezvous = RendezvousFromEnvironment();
  rendezvous.timeout = std::chrono::milliseconds(static_cast<int64_t>(args.timeout_seconds * 1e3));
  ProcessGroups groups(rendezvous);
  const std::vector<CollectiveSample> rows = ProfileCollectives(options, groups);
  if (groups.Rank() == 0) WriteFileAtomically(args.output_dir + "/collective.csv", CollectiveCsv(rows));
  groups.World().Barrier();
  return 0;
}

}  // namespace

int RunProfile(const ProfileArgs& args) {
  if (args.collective_worker) return RunCollectiveWorker(args);
  {
    std::stringstream stream(args.parts);
    std::string item;
    while (std::getline(stream, item, ','))
      if (item != "matmul" && item != "layer" && item != "collective")
        ThrowInputError("command line", "--parts", item, "must list matmul, layer, collective");
  }
  if (args.nproc < 2) ThrowInputError("command line", "--nproc", args.nproc, "must be >= 2");
  if (args.threads < 1) ThrowInputError("command line", "--threads", args.threads, "must be >= 1");
  const ProfileOptions options = OptionsFromArgs(args);
  torch::set_num_threads(args.threads);
  EnsureDirectory(args.output_dir);

  const RuntimeInfo info = QueryRuntimeInfo();
  nlohmann::json meta = {
      {"schema", "stratos.profile/1"},
      {"device", args.device},
      {"device_name", args.device == "cpu" ? "cpu-worker" : "cuda:0"},
      {"dtype", args.dtype},
      {"backend", args.device == "cpu" ? "gloo" : (NcclAvailable() ? "nccl" : "gloo")},
      {"torch_version", info.torch_version},
      {"threads_per_process", args.threads},
      {"collective_processes", args.nproc},
      {"hardware_threads", std::thread::hardware_concurrency()},
      {"repeats", args.repeats},
      {"produced_by", "stratos profile"},
  };

  if (HasPart(args.parts, "matmul")) {
    fmt::print("profiling GEMMs ({} shapes) ...\n",
               options.gemm_sizes.size() * options.gemm_sizes.size() * options.gemm_sizes.size());
    std::fflush(stdout);
    const std::vector<MatmulSample> rows = ProfileMatmuls(options);
    double best = 0;
    for (const MatmulSample& r : rows) best = std::max(best, r.flops / r.seconds);
    fmt::print("  best {:.2f} GFLOP/s\n", best / 1e9);
    WriteFileAtomically(args.output_dir + "/matmul.csv", MatmulCsv(rows));
  }
  if (HasPart(args.parts, "layer")) {
    fmt::print("profiling transformer blocks ...\n");
    std::fflush(stdout);
    const std::vector<LayerSample> rows = ProfileLayers(options);
    for (const LayerSample& r : rows)
      fmt::print("  h {:4d} s {:4d} b {:2d} tp {}: forward {:8.3f} ms, backward {:8.3f} ms\n",
                 r.hidden, r.seq_len, r.micro_batch, r.tensor_parallel, r.forward_seconds * 1e3,
                 r.backward_seconds * 1e3);
    WriteFileAtomically(args.output_dir + "/layer.csv", LayerCsv(rows));
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
      return 1;
    }
  }
  WriteJsonAtomically(args.output_dir + "/profile.json", meta);
  fmt::print("wrote the profile database to {}/\n", args.output_dir);
  return 0;
}

}  // namespace stratos
