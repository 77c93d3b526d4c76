#include "calibrate/memory_fit.h"

#include <fmt/format.h>

#include <algorithm>

#include "costmodel/error.h"
#include "costmodel/statistics.h"

namespace stratos {

MemoryFit FitDeviceMemory(const std::vector<RunMemoryRow>& rows, const std::string& where) {
  if (rows.empty())
    throw InputError(fmt::format("{}: no run with device memory measurements (runs of "
                                 "`stratos run --device cuda`)",
                                 where));
  MemoryFit fit;
  std::vector<double> outside, fragmentation;
  for (const RunMemoryRow& row : rows) {
    auto fail = [&](const char* key, double value, const char* rule) {
      ThrowInputError(row.run, key, value, rule);
    };
    if (!(row.device_total_bytes > 0)) fail("device_total_bytes", row.device_total_bytes, "must be > 0");
    if (!(row.outside_allocator_bytes >= 0))
      fail("outside_allocator_bytes", row.outside_allocator_bytes, "must be >= 0");
    if (!(row.peak_allocated_bytes > 0))
      fail("peak_allocated_bytes", row.peak_allocated_bytes, "must be > 0");
    if (!(row.peak_reserved_bytes >= row.peak_allocated_bytes))
      fail("peak_reserved_bytes", row.peak_reserved_bytes, "must be >= peak_allocated_bytes");
    fit.memory_bytes = std::max(fit.memory_bytes, row.device_total_bytes);
    outside.push_back(row.outside_allocator_bytes);
    fragmentation.push_back(row.peak_reserved_bytes / row.peak_allocated_bytes - 1.0);
  }
  fit.reserved_memory_bytes = Median(outside);
  fit.memory_fragmentation = Median(fragmentation);
  fit.runs = static_cast<int>(rows.size());
  return fit;
}

DeviceSpec WithMemoryFit(DeviceSpec device, const MemoryFit& fit) {
  device.memory_bytes = fit.memory_bytes;
  device.reserved_memory_bytes = fit.reserved_memory_bytes;
  device.memory_fragmentation = fit.memory_fragmentation;
  return device;
}

DeviceSpec WithFrameworkMemoryFit(DeviceSpec device, const MemoryFit& fit) {
  const double memory_bytes = device.memory_bytes;
  device = WithMemoryFit(device, fit);
  device.memory_bytes = memory_bytes;
  return device;
}

}  // namespace stratos
