#pragma once
// The device-memory constants of a cluster description (cluster.h DeviceSpec: memory_bytes,
// reserved_memory_bytes, memory_fragmentation) from the memory measured in training runs on that
// device (`stratos run --device cuda`: runtime/device.h DeviceMemory, one row per run, its
// largest stage):
//   - memory_bytes: the device's total memory as the driver reports it (the largest over the
//     runs; datasheets round, and what they call GB is often GiB),
//   - reserved_memory_bytes: the median of what the process held outside the caching allocator
//     (CUDA context and kernel images, library handles and workspaces, NCCL buffers),
//   - memory_fragmentation: the median over the runs of peak reserved / peak allocated - 1, the
//     caching allocator's overhead over the tensors at their peak.
// Medians, so that one run with an unusual allocation pattern does not set the constants.
#include <string>
#include <vector>

#include "costmodel/cluster.h"

namespace stratos {

struct RunMemoryRow {
  std::string run;                        // where it came from, for messages
  double device_total_bytes = 0;          // > 0
  double outside_allocator_bytes = 0;     // >= 0
  double peak_allocated_bytes = 0;        // > 0
  double peak_reserved_bytes = 0;         // >= peak_allocated_bytes
};

struct MemoryFit {
  double memory_bytes = 0;
  double reserved_memory_bytes = 0;
  double memory_fragmentation = 0;
  int runs = 0;
};

// Throws InputError naming the run and the rule for a row that breaks its bounds above, and for
// no rows at all (`where` names the input).
MemoryFit FitDeviceMemory(const std::vector<RunMemoryRow>& rows, const std::string& where);

// `device` with the fitted constants.
DeviceSpec WithMemoryFit(DeviceSpec device, const MemoryFit& fit);

// `device` with the fit's framework constants only (reserved_memory_bytes and
// memory_fragmentation; its memory_bytes kept): for runs measured on another device, whose
// memory outside the caching allocator (CUDA context, library handles) and allocator overhead
// are the framework's rather than the GPU's.
DeviceSpec WithFrameworkMemoryFit(DeviceSpec device, const MemoryFit& fit);

}  // namespace stratos
