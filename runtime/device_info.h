#pragma once
// What this build's LibTorch can run on; printed by `stratos version`.
#include <string>

namespace stratos {

struct RuntimeInfo {
  std::string torch_version;  // e.g. "1.13.1"
  bool cuda_available = false;
  int cuda_device_count = 0;
  bool gloo_available = false;  // this build has the Gloo backend
  bool nccl_available = false;  // ... the NCCL backend, and a GPU
};

// Queries LibTorch at run time (no device is initialized beyond the CUDA device count).
RuntimeInfo QueryRuntimeInfo();

}  // namespace stratos
