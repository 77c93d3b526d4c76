// runtime_test's main: doctest, then, in a process where LibTorch sees a CUDA device, the exit
// code through std::_Exit after removing the scratch directory. Seen on an H200 with LibTorch
// 2.11: after every test had passed, the process crashed (SIGSEGV) in LibTorch's and CUDA's
// teardown at exit; skipping the static destructors there keeps `make test-gpu`'s exit code the
// tests' own.
#define DOCTEST_CONFIG_IMPLEMENT
#include <doctest/doctest.h>
#include <torch/torch.h>

#include <cstdio>
#include <cstdlib>

#include "tests/scratch_dir.h"

int main(int argc, char** argv) {
  const int code = doctest::Context(argc, argv).run();
  if (torch::cuda::is_available()) {
    stratos::testing::RemoveScratchRoot();
    std::fflush(nullptr);
    std::_Exit(code);
  }
  return code;
}
