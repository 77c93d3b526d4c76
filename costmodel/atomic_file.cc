#include "costmodel/atomic_file.h"

#include <fmt/format.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>

#include "costmodel/error.h"

namespace stratos {

void WriteFileAtomically(const std::string& path, const std::string& text, bool executable) {
  // A temporary name of its own beside the target (mkstemp), so that concurrent writers of the
  // same file do not share one; removed if anything fails.
  std::string temporary = path + ".tmp-XXXXXX";
  const int fd = mkstemp(temporary.data());
  if (fd < 0)
    throw InputError(fmt::format("{}: cannot write output file: {}", path, std::strerror(errno)));
  close(fd);
  std::error_code error;
  const auto fail = [&](const std::string& message) {
    std::filesystem::remove(temporary, error);
    throw InputError(message);
  };
  {
    std::ofstream out(temporary, std::ios::binary | std::ios::trunc);
    if (!out) fail(fmt::format("{}: cannot write output file", temporary));
    out << text;
    if (!out.flush()) fail(fmt::format("{}: write failed", temporary));
  }
  // mkstemp makes the file private (0600); outputs are read by others like any file.
  using std::filesystem::perms;
  perms mode = perms::owner_read | perms::owner_write | perms::group_read | perms::others_read;
  if (executable) mode |= perms::owner_exec | perms::group_exec | perms::others_exec;
  std::filesystem::permissions(temporary, mode, error);
  std::filesystem::rename(temporary, path, error);
  if (error) fail(fmt::format("{}: cannot move into place: {}", path, error.message()));
}

}  // namespace stratos
