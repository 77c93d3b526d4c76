// Profile directory reader (calibrate/profile.h): the first byte picks which of the three CSV
// files gets the rest of the input; the other files are valid and empty of rows.
#include "calibrate/profile.h"
#include "fuzz/fuzz_util.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace stratos;
  const std::string& dir = fuzz::ScratchDir();
  static const bool written = [&] {
    Profile empty;
    empty.info.device = "gpu";
    WriteProfileDir(empty, dir);
    return true;
  }();
  (void)written;
  if (size == 0) return 0;
  static const char* kFiles[] = {"matmul.csv", "collective.csv", "layer.csv", "profile.json"};
  const std::string file = dir + "/" + kFiles[data[0] % 4];
  const std::string before = [&] {
    std::ifstream in(file, std::ios::binary);
    return std::string(std::istreambuf_iterator<char>(in), {});
  }();
  fuzz::WriteFile(file, fuzz::Text(data + 1, size - 1));
  try {
    (void)ReadProfileDir(dir);
  } catch (const InputError&) {
  }
  fuzz::WriteFile(file, before);
  return 0;
}
