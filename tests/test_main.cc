// The test executables' main: doctest's, with the user's own zoo (costmodel/zoo.h UserZooDir)
// pointed at a directory that does not exist, so that the clusters of whoever runs the tests do
// not join the zoo the tests enumerate. Tests of the user zoo set STRATOS_USER_ZOO themselves.
// A crash prints where it happened on stderr (the faulting instruction's library and symbol, the
// thread, the stack as far as it unwinds) before the process dies of the signal as it would
// have, so that a crash outside any test case is located.
#define DOCTEST_CONFIG_IMPLEMENT
#include <dlfcn.h>
#include <doctest/doctest.h>
#include <execinfo.h>
#include <sys/syscall.h>
#include <ucontext.h>
#include <unistd.h>

#include <algorithm>
#include <csignal>
#include <cstdio>
#include <cstdlib>

#include "tests/scratch_dir.h"

namespace {

void PrintCrashAndDie(int signal_number, siginfo_t* info, void* context) {
  char line[512];
  const void* pc = nullptr;
#if defined(__x86_64__)
  pc = reinterpret_cast<void*>(static_cast<ucontext_t*>(context)->uc_mcontext.gregs[REG_RIP]);
#else
  (void)context;
#endif
  Dl_info where{};
  const bool found = pc && dladdr(pc, &where);
  const long thread = syscall(SYS_gettid);
  const int n = std::snprintf(
      line, sizeof line,
      "\n*** signal %d in the test executable: address %p, instruction %p in %s (%s), %s thread "
      "%ld; stack:\n",
      signal_number, info->si_addr, pc, found && where.dli_fname ? where.dli_fname : "?",
      found && where.dli_sname ? where.dli_sname : "?", thread == getpid() ? "main" : "another",
      thread);
  const size_t length = n < 0 ? 0 : std::min(static_cast<size_t>(n), sizeof line - 1);
  (void)!write(STDERR_FILENO, line, length);
  void* frames[64];
  backtrace_symbols_fd(frames, backtrace(frames, 64), STDERR_FILENO);
  std::signal(signal_number, SIG_DFL);
  std::raise(signal_number);
}

}  // namespace

int main(int argc, char** argv) {
  setenv("STRATOS_USER_ZOO", "/nonexistent/stratos-tests-have-no-user-zoo", 1);
  struct sigaction action {};
  action.sa_sigaction = PrintCrashAndDie;
  action.sa_flags = SA_SIGINFO;
  sigaction(SIGSEGV, &action, nullptr);
  sigaction(SIGBUS, &action, nullptr);
  const int status = doctest::Context(argc, argv).run();
  // Exit without the static destructors. With LibTorch 2.11 on an H200, every test executable
  // that had trained on the GPU crashed after main returned (a call through a null function
  // pointer on the main thread, in LibTorch's or CUDA's teardown), after all tests passed; the
  // same executable exits with the tests' status when the destructors are skipped
  // (experiments/gpu/results). The scratch directory they would have removed is removed here.
  stratos::testing::RemoveScratchRoot();
  std::fflush(nullptr);
  std::_Exit(status);
}
