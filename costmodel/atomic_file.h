#pragma once
// Writing a file so that readers and concurrent writers never see half of it.
#include <string>

namespace stratos {

// Writes `text` to `path` atomically: into a temporary file of its own beside it
// (path.tmp-XXXXXX, mkstemp), then renamed over it, so concurrent writers of one path never share
// a temporary and a reader sees a whole file; the temporary is removed if anything fails. Mode
// 0644, or 0755 when `executable` (launch scripts). Throws InputError naming the file on failure.
void WriteFileAtomically(const std::string& path, const std::string& text,
                         bool executable = false);

}  // namespace stratos
