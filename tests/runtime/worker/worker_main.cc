// The worker program of the runtime tests: `runtime_test_worker OPTIONS.json`, with the torchrun
// environment (RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT) set by the launcher. It is what
// `stratos worker --config OPTIONS.json` does, without linking the whole CLI.
#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include <fstream>

#include "costmodel/error.h"
#include "runtime/trainer.h"

int main(int argc, char** argv) {
  if (argc != 2) {
    fmt::print(stderr, "usage: runtime_test_worker OPTIONS.json\n");
    return 2;
  }
  try {
    std::ifstream in(argv[1]);
    if (!in) throw stratos::InputError(fmt::format("{}: cannot open", argv[1]));
    const stratos::TrainOptions options =
        stratos::TrainOptionsFromJson(nlohmann::json::parse(in), argv[1]);
    return stratos::RunWorkerProcess(options, stratos::RendezvousFromEnvironment());
  } catch (const std::exception& e) {
    fmt::print(stderr, "runtime_test_worker: error: {}\n", e.what());
    return 2;
  }
}
