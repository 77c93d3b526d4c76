#include "runtime/device.h"

#include <ATen/autocast_mode.h>
#include <c10/core/Event.h>
#include <c10/core/impl/VirtualGuardImpl.h>
#include <dlfcn.h>
#include <fmt/format.h>

#include <stdexcept>

#include "costmodel/error.h"

// The device-generic allocator API (c10::getDeviceAllocator with statistics).
#if STRATOS_TORCH_AT_LEAST(2, 9) && !defined(STRATOS_NO_DEVICE_MEMORY_STATS)
#define STRATOS_DEVICE_MEMORY_STATS 1
#include <c10/core/CachingDeviceAllocator.h>

#include <type_traits>
#include <utility>
#else
#define STRATOS_DEVICE_MEMORY_STATS 0
#endif

namespace stratos {

// The device-generic autocast API and c10::Event's timing (elapsedTime, synchronize).
#define STRATOS_TORCH_DEVICE_API STRATOS_TORCH_AT_LEAST(2, 4)

std::string NoCudaRule() {
  return fmt::format("this LibTorch ({}) sees no CUDA device (a CPU-only build, or no GPU visible)",
                     TORCH_VERSION);
}

torch::Device RankDevice(const std::string& device, int local_rank) {
  if (device == "cpu") return torch::Device(torch::kCPU);
  if (device != "cuda")
    ThrowInputError("run options", "device", fmt::format("\"{}\"", device), "must be cpu or cuda");
  if (!torch::cuda::is_available()) ThrowInputError("run options", "device", "\"cuda\"", NoCudaRule());
  const int count = static_cast<int>(torch::cuda::device_count());
  return torch::Device(torch::kCUDA, static_cast<c10::DeviceIndex>(local_rank % count));
}

void UseSingleThreadedBlas() {
  using SetThreads = void (*)(int);
  if (auto set = reinterpret_cast<SetThreads>(dlsym(RTLD_DEFAULT, "openblas_set_num_threads")))
    set(1);
}

bool AutocastSupported() { return STRATOS_TORCH_DEVICE_API; }

AutocastScope::AutocastScope(bool enabled, torch::ScalarType dtype) : enabled_(enabled) {
  if (!enabled_) return;
#if STRATOS_TORCH_DEVICE_API
  previous_enabled_ = at::autocast::is_autocast_enabled(at::kCUDA);
  previous_dtype_ = at::autocast::get_autocast_dtype(at::kCUDA);
  at::autocast::set_autocast_enabled(at::kCUDA, true);
  at::autocast::set_autocast_dtype(at::kCUDA, dtype);
  at::autocast::increment_nesting();
#else
  (void)dtype;
  throw std::runtime_error(fmt::format(
      "bf16 autocast needs LibTorch >= 2.4 (this one is {})", TORCH_VERSION));
#endif
}

AutocastScope::~AutocastScope() {
  if (!enabled_) return;
#if STRATOS_TORCH_DEVICE_API
  if (at::autocast::decrement_nesting() == 0) at::autocast::clear_cache();
  at::autocast::set_autocast_enabled(at::kCUDA, previous_enabled_);
  at::autocast::set_autocast_dtype(at::kCUDA, previous_dtype_);
#endif
}

NoAutocastScope::NoAutocastScope() {
#if STRATOS_TORCH_DEVICE_API
  previous_enabled_ = at::autocast::is_autocast_enabled(at::kCUDA);
  at::autocast::set_autocast_enabled(at::kCUDA, false);
#endif
}

NoAutocastScope::~NoAutocastScope() {
#if STRATOS_TORCH_DEVICE_API
  at::autocast::set_autocast_enabled(at::kCUDA, previous_enabled_);
#endif
}

bool AutocastEnabled() {
#if STRATOS_TORCH_DEVICE_API
  return at::autocast::is_autocast_enabled(at::kCUDA);
#else
  return false;
#endif
}

torch::Tensor AutocastInput(const torch::Tensor& x) {
#if STRATOS_TORCH_DEVICE_API
  if (x.is_cuda() && AutocastEnabled()) return x.to(at::autocast::get_autocast_dtype(at::kCUDA));
#endif
  return x;
}

#if STRATOS_DEVICE_MEMORY_STATS
namespace {

// Free and total bytes of a device: the allocator's getMemoryInfo where this LibTorch has it,
// else the CUDA runtime's cudaMemGetInfo (C ABI, looked up in the loaded libraries; it reads the
// current device, which the trainer's device guard sets).
template <typename Allocator, typename = void>
struct HasMemoryInfo : std::false_type {};
template <typename Allocator>
struct HasMemoryInfo<Allocator, std::void_t<decltype(std::declval<Allocator&>().getMemoryInfo(
                                    c10::DeviceIndex{}))>> : std::true_type {};

template <typename Allocator>
std::optional<std::pair<size_t, size_t>> FreeAndTotal(Allocator* allocator,
                                                      c10::DeviceIndex index) {
  if constexpr (HasMemoryInfo<Allocator>::value) {
    return allocator->getMemoryInfo(index);
  } else {
    using MemGetInfo = int (*)(size_t*, size_t*);
    auto get = reinterpret_cast<MemGetInfo>(dlsym(RTLD_DEFAULT, "cudaMemGetInfo"));
    size_t free_bytes = 0, total_bytes = 0;
    if (get == nullptr || get(&free_bytes, &total_bytes) != 0) return std::nullopt;
    return std::make_pair(free_bytes, total_bytes);
  }
}

}  // namespace
#endif

std::optional<DeviceMemory> ReadDeviceMemory(torch::Device device) {
  if (!device.is_cuda()) return std::nullopt;
#if STRATOS_DEVICE_MEMORY_STATS
  c10::DeviceAllocator* allocator = c10::getDeviceAllocator(device.type());
  if (allocator == nullptr || !allocator->initialized()) return std::nullopt;
  const auto stats = allocator->getDeviceStats(device.index());
  const auto all = static_cast<size_t>(c10::CachingDeviceAllocator::StatType::AGGREGATE);
  const auto free_and_total = FreeAndTotal(allocator, device.index());
  if (!free_and_total) return std::nullopt;
  const auto [free_bytes, total_bytes] = *free_and_total;
  DeviceMemory memory;
  memory.peak_allocated_bytes = static_cast<double>(stats.allocated_bytes[all].peak);
  memory.peak_reserved_bytes = static_cast<double>(stats.reserved_bytes[all].peak);
  memory.reserved_bytes = static_cast<double>(stats.reserved_bytes[all].current);
  memory.device_total_bytes = static_cast<double>(total_bytes);
  memory.device_free_bytes = static_cast<double>(free_bytes);
  return memory;
#else
  return std::nullopt;
#endif
}

// ---------------------------------------------------------------------------------------------

namespace {
using Clock = std::chrono::steady_clock;
}

struct DeviceTimer::Impl {
  torch::Device device{torch::kCPU};
  bool events = false;  // CUDA timing events (else host clock)
  int used = 0;
  Clock::time_point host_origin;
  std::vector<Clock::time_point> host;
#if STRATOS_TORCH_DEVICE_API
  std::unique_ptr<c10::Event> origin;
  std::vector<std::unique_ptr<c10::Event>> pool;

  void Record(c10::Event& event) const {
    const c10::impl::VirtualGuardImpl guard(device.type());
    event.record(guard.getStream(device));
  }
  static std::unique_ptr<c10::Event> NewEvent() {
    // BACKEND_DEFAULT: a CUDA event with timing (PyTorch's default disables it).
    return std::make_unique<c10::Event>(c10::DeviceType::CUDA, c10::EventFlag::BACKEND_DEFAULT);
  }
#endif
  void WaitForDevice() const {
    // A host read of a device value waits for the queued work (for LibTorch < 2.4).
    if (device.is_cuda()) torch::zeros({1}, torch::TensorOptions().device(device)).cpu();
  }
};

DeviceTimer::DeviceTimer(torch::Device device) : impl_(std::make_unique<Impl>()) {
  impl_->device = device;
#if STRATOS_TORCH_DEVICE_API
  impl_->events = device.is_cuda();
  if (impl_->events) {
    impl_->origin = Impl::NewEvent();
    impl_->Record(*impl_->origin);
    return;
  }
#endif
  impl_->WaitForDevice();
  impl_->host_origin = Clock::now();
}

DeviceTimer::~DeviceTimer() = default;

int DeviceTimer::Mark() {
#if STRATOS_TORCH_DEVICE_API
  if (impl_->events) {
    if (impl_->used == static_cast<int>(impl_->pool.size())) impl_->pool.push_back(Impl::NewEvent());
    impl_->Record(*impl_->pool[impl_->used]);
    return impl_->used++;
  }
#endif
  impl_->WaitForDevice();
  impl_->host.push_back(Clock::now());
  return impl_->used++;
}

void DeviceTimer::Synchronize() {
#if STRATOS_TORCH_DEVICE_API
  if (impl_->events) {
    impl_->origin->synchronize();
    if (impl_->used > 0) impl_->pool[impl_->used - 1]->synchronize();
  }
#endif
}

double DeviceTimer::Seconds(int from, int to) const {
  STRATOS_CHECK(0 <= from && from < impl_->used && 0 <= to && to < impl_->used,
                "timer marks {} and {} of {}", from, to, impl_->used);
#if STRATOS_TORCH_DEVICE_API
  if (impl_->events) return impl_->pool[from]->elapsedTime(*impl_->pool[to]) / 1e3;
#endif
  return std::chrono::duration<double>(impl_->host[to] - impl_->host[from]).count();
}

double DeviceTimer::Offset(int index) const {
  STRATOS_CHECK(0 <= index && index < impl_->used, "timer mark {} of {}", index, impl_->used);
#if STRATOS_TORCH_DEVICE_API
  if (impl_->events) return impl_->origin->elapsedTime(*impl_->pool[index]) / 1e3;
#endif
  return std::chrono::duration<double>(impl_->host[index] - impl_->host_origin).count();
}

void DeviceTimer::Clear() {
  impl_->used = 0;
  impl_->host.clear();
}

}  // namespace stratos
