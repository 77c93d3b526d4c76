#pragma once
// An operator-level trace of one training step from LibTorch's Kineto profiler (the C++ side of
// torch.profiler): every ATen operator on the CPU threads (the main thread and autograd's) and,
// on CUDA, every kernel and copy on the GPU with its launching operator, as a Chrome trace.
// Where the step's time goes between the host's launches and the device's kernels is what the
// runtime's own regions (forward, backward, ...) cannot show.
//
// Built where LibTorch >= 2.4 ships the Kineto profiler API (cmake option STRATOS_KINETO);
// elsewhere KinetoAvailable() is false and StartKinetoTrace throws.
#include <string>

namespace stratos {

bool KinetoAvailable();

// Starts the profiler on this thread (CPU operators; CUDA kernels too when `cuda`). Throws
// std::runtime_error when the build has no Kineto or a trace is already running.
void StartKinetoTrace(bool cuda);

// Stops the profiler and writes the Chrome trace (JSON) to `path`. Throws std::runtime_error
// when no trace is running or the file cannot be written.
void StopKinetoTrace(const std::string& path);

}  // namespace stratos
