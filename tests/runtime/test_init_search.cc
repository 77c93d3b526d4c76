// Parallel random initialization (cosearch/init_search.h): the initialization schemes draw what
// their formulas say, candidates train on common batches without touching each other, and a
// resumed search equals the uninterrupted one bitwise.
#include <doctest/doctest.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <set>
#include <stdexcept>

#include "cosearch/init_search.h"
#include "costmodel/error.h"
#include "runtime/communicator.h"
#include "runtime/runtime_plan.h"
#include "runtime_test_util.h"

namespace stratos {

namespace {

double StdDev(const torch::Tensor& t) { return t.std().item<double>(); }

const torch::Tensor& Named(const GptStage& stage, const std::string& name) {
  for (size_t p = 0; p < stage.ParameterInfos().size(); ++p)
    if (stage.ParameterInfos()[p].name == name) return stage.Parameters()[p];
  throw std::runtime_error("no parameter " + name);
}

InitSearchOptions TinyInitSearch(int candidates, const std::string& checkpoint_dir = "") {
  InitSearchOptions options;
  options.batch_size = 2;
  options.validation_windows = 4;
  options.candidates = MakeInitCandidates(
      candidates,
      {InitScheme::kGpt2, InitScheme::kNormal, InitScheme::kXavier, InitScheme::kKaiming}, 7);
  options.halving.evaluation_steps = 2;
  options.halving.plateau_window = 1;
  options.halving.plateau_drop = 0.5;
  options.halving.max_first_rung_steps = 4;
  options.halving.step_budget = 12;
  options.checkpoint_dir = checkpoint_dir;
  options.checkpoint_every = 1;
  return options;
}

}  // namespace

TEST_CASE("initialization schemes draw the weight matrices by their formulas") {
  const ModelSpec model = LoadRuntimeModel("gpt-tiny", 0);  // hidden 64, ffn 256, 4 blocks
  auto self = MakeSelfCommunicator("test");
  auto stage = [&](InitScheme scheme) {
    return std::make_unique<GptStage>(model, 0, model.NumLayers(), Recompute::kNone, self.get(),
                                      11, torch::Device(torch::kCPU), false, false, scheme);
  };
  const auto gpt2 = stage(InitScheme::kGpt2), normal = stage(InitScheme::kNormal),
             xavier = stage(InitScheme::kXavier), kaiming = stage(InitScheme::kKaiming);
  // The default is GPT-2's: the same parameters as a stage built without a scheme.
  const GptStage plain(model, 0, model.NumLayers(), Recompute::kNone, self.get(), 11);
  CHECK(torch::equal(plain.FlatParameters(), gpt2->FlatParameters()));

  const std::string fc1 = "block.1.mlp.fc1.weight", fc2 = "block.1.mlp.fc2.weight",
                    out = "block.1.attn.o.weight";
  CHECK(StdDev(Named(*gpt2, fc1)) == doctest::Approx(0.02).epsilon(0.05));
  CHECK(StdDev(Named(*gpt2, out)) == doctest::Approx(0.02 / std::sqrt(8.0)).epsilon(0.05));
  CHECK(StdDev(Named(*normal, out)) == doctest::Approx(0.02).epsilon(0.05));
  // Xavier uniform: std = a / sqrt(3) = sqrt(2 / (fan_in + fan_out)); fc1 is (256, 64).
  CHECK(StdDev(Named(*xavier, fc1)) == doctest::Approx(std::sqrt(2.0 / 320)).epsilon(0.05));
  CHECK(Named(*xavier, fc1).abs().max().item<double>() <= std::sqrt(6.0 / 320));
  // Kaiming: sqrt(2 / fan_in); fc2 is (64, 256).
  CHECK(StdDev(Named(*kaiming, fc1)) == doctest::Approx(std::sqrt(2.0 / 64)).epsilon(0.05));
  CHECK(StdDev(Named(*kaiming, fc2)) == doctest::Approx(std::sqrt(2.0 / 256)).epsilon(0.05));
  // Embeddings, biases and norms do not depend on the scheme.
  for (const std::string name : {"embedding.wte", "embedding.wpe", "block.1.mlp.fc1.bias",
                                 "block.1.ln1.weight", "head.ln_f.bias"})
    CHECK(torch::equal(Named(*gpt2, name), Named(*kaiming, name)));

  CHECK(ParseInitScheme("xavier", "here", "k") == InitScheme::kXavier);
  CHECK_THROWS_WITH_AS(ParseInitScheme("he", "command line", "--schemes"),
                       "command line: --schemes = \"he\": must be one of gpt2, normal, xavier, "
                       "kaiming",
                       InputError);
}

TEST_CASE("init-search candidates cycle the schemes with distinct seeds") {
  const std::vector<InitCandidate> c =
      MakeInitCandidates(5, {InitScheme::kGpt2, InitScheme::kXavier}, 3);
  REQUIRE(c.size() == 5);
  CHECK(c[0].scheme == InitScheme::kGpt2);
  CHECK(c[1].scheme == InitScheme::kXavier);
  CHECK(c[4].scheme == InitScheme::kGpt2);
  std::set<uint64_t> seeds;
  for (const InitCandidate& x : c) seeds.insert(x.seed);
  CHECK(seeds.size() == 5);
  CHECK(MakeInitCandidates(5, {InitScheme::kGpt2, InitScheme::kXavier}, 3)[3].seed == c[3].seed);
  CHECK(MakeInitCandidates(5, {InitScheme::kGpt2}, 4)[0].seed != c[0].seed);
  CHECK_THROWS_AS(MakeInitCandidates(0, {InitScheme::kGpt2}, 3), InputError);
}

TEST_CASE("init-search trains candidates on common batches; one candidate is the plain run") {
  const InitSearchOptions options = TinyInitSearch(4);
  const InitSearchResult search = RunInitSearch(options);
  const HalvingResult& h = search.halving;
  REQUIRE(h.survivor >= 0);
  CHECK(h.stopped_at_step[h.survivor] == 12);
  CHECK(h.rung_steps.front() <= 4);
  int stopped_first = 0;
  for (int run = 0; run < 4; ++run) stopped_first += h.stopped_at_step[run] == h.rung_steps[0];
  CHECK(stopped_first == 2);
  // Candidate 0 alone follows the same curve as in the search (it does not see the others).
  InitSearchOptions alone = options;
  alone.candidates = {options.candidates[0]};
  const InitSearchResult single = RunInitSearch(alone);
  REQUIRE(single.halving.curves[0].size() == 6);
  for (size_t k = 0; k < h.curves[0].size(); ++k)
    CHECK(single.halving.curves[0][k] == h.curves[0][k]);
  CHECK(single.halving.curves[0].back() < single.halving.curves[0].front());
}

TEST_CASE("init-search resumed from a checkpoint equals the uninterrupted search bitwise") {
  const std::string dir = TestDir("init_search_resume");
  const InitSearchResult whole = RunInitSearch(TinyInitSearch(4));

  struct Interrupted {};
  CHECK_THROWS_AS(RunInitSearch(TinyInitSearch(4, dir),
                                [](int step, const std::vector<int>&, const HalvingResult&) {
                                  if (step == 6) throw Interrupted{};  // after its checkpoint
                                }),
                  Interrupted);
  InitSearchOptions again = TinyInitSearch(4, dir);
  again.resume = true;
  const InitSearchResult resumed = RunInitSearch(again);
  CHECK(resumed.resumed_from_step == 6);
  CHECK(resumed.halving.survivor == whole.halving.survivor);
  CHECK(resumed.halving.curves == whole.halving.curves);
  CHECK(resumed.halving.stopped_at_step == whole.halving.stopped_at_step);
  CHECK(resumed.halving.total_steps == whole.halving.total_steps);
  CHECK(torch::equal(resumed.survivor_parameters, whole.survivor_parameters));

  // A checkpoint of another search is refused, naming the field.
  InitSearchOptions other = again;
  other.learning_rate = 2e-3;
  CHECK_THROWS_WITH_AS(RunInitSearch(other),
                       doctest::Contains("search.learning_rate = 0.001: the checkpoint belongs "
                                         "to another search"),
                       InputError);
  // A truncated checkpoint is one line naming the file.
  const std::string file = dir + "/init_search.pt";
  std::filesystem::resize_file(file, std::filesystem::file_size(file) / 2);
  try {
    RunInitSearch(again);
    FAIL("a truncated checkpoint was read");
  } catch (const InputError& e) {
    const std::string what = e.what();
    CHECK(what.find(file + ": not a readable init-search checkpoint") == 0);
    CHECK(what.find('\n') == std::string::npos);
  }
}

}  // namespace stratos
