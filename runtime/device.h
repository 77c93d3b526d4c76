#pragma once
// Where a run's tensors live and how their work is timed: the device a rank uses, bf16
// autocast (torch.amp-style mixed precision) for CUDA, and a timer that reads the device's own
// timeline (CUDA events) instead of the host clock, which on CUDA only sees kernel launches.
#include <torch/torch.h>
#include <torch/version.h>

#include <chrono>
#include <memory>
#include <optional>
#include <string>
#include <vector>

// LibTorch at least major.minor (Debian's libtorch-dev is 1.13; the Python torch package of a GPU
// machine 2.x: the device-generic autocast API is from 2.4, Event::elapsedTime from 2.3).
#define STRATOS_TORCH_AT_LEAST(major, minor) \
  (TORCH_VERSION_MAJOR > (major) ||          \
   (TORCH_VERSION_MAJOR == (major) && TORCH_VERSION_MINOR >= (minor)))

namespace stratos {

// The rule a request for CUDA breaks where LibTorch sees no CUDA device, for error messages:
// "this LibTorch (<version>) sees no CUDA device (a CPU-only build, or no GPU visible)".
std::string NoCudaRule();

// The device of a rank: "cpu", or "cuda" -> cuda:(local_rank mod the GPU count). Throws
// InputError("run options: device = cuda: ...") when this LibTorch sees no CUDA device, and for
// any other name.
torch::Device RankDevice(const std::string& device, int local_rank);

// Makes an OpenBLAS behind LibTorch's CPU GEMMs single-threaded (openblas_set_num_threads(1),
// looked up with dlsym; nothing happens with another BLAS). LibTorch parallelizes over its own
// intra-op threads and the runtime runs one process per rank, so BLAS threads on top
// oversubscribe the cores: gpt-tiny trained twice as slowly on this project's 2-core machine.
// Called by `stratos` and every worker process at start.
void UseSingleThreadedBlas();

// Whether this LibTorch can run bf16 autocast on CUDA (>= 2.4).
bool AutocastSupported();

// Enables autocast (torch.amp) to `dtype` for CUDA tensors on this thread while alive, as
// `with torch.autocast("cuda", dtype)` does: matmuls, linear layers and attention run in dtype,
// reductions (layer norm, softmax, cross entropy) in fp32, parameters stay fp32. `enabled` false
// makes it a no-op. Restores the previous state and, leaving the outermost scope, clears the
// cache of cast weights. Throws std::runtime_error when enabled on a LibTorch older than 2.4.
class AutocastScope {
 public:
  AutocastScope(bool enabled, torch::ScalarType dtype = torch::kBFloat16);
  ~AutocastScope();
  AutocastScope(const AutocastScope&) = delete;
  AutocastScope& operator=(const AutocastScope&) = delete;

 private:
  bool enabled_;
  bool previous_enabled_ = false;
  torch::ScalarType previous_dtype_ = torch::kBFloat16;
};

// Turns autocast off for CUDA tensors on this thread while alive (as
// `with torch.autocast("cuda", enabled=False)`), for ops that should run in their inputs' dtype;
// restores the previous state. A no-op on a LibTorch without the autocast API (< 2.4).
class NoAutocastScope {
 public:
  NoAutocastScope();
  ~NoAutocastScope();
  NoAutocastScope(const NoAutocastScope&) = delete;
  NoAutocastScope& operator=(const NoAutocastScope&) = delete;

 private:
  bool previous_enabled_ = false;
};

// Whether autocast is on for CUDA tensors on this thread.
bool AutocastEnabled();
// x cast once to the autocast dtype when autocast is on for x's device (so that the several
// linear layers reading x do not each cast it), else x.
torch::Tensor AutocastInput(const torch::Tensor& x);

// A rank's device memory as LibTorch's caching allocator and the driver see it, in bytes.
struct DeviceMemory {
  double peak_allocated_bytes = 0;  // most bytes in live tensors at once since the process began
  double peak_reserved_bytes = 0;   // most bytes the caching allocator held from the driver
  double reserved_bytes = 0;        // bytes it holds now
  double device_total_bytes = 0;    // the device's memory
  double device_free_bytes = 0;     // free on the device now, for every process
  // Held on the device outside the caching allocator now: the CUDA context and kernel images,
  // library handles and workspaces not taken from the allocator, NCCL's buffers (and any other
  // process's memory): total - free - reserved.
  double OutsideAllocatorBytes() const {
    return device_total_bytes - device_free_bytes - reserved_bytes;
  }
};

// Reads `device`'s memory through LibTorch's device-generic allocator API
// (c10::DeviceAllocator::getDeviceStats, LibTorch >= 2.9; free and total bytes from its
// getMemoryInfo, or cudaMemGetInfo where it has none). std::nullopt on the CPU, before the
// allocator's first use, on an older LibTorch and in a build that defines
// STRATOS_NO_DEVICE_MEMORY_STATS.
std::optional<DeviceMemory> ReadDeviceMemory(torch::Device device);

// Marks on a device's timeline. On CPU a mark is the host clock; on CUDA a timing event recorded
// on the current stream (LibTorch >= 2.3; older ones synchronize the device at each mark). Read
// times only after Synchronize().
class DeviceTimer {
 public:
  // The origin mark (Offset() is measured from it) is recorded at construction.
  explicit DeviceTimer(torch::Device device);
  ~DeviceTimer();
  DeviceTimer(const DeviceTimer&) = delete;
  DeviceTimer& operator=(const DeviceTimer&) = delete;

  // Records a mark now (on CUDA: when the work queued so far has run); returns its index.
  int Mark();
  // Waits until every mark is recorded.
  void Synchronize();
  // Seconds between marks `from` and `to` (after Synchronize()).
  double Seconds(int from, int to) const;
  // Seconds from the origin to mark `index` (after Synchronize()).
  double Offset(int index) const;
  // Forgets the marks (not the origin); their indices are reused.
  void Clear();

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace stratos
