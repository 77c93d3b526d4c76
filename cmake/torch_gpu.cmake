# What the runtime's communicator (runtime/communicator.cc) can use from this LibTorch:
# - Gloo: ProcessGroupGloo.hpp needs gloo's headers (Debian: libgloo-dev; a Python torch package
#   may ship them under torch/include). Without them: STRATOS_NO_GLOO, and the Gloo backend
#   refuses with a clear error.
# - NCCL: a LibTorch built with CUDA (target torch_cuda) and nccl.h (the CUDA toolkit's, or the
#   Python nvidia-nccl package's beside torch): STRATOS_WITH_NCCL. -DSTRATOS_NCCL=OFF switches
#   it off.
# Only communicator.cc gets these definitions (the precompiled <torch/torch.h> stays shared).
option(STRATOS_NCCL "build the NCCL backend when LibTorch has CUDA and nccl.h is found" ON)
set(STRATOS_COMMUNICATOR_DEFINITIONS "")
set(STRATOS_COMMUNICATOR_INCLUDES "")
find_path(STRATOS_GLOO_INCLUDE gloo/context.h HINTS ${TORCH_INCLUDE_DIRS} ${TORCH_INSTALL_PREFIX}/include)
if(STRATOS_GLOO_INCLUDE)
  set(stratos_gloo ON)
else()
  set(stratos_gloo OFF)
  list(APPEND STRATOS_COMMUNICATOR_DEFINITIONS STRATOS_NO_GLOO)
endif()
set(stratos_nccl OFF)
if(STRATOS_NCCL AND TARGET torch_cuda)
  get_filename_component(stratos_site ${TORCH_INSTALL_PREFIX} DIRECTORY)
  file(GLOB stratos_nvidia_includes ${stratos_site}/nvidia/*/include)
  find_package(CUDAToolkit QUIET)
  find_path(STRATOS_NCCL_INCLUDE nccl.h HINTS ${stratos_nvidia_includes} ${CUDAToolkit_INCLUDE_DIRS})
  if(STRATOS_NCCL_INCLUDE)
    set(stratos_nccl ON)
    list(APPEND STRATOS_COMMUNICATOR_DEFINITIONS STRATOS_WITH_NCCL)
    list(APPEND STRATOS_COMMUNICATOR_INCLUDES ${STRATOS_NCCL_INCLUDE} ${CUDAToolkit_INCLUDE_DIRS}
         ${stratos_nvidia_includes})
  endif()
endif()
message(STATUS "LibTorch ${Torch_VERSION}: runtime backends Gloo ${stratos_gloo}, NCCL ${stratos_nccl}")

# Kineto (torch.profiler's C++ side) for `stratos run --kineto-step`: its C++ API as used by
# runtime/kineto_trace.cc is LibTorch >= 2.4's. -DSTRATOS_KINETO=OFF switches it off.
if(Torch_VERSION VERSION_GREATER_EQUAL 2.4)
  option(STRATOS_KINETO "operator-level traces through LibTorch's Kineto profiler" ON)
else()
  set(STRATOS_KINETO OFF)
endif()
message(STATUS "Kineto traces: ${STRATOS_KINETO}")
