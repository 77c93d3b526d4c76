// Experiment specs (experiments/experiment_spec.h) and searcher options by name
// (experiments/searchers.h): expansion into cells, and errors that name file, key, value and rule.
#include <doctest/doctest.h>

#include <atomic>
#include <filesystem>
#include <fstream>
#include <set>
#include <string>
#include <thread>

#include "costmodel/data_dir.h"
#include "costmodel/error.h"
#include "experiments/experiment_runner.h"
#include "experiments/experiment_spec.h"
#include "experiments/output.h"
#include "experiments/searchers.h"
#include "search/interleaving_searcher.h"
#include "tests/scratch_dir.h"

namespace stratos {

namespace {

const char* kSpec = R"(
[experiment]
name = "t"
time_limit_seconds = 5
seeds = [0, 7]

[[family]]
name = "gpt"
models = ["gpt3-1.3b", "gpt3-2.7b"]
clusters = ["dgx-a100-80gb"]
nodes = [1, 2]
global_batches = [64]

[[family]]
name = "ladder"
models = ["gpt3-1.3b", "gpt3-2.7b"]
clusters = ["dgx-a100-80gb"]
nodes = [1, 2]
global_batches = [64]
zip = true

[[searcher]]
name = "relax-no-gradient"
algorithm = "relax"
options = { iterations = 1, polish = "descent", space = { max_stages = 4 } }

[[searcher]]
algorithm = "dp"
time_limit_seconds = 9
)";

// The message of the InputError that `f` throws ("" if none).
template <class F>
std::string ErrorOf(F f) {
  try {
    f();
  } catch (const InputError& e) {
    return e.what();
  }
  return "";
}

std::string SpecError(const std::string& text) {
  return ErrorOf([&] { ParseExperimentSpec(text, "spec.toml"); });
}

}  // namespace

TEST_CASE("experiment spec: families x instances x searchers x seeds expand in order, with keys "
          "that identify cells") {
  const ExperimentSpec spec = ParseExperimentSpec(kSpec, "spec.toml");
  CHECK(spec.name == "t");
  const std::vector<ExperimentCell> cells = spec.Expand();
  // gpt: 2 models x 2 node counts crossed = 4 instances; ladder: zipped = 2; x 2 searchers x 2 seeds.
  REQUIRE(cells.size() == (4 + 2) * 2 * 2);
  for (size_t i = 0; i < cells.size(); ++i) CHECK(cells[i].id == static_cast<int>(i));
  CHECK(cells[0].family == "gpt");
  CHECK(cells[0].instance == "gpt3-1.3b/dgx-a100-80gb/1n/b64");
  CHECK(cells[0].searcher == "relax-no-gradient");
  CHECK(cells[0].seed == 0);
  CHECK(cells[1].seed == 7);
  CHECK(cells[2].searcher == "dp");
  CHECK(cells[2].time_limit_seconds == 9);
  CHECK(cells[0].time_limit_seconds == 5);
  CHECK(cells[4].instance == "gpt3-1.3b/dgx-a100-80gb/2n/b64");
  CHECK(cells[16].family == "ladder");
  CHECK(cells[16].instance == "gpt3-1.3b/dgx-a100-80gb/1n/b64");
  CHECK(cells[20].instance == "gpt3-2.7b/dgx-a100-80gb/2n/b64");
  REQUIRE(cells[0].options.size() == 3);
  CHECK(cells[0].options[0] == std::pair<std::string, std::string>("iterations", "1"));
  CHECK(cells[0].options[2] == std::pair<std::string, std::string>("space.max_stages", "4"));
  // Keys differ between cells and do not depend on comments or layout.
  std::set<std::string> keys;
  for (const ExperimentCell& c : cells) keys.insert(c.key);
  CHECK(keys.size() == cells.size());
  const ExperimentSpec same = ParseExperimentSpec(std::string("# a comment\n") + kSpec, "other.toml");
  CHECK(same.Hash() == spec.Hash());
  std::string changed = kSpec;
  changed.replace(changed.find("seeds = [0, 7]"), 14, "seeds = [0, 8]");
  CHECK(ParseExperimentSpec(changed, "spec.toml").Hash() != spec.Hash());
  // Every cell's problem builds.
  const CellProblem cp = BuildCellProblem(cells[4].problem);
  CHECK(cp.problem.NumDevices() == 16);
  CHECK(cp.problem.training.global_batch_size == 64);
}

TEST_CASE("experiment spec: generated families expand per layer count and instance seed, and seed "
          "cases fix their own search space") {
  const ExperimentSpec spec = ParseExperimentSpec(R"(
[[family]]
generator = "nonuniform"
layers = [32, 48]
instances = 3
clusters = ["p3.16xlarge"]
nodes = [2]
[[family]]
generator = "operator"
models = ["gpt3-1.3b"]
clusters = ["dgx-a100-80gb"]
[[family]]
generator = "seed-cases"
rows = [0, 2]
[[searcher]]
algorithm = "dp"
)", "gen.toml");
  const std::vector<ExperimentCell> cells = spec.Expand();
  REQUIRE(cells.size() == 6 + 1 + 2);
  CHECK(cells[0].instance == "L32-s0/p3.16xlarge/2n/b512");
  CHECK(cells[5].instance == "L48-s2/p3.16xlarge/2n/b512");
  CHECK(BuildCellProblem(cells[0].problem).problem.NumLayers() == 32);
  CHECK(BuildCellProblem(cells[5].problem).problem.NumLayers() == 48);
  CHECK(BuildCellProblem(cells[6].problem).problem.NumLayers() >
        BuildCellProblem(ParseExperimentSpec(R"(
[[family]]
models = ["gpt3-1.3b"]
clusters = ["dgx-a100-80gb"]
[[searcher]]
algorithm = "dp"
)", "block.toml").Expand()[0].problem).problem.NumLayers());
  const CellProblem seed_case = BuildCellProblem(cells[7].problem);
  CHECK(seed_case.space.min_stages == seed_case.space.max_stages);
  CHECK(cells[7].instance.rfind("case0-", 0) == 0);
}

TEST_CASE("experiment spec: nodes per node group of a heterogeneous cluster") {
  const ExperimentSpec spec = ParseExperimentSpec(R"(
[[family]]
models = ["gpt3-1.3b"]
clusters = ["dgx-h100-a100"]
nodes = ["h100=2,a100=1", 3]
global_batches = [64]
[[searcher]]
algorithm = "dp"
)",
                                                 "spec.toml");
  const std::vector<ExperimentCell> cells = spec.Expand();
  REQUIRE(cells.size() == 2);
  CHECK(cells[0].instance == "gpt3-1.3b/dgx-h100-a100/h100=2,a100=1/b64");
  CHECK(cells[1].instance == "gpt3-1.3b/dgx-h100-a100/3n/b64");
  const Problem problem = BuildCellProblem(cells[0].problem).problem;
  CHECK(problem.cluster.Group(0).count == 2);
  CHECK(problem.cluster.Group(1).count == 1);
  CHECK(BuildCellProblem(cells[1].problem).problem.cluster.Group(0).count == 3);
}

TEST_CASE("experiment spec: a family's training table sets how its problems train") {
  const ExperimentSpec spec = ParseExperimentSpec(R"(
[[family]]
name = "buckets"
models = ["gpt3-1.3b"]
clusters = ["dgx-a100-80gb"]
nodes = [2]
[family.training]
dp_overlap = 1
dp_bucket_MiB = 25
tp_comm_overlap = 0.5
pp_comm_overlap = 1
sequence_parallel = false
zero_reduce_every_microbatch = false
zero3_gather = "layer"
[[family]]
name = "plain"
models = ["gpt3-1.3b"]
clusters = ["dgx-a100-80gb"]
nodes = [2]
[[family]]
generator = "nonuniform"
layers = [8]
instances = 1
clusters = ["p3.16xlarge"]
training = { dp_bucket_MiB = 4 }
[[searcher]]
algorithm = "dp"
)", "spec.toml");
  const std::vector<ExperimentCell> cells = spec.Expand();
  REQUIRE(cells.size() == 3);
  const TrainingSpec t = BuildCellProblem(cells[0].problem).problem.training;
  CHECK(t.dp_overlap_fraction == 1.0);
  CHECK(t.dp_bucket_bytes == 25.0 * 1024 * 1024);
  CHECK(t.tp_comm_overlap_fraction == 0.5);
  CHECK(t.pp_comm_overlap_fraction == 1.0);
  CHECK_FALSE(t.sequence_parallel);
  CHECK_FALSE(t.zero_reduce_every_microbatch);
  CHECK(t.zero3_gather == Zero3Gather::kLayer);
  // A family without the table trains with the defaults, and its cells' keys do not name it
  // (results of specs written before the table keep their keys).
  const TrainingSpec defaults;
  const TrainingSpec plain = BuildCellProblem(cells[1].problem).problem.training;
  CHECK(plain.dp_bucket_bytes == defaults.dp_bucket_bytes);
  CHECK(plain.sequence_parallel == defaults.sequence_parallel);
  CHECK_FALSE(cells[1].problem.contains("training"));
  CHECK(cells[0].key != cells[1].key);
  CHECK(BuildCellProblem(cells[2].problem).problem.training.dp_bucket_bytes == 4.0 * 1024 * 1024);
  // Families tell apart instances of the same name.
  CHECK(cells[0].instance == cells[1].instance);
  TrainingSpec direct;
  ApplyFamilyTraining({{"dp_bucket_MiB", 1}}, &direct);
  CHECK(direct.dp_bucket_bytes == 1024.0 * 1024);
  CHECK_THROWS_AS(ApplyFamilyTraining({{"dp_overlap", 2.0}}, &direct), InputError);
  CHECK_THROWS_AS(ApplyFamilyTraining({{"colour", 1}}, &direct), InputError);
}

TEST_CASE("experiment spec: errors name the file, the key, the value and the rule") {
  const std::string searcher = "\n[[searcher]]\nalgorithm = \"dp\"\n";
  const std::string family =
      "[[family]]\nmodels = [\"gpt3-1.3b\"]\nclusters = [\"dgx-a100-80gb\"]\n";
  CHECK(SpecError("colour = 1\n" + family + searcher) ==
        "spec.toml: colour: unknown key (known keys: experiment, family, searcher)");
  CHECK(SpecError("[[family]]\nmodels = [\"gpt3-1.3b\"]\nclusters = [\"dgx-a100-80gb\"]\nnodez = "
                  "[1]\n" + searcher)
            .find("spec.toml: family[0].nodez: unknown key") == 0);
  CHECK(SpecError(family + "[[searcher]]\nalgorithm = \"annealing\"\n") ==
        "spec.toml: searcher[0].algorithm = \"annealing\": unknown algorithm (known: relax, dp, "
        "ilp, mcmc, grid, local, exhaustive, all)");
  CHECK(SpecError(family + "[[searcher]]\nalgorithm = \"relax\"\noptions = { iteratons = 3 }\n")
            .find("spec.toml: searcher[0].options: relax.iteratons = \"3\": unknown option") == 0);
  CHECK(SpecError(family + "[[searcher]]\nalgorithm = \"relax\"\noptions = { iterations = 2.5 }\n") ==
        "spec.toml: searcher[0].options: relax.iterations = \"2.5\": must be an integer");
  CHECK(SpecError(family + "[[searcher]]\nalgorithm = \"relax\"\noptions = { iterations = 0 }\n") ==
        "spec.toml: searcher[0].options: relax.iterations = 0: must be >= 1");
  CHECK(SpecError(family + "[[searcher]]\nalgorithm = \"dp\"\noptions = { space = { "
                           "min_stages = 0 } }\n")
            .find("spec.toml: searcher[0].options: ") == 0);
  CHECK(SpecError("[[family]]\nmodels = [\"gpt3-1.3b\"]\nclusters = [\"dgx-a100-80gb\"]\nnodes = "
                  "[0]\n" + searcher) ==
        "spec.toml: family[0].nodes = [ 0 ]: must be a non-empty list of node counts >= 1 or "
        "per-group counts such as \"a100=4,v100=8\"");
  CHECK(SpecError("[[family]]\nmodels = [\"gpt3-1.3b\"]\nclusters = [\"dgx-h100-a100\"]\nnodes = "
                  "[\"h100=2,b200=2\"]\n" + searcher)
            .find("names no node group \"b200\" (groups: \"h100\", \"a100\")") !=
        std::string::npos);
  CHECK(SpecError("[[family]]\nmodels = [\"gpt-99\"]\nclusters = [\"dgx-a100-80gb\"]\n" + searcher)
            .find("spec.toml: family[0] (\"family0\"): --model = gpt-99: not a file and not a zoo "
                  "model") == 0);
  CHECK(SpecError("[experiment]\ntime_limit_seconds = -1\n" + family + searcher) ==
        "spec.toml: experiment.time_limit_seconds = -1: must be > 0");
  CHECK(SpecError(family + searcher + searcher) ==
        "spec.toml: searcher[1].name = \"dp\": must be unique (name the variants of one algorithm "
        "apart)");
  CHECK(SpecError(family) == "spec.toml: searcher: missing required key");
  CHECK(SpecError(family + "training = { dp_overlap = 1.5 }\n" + searcher) ==
        "spec.toml: family[0].training.dp_overlap = 1.5: must be in [0, 1]");
  CHECK(SpecError(family + "training = { dp_bucket_MiB = -1 }\n" + searcher) ==
        "spec.toml: family[0].training.dp_bucket_MiB = -1: must be >= 0");
  const std::string gather_error =
      SpecError(family + "training = { zero3_gather = \"block\" }\n" + searcher);
  CHECK(gather_error.find("spec.toml: family[0].training.zero3_gather") == 0);
  CHECK(gather_error.find("must be \"tensor\", \"layer\" or \"layer-prefetch\"") !=
        std::string::npos);
  CHECK(SpecError(family + "training = { dp_overlap_fraction = 1 }\n" + searcher)
            .find("spec.toml: family[0].training.dp_overlap_fraction: unknown key") == 0);
  CHECK(SpecError(family + "training = 1\n" + searcher)
            .find("spec.toml: family[0].training = 1: must be a table") == 0);
  CHECK(SpecError("[[family]]\ngenerator = \"seed-cases\"\ntraining = { dp_overlap = 1 }\n" +
                  searcher)
            .find("spec.toml: family[0].training") == 0);
  CHECK(SpecError("[[family]]\ngenerator = \"nonuniform\"\nclusters = [\"p3.16xlarge\"]\n" +
                  searcher) == "spec.toml: family[0].layers: missing required key");
}

TEST_CASE("searcher options by name: every field is settable, typed, validated and recorded") {
  SearcherSetup relax("relax");
  relax.Set("relax.iterations", "60", "t");
  relax.Set("learning_rate", "0.5", "t");  // unqualified = the searcher's own
  relax.Set("relax.polish", "none", "t");
  relax.Set("space.max_stages", "4", "t");
  relax.Set("space.recompute", "none,full", "t");
  relax.Set("search.max_evaluations", "1000", "t");
  relax.Validate("t");
  const nlohmann::json json = relax.ToJson();
  CHECK(json["algorithm"] == "relax");
  CHECK(json["options"]["relax.iterations"] == 60);
  CHECK(json["options"]["relax.learning_rate"] == 0.5);
  CHECK(json["options"]["relax.polish"] == "none");
  CHECK(json["options"]["space.max_stages"] == 4);
  CHECK(json["options"]["space.recompute"] == "none,full");
  CHECK(relax.search_options().max_evaluations == 1000);
  CHECK(relax.search_options().space.recompute.size() == 2);
  const std::unique_ptr<Searcher> made = relax.MakeSearcher();
  const auto* kept = dynamic_cast<const RelaxSearcher*>(made.get());
  REQUIRE(kept != nullptr);
  CHECK(kept->relax_options().iterations == 60);
  CHECK(kept->relax_options().polish == RelaxOptions::Polish::kNone);
  // With interleaved plans in the space, the searcher is wrapped to offer them.
  relax.Set("space.virtual_stages", "4,1,2,2", "t");
  CHECK(relax.search_options().space.virtual_stages == std::vector<int>{1, 2, 4});
  CHECK(relax.search_options().space.OffersInterleaving());
  CHECK(relax.ToJson()["options"]["space.virtual_stages"] == "1,2,4");
  CHECK(dynamic_cast<const InterleavingSearcher*>(relax.MakeSearcher().get()) != nullptr);
  CHECK(ErrorOf([&] { relax.Set("space.virtual_stages", "0", "w"); relax.Validate("w"); }) ==
        "w: space.virtual_stages = 0: every entry must be >= 1");
  relax.Set("space.virtual_stages", "1", "t");
  CHECK_FALSE(relax.search_options().space.OffersInterleaving());

  CHECK(ErrorOf([&] { relax.Set("relax.iterations", "many", "--option relax.iterations=many"); }) ==
        "--option relax.iterations=many: relax.iterations = \"many\": must be an integer");
  CHECK(ErrorOf([&] { relax.Set("relax.iterations", "99999999999", "w"); })
            .find("w: relax.iterations = \"99999999999\": out of range") == 0);
  CHECK(ErrorOf([&] { relax.Set("relax.learning_rate", "inf", "w"); }) ==
        "w: relax.learning_rate = \"inf\": must be finite");
  CHECK(ErrorOf([&] { relax.Set("relax.gumbel_noise", "yes", "w"); }) ==
        "w: relax.gumbel_noise = \"yes\": must be true or false");
  CHECK(ErrorOf([&] { relax.Set("mcmc.beta", "3", "w"); }).find("w: mcmc.beta = \"3\": unknown option") == 0);
  relax.Set("relax.restarts", "0", "w");
  CHECK(ErrorOf([&] { relax.Validate("w"); }) == "w: relax.restarts = 0: must be >= 1");

  // Every option struct's rules name the option as it is written here.
  SearcherSetup dp("dp");
  dp.Set("space.min_stages", "0", "w");
  CHECK(ErrorOf([&] { dp.Validate("command line"); }) ==
        "command line: space.min_stages = 0: must be >= 1");
  SearcherSetup mcmc("mcmc");
  mcmc.Set("search.threads", "0", "w");
  CHECK(ErrorOf([&] { mcmc.Validate("command line"); }) ==
        "command line: search.threads = 0: must be >= 1");
  mcmc.Set("search.threads", "1", "w");
  mcmc.Set("mcmc.restart_patience", "0", "w");
  CHECK(ErrorOf([&] { mcmc.Validate("command line"); }) ==
        "command line: mcmc.restart_patience = 0: must be >= 1");

  SearcherSetup local("local");
  local.Set("local.starts", "3", "t");
  CHECK(local.ToJson()["options"]["local.starts"] == 3);
  CHECK(ErrorOf([] { SearcherSetup("annealing"); }).find("--algo = annealing: unknown algorithm") !=
        std::string::npos);
}

TEST_CASE("--algo names expand in order, each once, with all standing for every searcher") {
  CHECK(ExpandAlgorithms({"dp", "grid", "dp"}) == std::vector<std::string>{"dp", "grid"});
  CHECK(ExpandAlgorithms({"all"}) == SearcherNames());
  std::vector<std::string> grid_first = {"grid"};
  for (const std::string& name : SearcherNames())
    if (name != "grid") grid_first.push_back(name);
  CHECK(ExpandAlgorithms({"grid", "all"}) == grid_first);
  CHECK(ErrorOf([] { ExpandAlgorithms({"annealing"}); }).find("--algo = annealing: unknown algorithm") !=
        std::string::npos);
  CHECK(ErrorOf([] { ExpandAlgorithms({}); }) == "command line: --algo = \"\": names no algorithm");
}

TEST_CASE("searcher options by name: --option assignments reach the searchers they name") {
  std::vector<std::unique_ptr<SearcherSetup>> setups;
  setups.push_back(std::make_unique<SearcherSetup>("relax"));
  setups.push_back(std::make_unique<SearcherSetup>("dp"));
  ApplyOptionAssignments({"relax.iterations=7", "space.max_stages=3"}, setups);
  CHECK(setups[0]->ToJson()["options"]["relax.iterations"] == 7);
  CHECK(setups[0]->search_options().space.max_stages == 3);
  CHECK(setups[1]->search_options().space.max_stages == 3);
  CHECK(ErrorOf([&] { ApplyOptionAssignments({"mcmc.beta=3"}, setups); }) ==
        "command line: --option mcmc.beta=3: mcmc is not among the searchers run (--algo)");
  CHECK(ErrorOf([&] { ApplyOptionAssignments({"iterations"}, setups); })
            .find("command line: --option: \"iterations\": must be name=value") == 0);
}

TEST_CASE("experiment cell: a searcher that declines the problem gets status declined") {
  const std::filesystem::path dir = testing::ScratchDir("declined_cell");
  const std::string spec_path = (dir / "spec.toml").string();
  // Exhaustive with a budget of 10 plans declines GPT-3 1.3B on 8 GPUs.
  std::ofstream(spec_path) << "[[family]]\nmodels = [\"gpt3-1.3b\"]\nclusters = [\"dgx-a100-80gb\"]\n"
                              "nodes = [1]\nglobal_batches = [64]\n[[searcher]]\n"
                              "algorithm = \"exhaustive\"\noptions = { search = { max_evaluations = 10 } }\n";
  const std::vector<ExperimentCell> cells = ReadExperimentSpec(spec_path).Expand();
  REQUIRE(cells.size() == 1);
  const std::string out = (dir / "cell.json").string();
  CHECK(RunExperimentCell(spec_path, 0, StableHash(cells[0].key), out) == 0);
  std::ifstream in(out);
  const nlohmann::json result = nlohmann::json::parse(in);
  CHECK(result["status"] == "declined");
  CHECK(result["termination"] == "declined");
  CHECK(result["message"].get<std::string>().find("problem too large for exhaustive search") == 0);
  CHECK(ResultsCsvRow(result).find(",declined,declined,") != std::string::npos);
}

TEST_CASE("experiment spec paths: a file, or a shipped spec by name from the data directory") {
  CHECK(ResolveSpecPath("ladder") == DataPath("experiments/specs/ladder.toml"));
  CHECK(ResolveSpecPath(DataPath("experiments/specs/scale.toml")) ==
        DataPath("experiments/specs/scale.toml"));
  CHECK(ResolveSpecPath("no-such-spec") == "no-such-spec");
  // The overlap spec's second family trains with Megatron-Core's overlaps, its first as by default.
  const ExperimentSpec overlap = ReadExperimentSpec(ResolveSpecPath("training-overlap"));
  REQUIRE(overlap.families.size() == 2);
  CHECK(overlap.families[0].training.empty());
  CHECK(overlap.families[1].training.at("dp_bucket_MiB") == 40);
  const TrainingSpec last = BuildCellProblem(overlap.Expand().back().problem).problem.training;
  CHECK(last.tp_comm_overlap_fraction == 1.0);
  CHECK(ErrorOf([] { ReadExperimentSpec(ResolveSpecPath("no-such-spec")); }).find("no-such-spec") !=
        std::string::npos);
}

TEST_CASE("every shipped experiment spec reads and expands into cells whose problems build") {
  int specs = 0;
  for (const auto& entry : std::filesystem::directory_iterator(DataPath("experiments/specs"))) {
    if (entry.path().extension() != ".toml") continue;
    CAPTURE(entry.path().string());
    const ExperimentSpec spec = ReadExperimentSpec(entry.path().string());
    CHECK(spec.name == entry.path().stem().string());
    const std::vector<ExperimentCell> cells = spec.Expand();
    CHECK(!cells.empty());
    // Each family's first cell: its model, cluster and training resolve.
    std::set<std::string> families;
    for (const ExperimentCell& cell : cells)
      if (families.insert(cell.family).second) CHECK_NOTHROW(BuildCellProblem(cell.problem));
    ++specs;
  }
  CHECK(specs >= 7);
}

TEST_CASE("WriteFileAtomically: concurrent writers of one file each succeed, the file is one "
          "of their texts, and no temporary is left") {
  const std::filesystem::path dir = testing::ScratchDir("atomic_writes");
  const std::string path = (dir / "same.json").string();
  std::vector<std::thread> writers;
  std::atomic<int> failures{0};
  for (int w = 0; w < 8; ++w)
    writers.emplace_back([&, w] {
      for (int i = 0; i < 25; ++i) {
        try {
          WriteFileAtomically(path, std::string(1000 + w, static_cast<char>('a' + w)));
        } catch (const InputError&) {
          ++failures;
        }
      }
    });
  for (std::thread& writer : writers) writer.join();
  CHECK(failures == 0);
  const std::string text = ReadTextFile(path);
  REQUIRE(text.size() >= 1000);
  CHECK(text == std::string(text.size(), text[0]));
  CHECK(text.size() == 1000 + static_cast<size_t>(text[0] - 'a'));
  int files = 0;
  for (const auto& entry : std::filesystem::directory_iterator(dir)) {
    (void)entry;
    ++files;
  }
  CHECK(files == 1);
}

TEST_CASE("OutputSet: Commit replaces the whole set (entries this run did not write go), keeps "
          "other files; without Commit the directory keeps what it had") {
  namespace fs = std::filesystem;
  const fs::path dir = testing::ScratchDir("output_set");
  auto count = [](const fs::path& d) {
    int n = 0;
    for (const auto& entry : fs::directory_iterator(d)) {
      (void)entry;
      ++n;
    }
    return n;
  };
  {  // An earlier run: summary and two plans, and a file of the user's.
    OutputSet first(dir.string(), {"plans", "summary.json"});
    EnsureDirectory(first.Path("plans"));
    WriteFileAtomically(first.Path("plans") + "/dp.json", "dp");
    WriteFileAtomically(first.Path("plans") + "/grid.json", "grid");
    WriteFileAtomically(first.Path("summary.json"), "first");
    first.Commit();
  }
  WriteFileAtomically((dir / "notes.txt").string(), "mine");
  CHECK(ReadTextFile((dir / "summary.json").string()) == "first");
  CHECK(count(dir / "plans") == 2);
  {  // A run that fails before committing: nothing changes, no staging is left.
    OutputSet failed(dir.string(), {"plans", "summary.json"});
    WriteFileAtomically(failed.Path("summary.json"), "failed");
  }
  CHECK(ReadTextFile((dir / "summary.json").string()) == "first");
  CHECK(count(dir) == 3);
  {  // A run with no plans: the earlier plans go with the earlier summary.
    OutputSet second(dir.string(), {"plans", "summary.json"});
    EnsureDirectory(second.Path("plans"));
    WriteFileAtomically(second.Path("summary.json"), "second");
    CHECK_THROWS_AS(second.Path("traces"), InternalError);
    second.Commit();
  }
  CHECK(ReadTextFile((dir / "summary.json").string()) == "second");
  CHECK(count(dir / "plans") == 0);
  CHECK(ReadTextFile((dir / "notes.txt").string()) == "mine");
  CHECK(count(dir) == 3);  // plans, summary.json, notes.txt: no staging directory
}

}  // namespace stratos
