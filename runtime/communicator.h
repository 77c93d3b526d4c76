#pragma once
// The runtime's one thin communicator interface over c10d process groups (DESIGN.md §9): Gloo on
// CPU, NCCL on GPUs when this LibTorch has it. c10d's C++ API moves between LibTorch versions, so
// nothing outside communicator.cc includes c10d headers.
//
// Ranks passed to and returned by a Communicator are group-local (0 .. Size() - 1). Every
// blocking call and every CommWork::Wait() throws CommError when c10d reports a failure: a peer
// that died (connection closed) or a peer that did not answer within the group's timeout. The
// message names the group, this rank, the operation and c10d's own message.
#include <torch/torch.h>

#include <chrono>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

namespace stratos {

class CommError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// A pending asynchronous operation. Wait() blocks until it completes; throws CommError.
class CommWork {
 public:
  virtual ~CommWork() = default;
  virtual void Wait() = 0;
};

class Communicator {
 public:
  virtual ~Communicator() = default;
  virtual int Rank() const = 0;
  virtual int Size() const = 0;
  // e.g. "world", "tp[stage 1, dp 0]"; used in error messages.
  virtual const std::string& Name() const = 0;

  // Sums `tensor` (any shape, contiguous) over the group, in place, asynchronously. fp32, fp64,
  // fp16, bf16 and integer tensors. Gloo in LibTorch 1.13 has no bf16 reduction: there a bf16
  // tensor is summed as fp32 (the same sum up to rounding, twice the bytes on the wire) and
  // rounded back to bf16 by Wait(); NCCL reduces bf16 natively.
  virtual std::shared_ptr<CommWork> AllReduceSumAsync(torch::Tensor tensor) = 0;
  // outputs[r] receives rank r's `input`; all shapes equal, outputs.size() == Size(). The
  // tensors must stay alive and untouched until Wait() returns.
  virtual std::shared_ptr<CommWork> AllGatherAsync(std::vector<torch::Tensor> outputs,
                                                   torch::Tensor input) = 0;
  void AllGather(std::vector<torch::Tensor> outputs, torch::Tensor input) {
    AllGatherAsync(std::move(outputs), std::move(input))->Wait();
  }
  // Reduce-scatter in uneven pieces: `input` (1-D, contiguous) is split into Size() consecutive
  // pieces of counts[r] elements (the same counts on every rank, summing to input.numel()), and
  // `output` (counts[Rank()] elements) receives the sum over the ranks of their piece Rank(), in
  // rank order. Built on all-to-all (Gloo in LibTorch 1.13 has no reduce-scatter): each rank
  // sends and receives (Size() - 1) / Size() of the data, as a ring reduce-scatter does. The
  // tensors must stay alive until Wait() returns; output is written by Wait().
  virtual std::shared_ptr<CommWork> ReduceScatterAsync(torch::Tensor output, torch::Tensor input,
                                                       std::vector<int64_t> counts) = 0;
  // All-gather in uneven pieces (ZeRO-3's parameter gathers): rank r contributes `input` of
  // counts[r] elements (the same counts on every rank), and `output` (1-D, contiguous, the sum of
  // the counts) receives the pieces in rank order. Built on all-to-all, as ReduceScatterAsync:
  // each rank receives the other ranks' pieces once, as a ring all-gather does. `output` must not
  // overlap `input`; both must stay alive until Wait() returns.
  virtual std::shared_ptr<CommWork> AllGatherUnevenAsync(torch::Tensor output, torch::Tensor input,
                                                         std::vector<int64_t> counts) = 0;
  // Point-to-point, tagged; the tensor must stay alive and unmodified until Wait() returns.
  virtual std::shared_ptr<CommWork> SendAsync(torch::Tensor tensor, int dst_rank, int tag) = 0;
  virtual std::shared_ptr<CommWork> RecvAsync(torch::Tensor tensor, int src_rank, int tag) = 0;
  virtual void Barrier() = 0;

  void AllReduceSum(torch::Tensor tensor) { AllReduceSumAsync(std::move(tensor))->Wait(); }

  // Wall seconds this process spent blocked in Wait() / blocking calls of this group since
  // construction (communication time, for the measurement report).
  double BlockedSeconds() const { return blocked_seconds_; }
  void AddBlockedSeconds(double seconds) { blocked_seconds_ += seconds; }

 private:
  double blocked_seconds_ = 0;
};

// A group of one process: collectives are no-ops, point-to-point is an error.
std::unique_ptr<Communicator> MakeSelfCommunicator(const std::string& name);

// Key-value store shared by all processes of a run (a c10d Store); opaque outside communicator.cc.
class RendezvousStore;

// How processes find each other.
struct RendezvousOptions {
  int rank = 0;
  int world_size = 1;
  int local_rank = 0;
  // TCPStore at master_addr:master_port (rank 0 hosts it), as torchrun sets up ...
  std::string master_addr = "127.0.0.1";
  int master_port = 29500;
  // ... or, if not empty, a FileStore on this path (a shared file system).
  std::string file_store_path;
  // Rendezvous and every collective fail after this long without progress.
  std::chrono::milliseconds timeout{std::chrono::seconds(60)};
  // "gloo" | "nccl" | "auto" (ResolveBackend with `device`).
  std::string backend = "auto";
  // Where the run's tensors live: "cpu" | "cuda".
  std::string device = "cpu";
};

// Reads RANK, WORLD_SIZE, LOCAL_RANK, MASTER_ADDR, MASTER_PORT (torchrun, or Slurm via
// SLURM_PROCID / SLURM_NTASKS / SLURM_LOCALID when RANK is unset). Throws
// InputError("environment: RANK = x: ...") for missing or malformed values.
RendezvousOptions RendezvousFromEnvironment();

// Whether this build can create NCCL process groups (LibTorch with CUDA and NCCL, and a GPU).
bool NcclAvailable();
// Whether this build has the Gloo backend (LibTorch shipped its headers).
bool GlooAvailable();
// The backend a run uses: "auto" follows where the tensors live, NCCL for CUDA tensors when
// NcclAvailable(), else Gloo (which also moves CUDA tensors, through host memory); "gloo" and
// "nccl" are kept. Throws InputError for any other name.
std::string ResolveBackend(const std::string& backend, const std::string& device);

// The processes of one run: the world group, the store, and factories for subgroups.
class ProcessGroups {
 public:
  // Connects to the store and creates the world group. Blocks until all world_size processes
  // have joined; throws CommError after options.timeout.
  explicit ProcessGroups(const RendezvousOptions& options);
  ~ProcessGroups();

  Communicator& World() { return *world_; }
  int Rank() const { return options_.rank; }
  int WorldSize() const { return options_.world_size; }
  int LocalRank() const { return options_.local_rank; }
  const std::string& Backend() const { return backend_; }

  // Creates the subgroup of `global_ranks` (sorted, containing this rank); `name` must be
  // unique in the run and equal on all members. Every member must call it; non-members must
  // not. A group of one is a self communicator.
  std::unique_ptr<Communicator> NewGroup(const std::string& name,
                                         const std::vector<int>& global_ranks);

  // Store access for small metadata (measurements gathered by rank 0). Get blocks up to the
  // timeout for the key to appear.
  void StoreSet(const std::string& key, const std::string& value);
  std::string StoreGet(const std::string& key);

 private:
  RendezvousOptions options_;
  std::string backend_;
  std::unique_ptr<RendezvousStore> store_;
  std::unique_ptr<Communicator> world_;
};

}  // namespace stratos
