#include "runtime/device_info.h"

#include <torch/torch.h>
#include <torch/version.h>

#include "runtime/communicator.h"

namespace stratos {

RuntimeInfo QueryRuntimeInfo() {
  RuntimeInfo info;
  info.torch_version = TORCH_VERSION;
  info.cuda_available = torch::cuda::is_available();
  info.cuda_device_count = info.cuda_available ? static_cast<int>(torch::cuda::device_count()) : 0;
  info.gloo_available = GlooAvailable();
  info.nccl_available = NcclAvailable();
  return info;
}

}  // namespace stratos
