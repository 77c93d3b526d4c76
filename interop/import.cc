// ImportConfig: reads the file and dispatches to the target's reader.
#include <fstream>
#include <sstream>

#include "costmodel/error.h"
#include "interop/targets.h"

namespace stratos {

ImportedConfig ImportConfig(Target target, const std::string& path, int world_size) {
  std::ifstream in(path);
  if (!in) throw InputError(path + ": cannot open configuration file");
  std::stringstream buffer;
  buffer << in.rdbuf();
  const std::string text = buffer.str();
  switch (target) {
    case Target::kMegatron:
      return ImportMegatron(path, text, world_size);
    case Target::kDeepSpeed:
      return ImportDeepSpeed(path, text, world_size);
    case Target::kTorchtitan:
      return ImportTorchtitan(path, text, world_size);
    case Target::kTorchPipelining:
      break;
  }
  ThrowInputError("command line", "--from", TargetName(target),
                  "a schedule CSV holds no model or parallel degrees: import megatron, "
                  "deepspeed or torchtitan configurations");
}

}  // namespace stratos
