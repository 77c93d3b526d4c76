#include "runtime/communicator.h"

#include <fmt/format.h>
#include <torch/csrc/distributed/c10d/FileStore.hpp>
#include <torch/csrc/distributed/c10d/PrefixStore.hpp>
#include <torch/csrc/distributed/c10d/ProcessGroup.hpp>
#include <torch/csrc/distributed/c10d/TCPStore.hpp>
#include <torch/version.h>
// The backends this build has (cmake/torch_gpu.cmake): STRATOS_NO_GLOO when LibTorch ships no
// gloo headers, STRATOS_WITH_NCCL when it has CUDA and nccl.h was found.
#ifndef STRATOS_NO_GLOO
#include <torch/csrc/distributed/c10d/ProcessGroupGloo.hpp>
#endif
#ifdef STRATOS_WITH_NCCL
#ifndef USE_C10D_NCCL
#define USE_C10D_NCCL
#endif
#include <torch/csrc/distributed/c10d/ProcessGroupNCCL.hpp>
#endif

#include <cstdlib>

#include "costmodel/error.h"

namespace stratos {

class RendezvousStore {
 public:
  c10::intrusive_ptr<c10d::Store> store;
};

namespace {

using Clock = std::chrono::steady_clock;

// What a c10d process group is in this LibTorch: from 2.0 the per-device Backend (Gloo, NCCL)
// that a ProcessGroup dispatches to; before, the ProcessGroup itself. Both have the collectives
// this file calls with the same signatures.
#if TORCH_VERSION_MAJOR >= 2
using C10dGroup = c10d::Backend;
#else
using C10dGroup = c10d::ProcessGroup;
#endif

double SecondsSince(Clock::time_point start) {
  return std::chrono::duration<double>(Clock::now() - start).count();
}

class SelfWork : public CommWork {
 public:
  void Wait() override {}
};

class SelfCommunicator : public Communicator {
 public:
  explicit SelfCommunicator(std::string name) : name_(std::move(name)) {}
  int Rank() const override { return 0; }
  int Size() const override { return 1; }
  const std::string& Name() const override { return name_; }
  std::shared_ptr<CommWork> AllReduceSumAsync(torch::Tensor) override {
    return std::make_shared<SelfWork>();
  }
  std::shared_ptr<CommWork> AllGatherAsync(std::vector<torch::Tensor> outputs,
                                           torch::Tensor input) override {
    STRATOS_CHECK(outputs.size() == 1, "group {} of one: {} outputs", name_, outputs.size());
    outputs[0].copy_(input);
    return std::make_shared<SelfWork>();
  }
  std::shared_ptr<CommWork> ReduceScatterAsync(torch::Tensor output, torch::Tensor input,
                                               std::vector<int64_t> counts) override {
    return CopyWhole(output, input, counts, "reduce-scatter");
  }
  std::shared_ptr<CommWork> AllGatherUnevenAsync(torch::Tensor output, torch::Tensor input,
                                                 std::vector<int64_t> counts) override {
    return CopyWhole(output, input, counts, "all-gather");
  }
  std::shared_ptr<CommWork> SendAsync(torch::Tensor, int dst, int) override {
    throw CommError(fmt::format("group {} has one rank: cannot send to rank {}", name_, dst));
  }
  std::shared_ptr<CommWork> RecvAsync(torch::Tensor, int src, int) override {
    throw CommError(fmt::format("group {} has one rank: cannot receive from rank {}", name_, src));
  }
  void Barrier() override {}

 private:
  // A reduce-scatter or all-gather in one piece over one rank: output = input.
  std::shared_ptr<CommWork> CopyWhole(torch::Tensor& output, const torch::Tensor& input,
                                      const std::vector<int64_t>& counts, const char* what) {
    STRATOS_CHECK(counts.size() == 1 && counts[0] == input.numel() &&
                      output.numel() == input.numel(),
                  "group {} of one: {} of {} elements in {} pieces", name_, what, input.numel(),
                  counts.size());
    output.copy_(input);
    return std::make_shared<SelfWork>();
  }

  std::string name_;
};

// Waits for a c10d Work, turning c10d's exceptions into CommError with context.
class C10dWork : public CommWork {
 public:
  C10dWork(c10::intrusive_ptr<c10d::Work> work, Communicator* owner, std::string what)
      : work_(std::move(work)), owner_(owner), what_(std::move(what)) {}
  void Wait() override {
    if (done_) return;
    const auto start = Clock::now();
    try {
      work_->wait();
    } catch (const std::exception& e) {
      owner_->AddBlockedSeconds(SecondsSince(start));
      throw CommError(fmt::format("{} in group {} (rank {} of {}) failed: {}", what_,
                                  owner_->Name(), owner_->Rank(), owner_->Size(),
                                  FirstLine(e.what())));
    }
    owner_->AddBlockedSeconds(SecondsSince(start));
    done_ = true;
  }
  // c10::Error messages carry a long C++ backtrace after the first line.
  static std::string FirstLine(const std::string& text) {
    const auto end = text.find('\n');
    return end == std::string::npos ? text : text.substr(0, end);
  }

 private:
  c10::intrusive_ptr<c10d::Work> work_;
  Communicator* owner_;
  std::string what_;
  bool done_ = false;
};

// Waits for an inner work, then copies `from` into `to` (the bf16-as-fp32 all-reduce of Gloo).
class CopyBackWork : public CommWork {
 public:
  CopyBackWork(std::shared_ptr<CommWork> inner, torch::Tensor from, torch::Tensor to)
      : inner_(std::move(inner)), from_(std::move(from)), to_(std::move(to)) {}
  void Wait() override {
    inner_->Wait();
    if (from_.defined()) to_.copy_(from_);
    from_ = torch::Tensor();
  }

 private:
  std::shared_ptr<CommWork> inner_;
  torch::Tensor from_, to_;
};

// Waits for the all-to-all of a reduce-scatter, then sums the received pieces (Size() x n, in
// rank order) into `output` (n).
class SumPiecesWork : public CommWork {
 public:
  SumPiecesWork(std::shared_ptr<CommWork> inner, torch::Tensor received, torch::Tensor output)
      : inner_(std::move(inner)), received_(std::move(received)), output_(std::move(output)) {}
  void Wait() override {
    inner_->Wait();
    if (!received_.defined()) return;
    const int64_t n = output_.numel();
    if (n > 0) {
      torch::NoGradGuard no_grad;
      torch::Tensor sum = received_.narrow(0, 0, n).clone();
      for (int64_t r = 1; r * n < received_.numel(); ++r) sum.add_(received_.narrow(0, r * n, n));
      output_.copy_(sum);
    }
    received_ = torch::Tensor();
  }

 private:
  std::shared_ptr<CommWork> inner_;
  torch::Tensor received_, output_;
};

// Keeps a buffer alive until the operation that reads it completes.
class HoldWork : public CommWork {
 public:
  HoldWork(std::shared_ptr<CommWork> inner, torch::Tensor held)
      : inner_(std::move(inner)), held_(std::move(held)) {}
  void Wait() override {
    inner_->Wait();
    held_ = torch::Tensor();
  }

 private:
  std::shared_ptr<CommWork> inner_;
  torch::Tensor held_;
};

class C10dCommunicator : public Communicator {
 public:
  C10dCommunicator(c10::intrusive_ptr<C10dGroup> group, std::string name, bool gloo)
      : group_(std::move(group)), name_(std::move(name)), gloo_(gloo) {}
  int Rank() const override { return group_->getRank(); }
  int Size() const override { return group_->getSize(); }
  const std::string& Name() const override { return name_; }

  std::shared_ptr<CommWork> AllReduceSumAsync(torch::Tensor tensor) override {
    if (gloo_ && tensor.scalar_type() == torch::kBFloat16) {
      torch::Tensor wide = tensor.to(torch::kFloat);
      return std::make_shared<CopyBackWork>(AllReduceSumAsync(wide), wide, tensor);
    }
    std::vector<at::Tensor> tensors{tensor};
    return Issue([&] { return group_->allreduce(tensors); },
                 fmt::format("all-reduce of {} bytes", tensor.nbytes()));
  }
  std::shared_ptr<CommWork> AllGatherAsync(std::vector<torch::Tensor> outputs,
                                           torch::Tensor input) override {
    std::vector<std::vector<at::Tensor>> out{outputs};
    std::vector<at::Tensor> in{input};
    return Issue([&] { return group_->allgather(out, in); },
                 fmt::format("all-gather of {} bytes", input.nbytes()));
  }
  std::shared_ptr<CommWork> ReduceScatterAsync(torch::Tensor output, torch::Tensor input,
                                               std::vector<int64_t> counts) override {
    const int size = Size(), rank = Rank();
    int64_t total = 0;
    for (int64_t c : counts) total += c;
    STRATOS_CHECK(static_cast<int>(counts.size()) == size && total == input.numel() &&
                      output.numel() == counts[rank] && input.dim() == 1 && input.is_contiguous(),
                  "reduce-scatter in group {}: {} pieces of {} elements for {} ranks, output {}",
                  name_, counts.size(), input.numel(), size, output.numel());
    at::Tensor received = torch::empty({size * counts[rank]}, input.options());
    std::vector<int64_t> output_counts(size, counts[rank]);
    at::Tensor in = input;
    return std::make_shared<SumPiecesWork>(
        Issue([&] { return group_->alltoall_base(received, in, output_counts, counts); },
              fmt::format("reduce-scatter (all-to-all) of {} bytes", input.nbytes())),
        received, output);
  }
  std::shared_ptr<CommWork> AllGatherUnevenAsync(torch::Tensor output, torch::Tensor input,
                                                 std::vector<int64_t> counts) override {
    const int size = Size(), rank = Rank();
    int64_t total = 0;
    for (int64_t c : counts) total += c;
    STRATOS_CHECK(static_cast<int>(counts.size()) == size && counts[rank] == input.numel() &&
                      output.numel() == total && output.dim() == 1 && output.is_contiguous(),
                  "uneven all-gather in group {}: {} pieces for {} ranks, input {}, output {} "
                  "of {}",
                  name_, counts.size(), size, input.numel(), output.numel(), total);
    // This rank's piece once per destination.
    at::Tensor sent =
        input.reshape({1, -1}).expand({size, input.numel()}).reshape({-1}).contiguous();
    std::vector<int64_t> sent_counts(size, counts[rank]);
    at::Tensor out = output;
    return std::make_shared<HoldWork>(
        Issue([&] { return group_->alltoall_base(out, sent, counts, sent_counts); },
              fmt::format("uneven all-gather (all-to-all) of {} bytes", output.nbytes())),
        sent);
  }
  std::shared_ptr<CommWork> SendAsync(torch::Tensor tensor, int dst, int tag) override {
    std::vector<at::Tensor> tensors{tensor};
    return Issue([&] { return group_->send(tensors, dst, tag); },
                 fmt::format("send of {} bytes to rank {} (tag {})", tensor.nbytes(), dst, tag));
  }
  std::shared_ptr<CommWork> RecvAsync(torch::Tensor tensor, int src, int tag) override {
    std::vector<at::Tensor> tensors{tensor};
    return Issue([&] { return group_->recv(tensors, src, tag); },
                 fmt::format("receive of {} bytes from rank {} (tag {})", tensor.nbytes(), src,
                             tag));
  }
  void Barrier() override {
    Issue([&] { return group_->barrier(); }, "barrier")->Wait();
  }

 private:
  template <typename F>
  std::shared_ptr<CommWork> Issue(F&& issue, std::string what) {
    c10::intrusive_ptr<c10d::Work> work;
    try {
      work = issue();
    } catch (const std::exception& e) {
      throw CommError(fmt::format("{} in group {} (rank {} of {}) failed: {}", what, name_,
                                  Rank(), Size(), C10dWork::FirstLine(e.what())));
    }
    return std::make_shared<C10dWork>(std::move(work), this, std::move(what));
  }

  c10::intrusive_ptr<C10dGroup> group_;
  std::string name_;
  bool gloo_;
};

int EnvInt(const char* name, const char* fallback_name, int fallback_value, bool required) {
  const char* text = std::getenv(name);
  std::string used = name;
  if (text == nullptr && fallback_name != nullptr) {
    text = std::getenv(fallback_name);
    used = fallback_name;
  }
  if (text == nullptr) {
    if (required)
      throw InputError(fmt::format(
          "environment: {} is not set (launch with torchrun, srun, or `stratos run`)", name));
    return fallback_value;
  }
  char* end = nullptr;
  const long value = std::strtol(text, &end, 10);
  if (end == text || *end != '\0' || value < 0)
    ThrowInputError("environment", used, fmt::format("\"{}\"", text),
                    "must be a non-negative integer");
  return static_cast<int>(value);
}

#ifndef STRATOS_NO_GLOO
// GLOO_SOCKET_IFNAME wins (as in PyTorch); a loopback master means a one-machine run, where the
// host name may not resolve to a reachable address; otherwise the address of this host name.
std::shared_ptr<::gloo::transport::Device> GlooDevice(const RendezvousOptions& options) {
  if (const char* ifname = std::getenv("GLOO_SOCKET_IFNAME"))
    return c10d::ProcessGroupGloo::createDeviceForInterface(ifname);
  const std::string& addr = options.master_addr;
  if (addr == "127.0.0.1" || addr == "localhost" || addr == "::1")
    return c10d::ProcessGroupGloo::createDeviceForHostname("127.0.0.1");
  return c10d::ProcessGroupGloo::createDefaultDevice();
}
#endif

}  // namespace

std::unique_ptr<Communicator> MakeSelfCommunicator(const std::string& name) {
  return std::make_unique<SelfCommunicator>(name);
}

bool NcclAvailable() {
#ifdef STRATOS_WITH_NCCL
  return torch::cuda::is_available();
#else
  return false;
#endif
}

bool GlooAvailable() {
#ifdef STRATOS_NO_GLOO
  return false;
#else
  return true;
#endif
}

std::string ResolveBackend(const std::string& backend, const std::string& device) {
  if (backend == "auto") return device == "cuda" && NcclAvailable() ? "nccl" : "gloo";
  if (backend == "gloo" || backend == "nccl") return backend;
  ThrowInputError("runtime options", "backend", backend, "must be gloo, nccl or auto");
}

RendezvousOptions RendezvousFromEnvironment() {
  RendezvousOptions options;
  options.rank = EnvInt("RANK", "SLURM_PROCID", 0, true);
  options.world_size = EnvInt("WORLD_SIZE", "SLURM_NTASKS", 1, true);
  options.local_rank = EnvInt("LOCAL_RANK", "SLURM_LOCALID", 0, false);
  if (options.world_size < 1) ThrowInputError("environment", "WORLD_SIZE", 0, "must be >= 1");
  if (options.rank >= options.world_size)
    ThrowInputError("environment", "RANK", options.rank,
                    fmt::format("must be < WORLD_SIZE = {}", options.world_size));
  if (const char* addr = std::getenv("MASTER_ADDR")) options.master_addr = addr;
  options.master_port = EnvInt("MASTER_PORT", nullptr, 29500, false);
  if (options.master_port < 1 || options.master_port > 65535)
    ThrowInputError("environment", "MASTER_PORT", options.master_port, "must be in [1, 65535]");
  return options;
}

ProcessGroups::ProcessGroups(const RendezvousOptions& options)
    : options_(options), store_(std::make_unique<RendezvousStore>()) {
  backend_ = ResolveBackend(options.backend, options.device);
  if (backend_ == "nccl" && !NcclAvailable())
    throw InputError("runtime options: backend = nccl: this LibTorch has no CUDA/NCCL");
  try {
    if (!options.file_store_path.empty()) {
      store_->store =
          c10::make_intrusive<c10d::FileStore>(options.file_store_path, options.world_size);
    } else {
      c10d::TCPStoreOptions tcp;
      tcp.port = static_cast<std::uint16_t>(options.master_port);
      tcp.isServer = options.rank == 0;
      tcp.numWorkers = options.world_size;
      tcp.waitWorkers = true;
      tcp.timeout = options.timeout;
      store_->store = c10::make_intrusive<c10d::TCPStore>(options.master_addr, tcp);
    }
    store_->store->setTimeout(options.timeout);
  } catch (const std::exception& e) {
    throw CommError(fmt::format("rank {}: rendezvous at {} failed: {}", options.rank,
                                options.file_store_path.empty()
                                    ? fmt::format("{}:{}", options.master_addr, options.master_port)
                                    : options.file_store_path,
                                C10dWork::FirstLine(e.what())));
  }
  std::vector<int> all(options.world_size);
  for (int r = 0; r < options.world_size; ++r) all[r] = r;
  world_ = NewGroup("world", all);
}

ProcessGroups::~ProcessGroups() = default;

std::unique_ptr<Communicator> ProcessGroups::NewGroup(const std::string& name,
                                                      const std::vector<int>& global_ranks) {
  const auto it = std::find(global_ranks.begin(), global_ranks.end(), options_.rank);
  STRATOS_CHECK(it != global_ranks.end(), "rank {} is not a member of group {}", options_.rank,
                name);
  const int group_rank = static_cast<int>(it - global_ranks.begin());
  const int group_size = static_cast<int>(global_ranks.size());
  if (group_size == 1) return MakeSelfCommunicator(name);
  if (backend_ == "gloo" && !GlooAvailable())
    throw InputError(fmt::format(
        "runtime options: backend = gloo: this LibTorch ships no Gloo headers (built with "
        "STRATOS_NO_GLOO), so group {} of {} ranks cannot be created; run on CUDA (NCCL)",
        name, group_size));
  auto prefixed = c10::make_intrusive<c10d::PrefixStore>("group/" + name, store_->store);
  c10::intrusive_ptr<C10dGroup> group;
  try {
#ifdef STRATOS_WITH_NCCL
    if (backend_ == "nccl") {
      auto nccl_options = c10d::ProcessGroupNCCL::Options::create();
      nccl_options->timeout = options_.timeout;
      group = c10::make_intrusive<c10d::ProcessGroupNCCL>(prefixed, group_rank, group_size,
                                                          nccl_options);
    }
#endif
#ifndef STRATOS_NO_GLOO
    if (!group) {
      auto gloo_options = c10d::ProcessGroupGloo::Options::create(options_.timeout);
      gloo_options->devices.push_back(GlooDevice(options_));
      gloo_options->threads = 2;
      group = c10::make_intrusive<c10d::ProcessGroupGloo>(prefixed, group_rank, group_size,
                                                          gloo_options);
    }
#endif
    STRATOS_CHECK(group, "no {} backend in this build", backend_);
  } catch (const std::exception& e) {
    throw CommError(fmt::format("rank {}: creating process group {} of {} ranks failed: {}",
                                options_.rank, name, group_size, C10dWork::FirstLine(e.what())));
  }
  return std::make_unique<C10dCommunicator>(std::move(group), name, backend_ == "gloo");
}

void ProcessGroups::StoreSet(const std::string& key, const std::string& value) {
  try {
    store_->store->set("data/" + key, std::vector<uint8_t>(value.begin(), value.end()));
  } catch (const std::exception& e) {
    throw CommError(fmt::format("rank {}: store set of {} failed: {}", options_.rank, key,
                                C10dWork::FirstLine(e.what())));
  }
}

std::string ProcessGroups::StoreGet(const std::string& key) {
  try {
    const std::vector<uint8_t> bytes = store_->store->get("data/" + key);
    return std::string(bytes.begin(), bytes.end());
  } catch (const std::exception& e) {
    throw CommError(fmt::format("rank {}: store get of {} failed: {}", options_.rank, key,
                                C10dWork::FirstLine(e.what())));
  }
}

}  // namespace stratos
