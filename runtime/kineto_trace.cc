#include "runtime/kineto_trace.h"

#include <fmt/format.h>

#include <stdexcept>

#ifdef STRATOS_WITH_KINETO
#include <torch/csrc/autograd/profiler_kineto.h>
#endif

namespace stratos {

namespace {
bool running = false;
}

bool KinetoAvailable() {
#ifdef STRATOS_WITH_KINETO
  return true;
#else
  return false;
#endif
}

void StartKinetoTrace(bool cuda) {
  if (running) throw std::runtime_error("a Kineto trace is already running");
#ifdef STRATOS_WITH_KINETO
  using torch::profiler::impl::ActivityType;
  const torch::profiler::impl::ProfilerConfig config(torch::profiler::impl::ProfilerState::KINETO);
  std::set<ActivityType> activities{ActivityType::CPU};
  if (cuda) activities.insert(ActivityType::CUDA);
  torch::autograd::profiler::prepareProfiler(config, activities);
  torch::autograd::profiler::enableProfiler(config, activities);
  running = true;
#else
  (void)cuda;
  throw std::runtime_error(
      "this build has no Kineto profiler (LibTorch >= 2.4 with STRATOS_KINETO=ON)");
#endif
}

void StopKinetoTrace(const std::string& path) {
  if (!running) throw std::runtime_error("no Kineto trace is running");
  running = false;
#ifdef STRATOS_WITH_KINETO
  const auto result = torch::autograd::profiler::disableProfiler();
  if (!result) throw std::runtime_error("the Kineto profiler returned no trace");
  result->save(path);
#else
  (void)path;
#endif
}

}  // namespace stratos
