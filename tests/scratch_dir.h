#pragma once
// Where tests write files: one directory per test process under the system's temporary
// directory, removed with everything in it when the process exits normally.
#include <fmt/format.h>
#include <unistd.h>

#include <filesystem>
#include <string>
#include <system_error>

namespace stratos::testing {

// <temp>/stratos_test_<pid>, created on first use and removed at exit by the process that made
// it (a forked child that exits does not remove its parent's files).
inline const std::filesystem::path& ScratchRoot() {
  struct Root {
    std::filesystem::path path;
    pid_t owner;
    ~Root() {
      if (getpid() != owner) return;
      std::error_code ignored;
      std::filesystem::remove_all(path, ignored);
    }
  };
  static const Root root{
      std::filesystem::temp_directory_path() / fmt::format("stratos_test_{}", getpid()), getpid()};
  return root.path;
}

// Removes ScratchRoot() with everything in it now (for a process that exits without running
// the static destructors).
inline void RemoveScratchRoot() {
  std::error_code ignored;
  std::filesystem::remove_all(ScratchRoot(), ignored);
}

// The path ScratchRoot()/name, without creating or clearing it.
inline std::string ScratchPath(const std::string& name) { return (ScratchRoot() / name).string(); }

// A fresh, empty directory ScratchRoot()/name (emptied if an earlier test used the name).
inline std::string ScratchDir(const std::string& name) {
  const std::filesystem::path dir = ScratchRoot() / name;
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  return dir.string();
}

}  // namespace stratos::testing
