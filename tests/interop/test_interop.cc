// Export and import (interop/interop.h): golden files per target for a uniform, an uneven-stage,
// an interleaved and a recompute plan; export then import gives back the same plan and
// estimate; every refusal names the stage, the value and the target's rule.
// STRATOS_UPDATE_GOLDEN=1 rewrites the golden files (review the diff before committing).
#include <doctest/doctest.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "costmodel/cluster_io.h"
#include "costmodel/data_dir.h"
#include "costmodel/error.h"
#include "costmodel/evaluate.h"
#include "costmodel/model_io.h"
#include "costmodel/zoo.h"
#include "interop/interop.h"
#include "interop/targets.h"
#include "tests/costmodel/test_util.h"
#include "tests/scratch_dir.h"

namespace stratos {
namespace {

using testing::Contains;
using testing::InputErrorMessage;

constexpr Target kTargets[] = {Target::kMegatron, Target::kDeepSpeed, Target::kTorchtitan,
                               Target::kTorchPipelining};

// Llama-3-8B on 2 DGX H100 nodes, global batch 16: the running example of ../shared/formats.
Problem ExampleProblem(const std::string& model = "llama3-8b") {
  Problem problem;
  problem.model = ReadModelFile(ResolveModelPath(model), model == "llama3-8b" ? 4096 : 0);
  problem.cluster = ReadClusterFile(ResolveClusterPath("dgx-h100")).WithNodes(2);
  problem.training.global_batch_size = 16;
  return problem;
}

// Stages with the given transformer blocks (embedding with the first, head with the last), one
// configuration: dp x tp devices per rank.
Plan BlocksPlan(const Problem& problem, const std::vector<int>& blocks, int v, int dp, int tp,
                int zero, Recompute recompute, int m) {
  Plan plan;
  plan.global_batch_size = problem.training.global_batch_size;
  plan.num_microbatches = m;
  plan.virtual_stages = v;
  StageConfig config;
  config.data_parallel = dp;
  config.tensor_parallel = tp;
  config.zero_stage = zero;
  config.recompute = recompute;
  REQUIRE(SetMeshForDevices(config, dp * tp, problem.cluster.GpusPerNode()));
  int next = 0;
  for (size_t i = 0; i < blocks.size(); ++i) {
    const int first = next;
    next += blocks[i] + (i == 0) + (i + 1 == blocks.size());
    plan.stages.push_back({first, next, config});
  }
  return plan;
}

struct Case {
  const char* name;
  Plan plan;
};

std::vector<Case> GoldenCases(const Problem& problem) {
  return {
      {"uniform", BlocksPlan(problem, {8, 8, 8, 8}, 1, 2, 2, 1, Recompute::kNone, 8)},
      {"uneven", BlocksPlan(problem, {7, 9, 9, 7}, 1, 2, 2, 1, Recompute::kNone, 8)},
      {"interleaved",
       BlocksPlan(problem, {3, 4, 4, 4, 4, 4, 4, 5}, 2, 2, 2, 1, Recompute::kSelective, 8)},
      {"recompute", BlocksPlan(problem, {16, 16}, 1, 1, 8, 0, Recompute::kFull, 16)},
  };
}

std::string ReadText(const std::string& path) {
  std::ifstream in(path);
  std::stringstream buffer;
  buffer << in.rdbuf();
  return buffer.str();
}

void CheckGolden(const std::string& path, const std::string& text) {
  if (std::getenv("STRATOS_UPDATE_GOLDEN") != nullptr) {
    std::filesystem::create_directories(std::filesystem::path(path).parent_path());
    std::ofstream(path) << text;
    return;
  }
  INFO("golden file: ", path, " (STRATOS_UPDATE_GOLDEN=1 rewrites it)");
  REQUIRE(std::filesystem::exists(path));
  CHECK(ReadText(path) == text);
}

// The plan `target` runs for `plan`: itself, or the nearest one when it is refused (then
// `refusal` holds the message and the changes).
Plan RunnablePlan(const Problem& problem, const Plan& plan, Target target, std::string& refusal) {
  refusal.clear();
  try {
    LayoutForTarget(problem, plan, target, "plan.json");
    return plan;
  } catch (const InputError& e) {
    refusal = std::string(e.what()) + "\n";
  }
  const NearestPlan nearest = NearestPlanForTarget(problem, plan, target, "plan.json");
  for (const std::string& change : nearest.changes) refusal += "nearest: " + change + "\n";
  return nearest.plan;
}

}  // namespace

TEST_CASE("exports match the golden files (nearest plan where the target refuses)") {
  const Problem problem = ExampleProblem();
  for (const Case& c : GoldenCases(problem)) {
    ValidatePlan(problem, c.plan, c.name);
    for (Target target : kTargets) {
      const std::string dir =
          fmt::format("tests/interop/golden/{}/{}/", c.name, TargetName(target));
      std::string refusal;
      const Plan plan = RunnablePlan(problem, c.plan, target, refusal);
      for (const ExportFile& file : ExportPlan(problem, plan, target, "plan.json"))
        CheckGolden(dir + file.name, file.text);
      if (!refusal.empty()) CheckGolden(dir + "refused.txt", refusal);
      CHECK(std::filesystem::exists(dir + "refused.txt") == !refusal.empty());
    }
  }
}

TEST_CASE("the running example of ../shared/formats comes out as written there") {
  const Problem problem = ExampleProblem();
  const Plan plan = GoldenCases(problem)[2].plan;  // interleaved
  const std::string megatron = ExportPlan(problem, plan, Target::kMegatron, "p")[0].text;
  CHECK(Contains(megatron, "--pipeline-model-parallel-layout \"Et*3|t*4|t*4|t*4|t*4|t*4|t*4|t*5L\""));
  CHECK(Contains(megatron, "--use-distributed-optimizer"));
  CHECK(Contains(megatron, "--recompute-granularity selective"));
  const std::vector<ExportFile> torch = ExportPlan(problem, plan, Target::kTorchPipelining, "p");
  CHECK(torch[0].text ==
        ReadText(SharedDataPath("../formats/torch_pp_schedule_interleaved1f1b_pp4_v2_m8.csv")));
}

TEST_CASE("export then import gives back the same plan and estimate") {
  const Problem problem = ExampleProblem();
  for (const Case& c : GoldenCases(problem))
    for (Target target : {Target::kMegatron, Target::kDeepSpeed, Target::kTorchtitan}) {
      INFO(c.name, " via ", TargetName(target));
      std::string refusal;
      const Plan plan = RunnablePlan(problem, c.plan, target, refusal);
      const std::string dir = testing::ScratchDir(fmt::format("interop_{}", TargetName(target)));
      std::string entry;
      for (const ExportFile& file : ExportPlan(problem, plan, target, "plan.json")) {
        std::ofstream(dir + "/" + file.name) << file.text;
        if (entry.empty() || file.name.find(".sh") != std::string::npos) entry = file.name;
      }
      const ImportedConfig imported = ImportConfig(target, dir + "/" + entry, 0);
      Problem back = problem;
      back.model = imported.model;  // the configuration's own shape
      REQUIRE(!back.model.family.empty());
      if (back.model.max_position_embeddings == 0)
        back.model.max_position_embeddings = problem.model.max_position_embeddings;
      BuildTransformerLayers(back.model);
      CHECK(back.model.ParameterCount() == problem.model.ParameterCount());
      if (target == Target::kTorchtitan) back.model.seq_length = problem.model.seq_length;
      const Plan again = PlanFromLayout(back, imported.layout, entry);
      CHECK(PlanToJson(again) == PlanToJson(plan));
      CHECK(Evaluate(back, again).iteration_seconds ==
            doctest::Approx(Evaluate(problem, plan).iteration_seconds).epsilon(1e-12));
      CHECK(imported.world_known == (target != Target::kTorchtitan));
    }
}

TEST_CASE("every refusal names the stage or key, the value and the target's rule") {
  const Problem problem = ExampleProblem();
  const Plan uniform = GoldenCases(problem)[0].plan;
  auto refusal = [&](const Plan& plan, Target target, const Problem& p) {
    return InputErrorMessage([&] { ExportPlan(p, plan, target, "plan.json"); });
  };
  Plan mixed = uniform;
  mixed.stages[2].config.tensor_parallel = 4;
  mixed.stages[2].config.data_parallel = 1;
  std::string m = refusal(mixed, Target::kMegatron, problem);
  CHECK(Contains(m, "plan.json: stages[2].data_parallel = 1: megatron runs one configuration in "
                    "every pipeline stage (stage 0 has 2)"));

  Plan compressed = uniform;
  for (StagePlan& s : compressed.stages) s.config.grad_compression.kind = GradCompression::kBf16;
  CHECK(Contains(refusal(compressed, Target::kMegatron, problem),
                 "stages[0].grad_compression = bf16: megatron has no DP gradient compression"));

  Plan gpipe = uniform;
  gpipe.schedule = Schedule::kGpipe;
  CHECK(Contains(refusal(gpipe, Target::kDeepSpeed, problem),
                 "schedule = gpipe: deepspeed runs 1F1B"));
  CHECK_NOTHROW(ExportPlan(problem, gpipe, Target::kTorchPipelining, "plan.json"));

  Plan zero3 = uniform;
  for (StagePlan& s : zero3.stages) s.config.zero_stage = 3;
  CHECK(Contains(refusal(zero3, Target::kMegatron, problem),
                 "stages[0].zero_stage = 3: megatron shards only the optimizer state"));
  CHECK(Contains(refusal(zero3, Target::kDeepSpeed, problem),
                 "stages[0].zero_stage = 3: deepspeed's pipeline engine runs ZeRO stages 0 and 1"));
  CHECK(Contains(refusal(uniform, Target::kTorchtitan, problem),
                 "stages[0].zero_stage = 1: torchtitan shards with FSDP2"));

  const Plan interleaved = GoldenCases(problem)[2].plan;
  CHECK(Contains(refusal(interleaved, Target::kDeepSpeed, problem),
                 "virtual_stages = 2: deepspeed's pipeline engine has no interleaved schedule"));
  const Plan uneven = GoldenCases(problem)[1].plan;
  CHECK(Contains(refusal(uneven, Target::kDeepSpeed, problem),
                 "stages[1] = 9 blocks: deepspeed partitions the blocks evenly"));

  // 3 ranks of 4 GPUs: 12 devices are not whole 8-GPU nodes.
  const Plan twelve = BlocksPlan(problem, {10, 11, 11}, 1, 1, 4, 0, Recompute::kNone, 16);
  CHECK(Contains(refusal(twelve, Target::kMegatron, problem),
                 "stages = 12 devices in all: megatron starts the same number of processes on "
                 "every node"));

  const Problem gpt = ExampleProblem("gpt3-1.3b");
  const Plan gpt_plan = BlocksPlan(gpt, {12, 12}, 1, 2, 4, 0, Recompute::kNone, 8);
  CHECK_NOTHROW(ExportPlan(gpt, gpt_plan, Target::kMegatron, "plan.json"));
  CHECK(Contains(refusal(gpt_plan, Target::kTorchtitan, gpt),
                 "model = gpt3-1.3b: torchtitan trains its registered llama3 flavors"));
  Problem bert = ExampleProblem("bert-large");
  CHECK(Contains(InputErrorMessage([&] {
                   LayoutForTarget(bert, Plan{}, Target::kMegatron, "plan.json");
                 }),
                 "model.family = bert: megatron exports decoder-only transformers"));
}

TEST_CASE("the nearest plan a target runs: one configuration, the target's ZeRO, even cuts") {
  const Problem problem = ExampleProblem();
  Plan mixed = GoldenCases(problem)[1].plan;  // uneven, ZeRO-1
  mixed.stages[3].config.recompute = Recompute::kFull;
  const NearestPlan megatron = NearestPlanForTarget(problem, mixed, Target::kMegatron, "p");
  CHECK(!megatron.changes.empty());
  CHECK(Evaluate(problem, megatron.plan).Fits());
  CHECK_NOTHROW(LayoutForTarget(problem, megatron.plan, Target::kMegatron, "p"));
  // The cuts are kept where the target has a layout flag.
  for (int s = 0; s < 4; ++s) CHECK(megatron.plan.stages[s].first_layer == mixed.stages[s].first_layer);
  const NearestPlan deepspeed = NearestPlanForTarget(problem, mixed, Target::kDeepSpeed, "p");
  CHECK(Contains(deepspeed.changes.front(), "stages: [8|9|9|8] -> [9|8|8|9] layers"));
  const NearestPlan titan = NearestPlanForTarget(problem, mixed, Target::kTorchtitan, "p");
  CHECK(titan.plan.stages[0].config.zero_stage == 2);
  CHECK_NOTHROW(ExportPlan(problem, titan.plan, Target::kTorchtitan, "p"));
}

TEST_CASE("launch scripts split into words as bash would, with simple variables") {
  const std::vector<std::string> words = ShellWords(
      "NNODES=${NNODES:-2}  # nodes\n"
      "ARGS=(\n  --nnodes $NNODES \\\n  --layout \"Et*3|t\" # comment\n  --name 'a b'\n)\n"
      "run ${ARGS[@]} --x=${UNSET:-7}\n");
  const std::map<std::string, std::string> flags = FlagValues(words);
  CHECK(flags.at("--nnodes") == "2");
  CHECK(flags.at("--layout") == "Et*3|t");
  CHECK(flags.at("--name") == "a b");
  CHECK(flags.at("--x") == "7");
}

TEST_CASE("imports refuse what stratos plans cannot hold, naming file, flag or key and rule") {
  const std::string dir = testing::ScratchDir("interop_import");
  std::ofstream(dir + "/cp.sh") << "torchrun --nnodes 1 --nproc_per_node 8 pretrain_gpt.py "
                                   "--num-layers 32 --context-parallel-size 2\n";
  CHECK(Contains(InputErrorMessage([&] { ImportConfig(Target::kMegatron, dir + "/cp.sh", 0); }),
                 "cp.sh: --context-parallel-size = 2: stratos plans have no context"));
  std::ofstream(dir + "/layout.sh")
      << "--num-layers 8 --pipeline-model-parallel-size 2 --pipeline-model-parallel-layout "
         "\"Et*4|t*3mL\"\n";
  CHECK(Contains(InputErrorMessage([&] { ImportConfig(Target::kMegatron, dir + "/layout.sh", 8); }),
                 "'m' has no stratos equivalent"));
  std::ofstream(dir + "/repeat.sh")  // found by fuzz_import: std::stoi threw out_of_range
      << "--num-layers 8 --pipeline-model-parallel-layout \"Et*99999999999|tL\"\n";
  CHECK(Contains(InputErrorMessage([&] { ImportConfig(Target::kMegatron, dir + "/repeat.sh", 8); }),
                 "a repeat count must be at most 1048576"));
  std::ofstream(dir + "/hsdp.toml") << "[model]\nflavor = \"8B\"\n[training]\nlocal_batch_size = 1\n"
                                       "[parallelism]\ndata_parallel_replicate_degree = 2\n"
                                       "data_parallel_shard_degree = 4\n";
  CHECK(Contains(InputErrorMessage([&] { ImportConfig(Target::kTorchtitan, dir + "/hsdp.toml", 8); }),
                 "hsdp.toml: parallelism.data_parallel_replicate_degree = 2: HSDP"));
  // A rule broken through a key left at its default (found by fuzz_import: a null dereference).
  std::ofstream(dir + "/absent.toml")
      << "[model]\nflavor = \"8B\"\n[training]\nlocal_batch_size = 8\n[parallelism]\n"
         "pipeline_parallel_degree = 2\ndata_parallel_shard_degree = 1\n"
         "module_fqns_per_model_part = [[\"layers.0\"], [\"layers.1\"], [\"layers.2\"], "
         "[\"layers.3\"]]\n";
  CHECK(Contains(InputErrorMessage([&] { ImportConfig(Target::kTorchtitan, dir + "/absent.toml", 2); }),
                 "parallelism.pipeline_parallel_schedule = (absent): \"1F1B\" runs one stage per "
                 "rank, the config has 2"));
  std::ofstream(dir + "/ds.json") << R"({"train_batch_size": 16, "train_micro_batch_size_per_gpu": 1,
                                        "gradient_accumulation_steps": 8})";
  CHECK(Contains(InputErrorMessage([&] { ImportConfig(Target::kDeepSpeed, dir + "/ds.json", 16); }),
                 "ds.json: train_batch_size = 16: gives DP = 16 / (1 x 8) = 2"));
  const ImportedConfig dp_only = ImportConfig(Target::kDeepSpeed, dir + "/ds.json", 2);
  CHECK(dp_only.layout.data_parallel == 2);
  CHECK(dp_only.layout.micro_batch_size == 1);
  CHECK_THROWS_AS(ImportConfig(Target::kTorchPipelining, dir + "/ds.json", 2), InputError);
}

}  // namespace stratos

namespace stratos {

TEST_CASE("a plan over two node groups exports with the groups' order in the launch files") {
  Problem problem = ExampleProblem();
  problem.cluster = ReadClusterFile(ResolveClusterPath("dgx-h100-a100"));
  Plan plan = BlocksPlan(problem, {16, 16}, 1, 2, 4, 1, Recompute::kNone, 4);
  plan.stages[1].config.node_group = 1;
  const std::string note =
      "pipeline rank 0 on node group h100 (H100-SXM5-80GB); pipeline rank 1 on node group a100 "
      "(A100-SXM4-80GB): start the nodes of these groups in this order";
  CHECK(LayoutForTarget(problem, plan, Target::kMegatron, "p.json").placement_note == note);
  for (Target target : kTargets) {
    CAPTURE(TargetName(target));
    // The nearest plan the target runs keeps each stage's group.
    const Plan runnable = NearestPlanForTarget(problem, plan, target, "p.json").plan;
    CHECK(runnable.stages[1].config.node_group == 1);
    std::string all;
    for (const ExportFile& file : ExportPlan(problem, runnable, target, "p.json")) all += file.text;
    CHECK(Contains(all, note));
  }
  // Stages in one group: no note.
  plan.stages[1].config.node_group = 0;
  problem.cluster = problem.cluster.WithNodeCounts("h100=2");
  CHECK(LayoutForTarget(problem, plan, Target::kMegatron, "p.json").placement_note.empty());
  // Groups whose nodes differ in GPUs cannot share one launch.
  problem.cluster.node_groups[1].gpus_per_node = 4;
  plan = BlocksPlan(problem, {16, 16}, 1, 1, 4, 1, Recompute::kNone, 4);
  plan.stages[1].config.node_group = 1;
  CHECK(InputErrorMessage([&] { LayoutForTarget(problem, plan, Target::kMegatron, "p.json"); }) ==
        "p.json: stages[1].node_group = 1: megatron starts the same number of processes on every "
        "node: node group a100 has 4 GPUs per node, group h100 8");
}

TEST_CASE("Megatron-LM's bf16 training holds and reduces fp32 gradients: exports are priced so") {
  Problem problem = ExampleProblem();
  const TrainingSpec& priced = problem.training;
  REQUIRE(priced.param_dtype_bytes == 2);
  REQUIRE(priced.grad_dtype_bytes == 2);
  CHECK(TrainingForTarget(Target::kMegatron, priced).grad_dtype_bytes == 4);
  CHECK(Contains(TargetTrainingChange(Target::kMegatron, priced), "fp32"));
  for (Target target : {Target::kDeepSpeed, Target::kTorchtitan, Target::kTorchPipelining}) {
    CHECK(TrainingForTarget(target, priced).grad_dtype_bytes == 2);
    if (target != Target::kTorchtitan) CHECK(TargetTrainingChange(target, priced).empty());
  }
  // ZeRO-3's gathers as each runs them: DeepSpeed a parameter tensor at a time (the default),
  // torchtitan's FSDP2 a block at a time, prefetched.
  REQUIRE(priced.zero3_gather == Zero3Gather::kTensor);
  CHECK(TrainingForTarget(Target::kTorchtitan, priced).zero3_gather ==
        Zero3Gather::kLayerPrefetch);
  CHECK(Contains(TargetTrainingChange(Target::kTorchtitan, priced), "a layer at a time"));
  TrainingSpec fsdp = priced;
  fsdp.zero3_gather = Zero3Gather::kLayerPrefetch;
  CHECK(TrainingForTarget(Target::kDeepSpeed, fsdp).zero3_gather == Zero3Gather::kTensor);
  CHECK(Contains(TargetTrainingChange(Target::kDeepSpeed, fsdp), "a tensor at a time"));
  CHECK(TrainingForTarget(Target::kMegatron, fsdp).zero3_gather == Zero3Gather::kLayerPrefetch);
  TrainingSpec fp32 = priced;
  fp32.param_dtype_bytes = fp32.grad_dtype_bytes = 4;
  CHECK(TrainingForTarget(Target::kMegatron, fp32).grad_dtype_bytes == 4);
  CHECK(TargetTrainingChange(Target::kMegatron, fp32).empty());

  // The same plan as Megatron runs it: 2 more bytes per parameter each rank holds (ZeRO-0), and
  // a DP all-reduce of twice the bytes.
  const Plan plan = BlocksPlan(problem, {16, 16}, 1, 2, 4, 0, Recompute::kNone, 8);
  const Estimate as_priced = Evaluate(problem, plan);
  Problem megatron = problem;
  megatron.training = TrainingForTarget(Target::kMegatron, problem.training);
  const Estimate as_run = Evaluate(megatron, plan);
  for (size_t s = 0; s < plan.stages.size(); ++s) {
    double params = 0;
    for (int l = plan.stages[s].first_layer; l < plan.stages[s].last_layer; ++l)
      params += problem.model.layers[l].stored_param_count / 4;  // TP 4
    CHECK(as_run.stages[s].terms.state_bytes ==
          doctest::Approx(as_priced.stages[s].terms.state_bytes + 2 * params).epsilon(1e-12));
    CHECK(as_run.stages[s].terms.dp_sync_seconds > as_priced.stages[s].terms.dp_sync_seconds);
  }
}

TEST_CASE("Megatron-LM's --overlap-grad-reduce: DP gradient buckets read and written back") {
  const std::string dir = testing::ScratchDir("interop_buckets");
  const std::string base =
      "torchrun --nnodes 2 --nproc_per_node 8 pretrain_gpt.py --num-layers 32 "
      "--tensor-model-parallel-size 2 --pipeline-model-parallel-size 2 --micro-batch-size 1 "
      "--global-batch-size 16 --use-distributed-optimizer";
  std::ofstream(dir + "/plain.sh") << base << "\n";
  std::ofstream(dir + "/default.sh") << base << " --overlap-grad-reduce --overlap-param-gather\n";
  std::ofstream(dir + "/sized.sh") << base << " --overlap-grad-reduce --ddp-bucket-size 1000\n";
  std::ofstream(dir + "/gather_only.sh") << base << " --overlap-param-gather\n";
  const ImportedConfig plain = ImportConfig(Target::kMegatron, dir + "/plain.sh", 0);
  CHECK(plain.dp_bucket_params == 0);
  CHECK_FALSE(plain.overlap_param_gather);
  // DP = 16 / (2 x 2) = 4: Megatron-Core's default max(40M, 1M x 4).
  const ImportedConfig by_default = ImportConfig(Target::kMegatron, dir + "/default.sh", 0);
  CHECK(by_default.dp_bucket_params == 40e6);
  CHECK(by_default.overlap_param_gather);
  CHECK(ImportConfig(Target::kMegatron, dir + "/sized.sh", 0).dp_bucket_params == 1000);
  // The all-gather overlap needs the bucketed reduction (Megatron's rule).
  CHECK_FALSE(ImportConfig(Target::kMegatron, dir + "/gather_only.sh", 0).overlap_param_gather);

  // Exported: the bucket in parameters of the priced gradients' dtype, and the all-gather
  // overlap where the plan is priced with it hidden.
  Problem problem = ExampleProblem();
  problem.training = TrainingForTarget(Target::kMegatron, problem.training);
  problem.training.dp_bucket_bytes = 160e6;
  problem.training.dp_overlap_fraction = 1.0;
  const Plan plan = BlocksPlan(problem, {16, 16}, 1, 2, 4, 1, Recompute::kNone, 8);
  const std::string script = ExportPlan(problem, plan, Target::kMegatron, "test").front().text;
  CHECK(Contains(script, "--overlap-grad-reduce"));
  CHECK(Contains(script, "--ddp-bucket-size 40000000"));
  CHECK(Contains(script, "--overlap-param-gather"));
  problem.training.dp_bucket_bytes = 0;
  const std::string unbucketed = ExportPlan(problem, plan, Target::kMegatron, "test").front().text;
  CHECK_FALSE(Contains(unbucketed, "--overlap-grad-reduce"));
  CHECK_FALSE(Contains(unbucketed, "--overlap-param-gather"));
}

TEST_CASE("DeepSpeed's overlap_comm: ZeRO's gradient buckets read and written back") {
  const std::string dir = testing::ScratchDir("interop_ds_buckets");
  auto engine = [&](const std::string& name, const std::string& zero) {
    std::ofstream(dir + "/" + name)
        << R"({"train_batch_size": 16, "train_micro_batch_size_per_gpu": 1,
               "gradient_accumulation_steps": 8, "zero_optimization": )" << zero << "}";
    return ImportConfig(Target::kDeepSpeed, dir + "/" + name, 2).dp_bucket_params;
  };
  CHECK(engine("sized.json", R"({"stage": 1, "overlap_comm": true, "reduce_bucket_size": 2e8})") ==
        2e8);
  CHECK(engine("zero3.json", R"({"stage": 3})") == 5e8);  // ZeRO-3 overlaps by default
  CHECK(engine("off.json", R"({"stage": 2})") == 0);
  CHECK(engine("zero0.json", R"({"stage": 0, "overlap_comm": true})") == 0);
  const std::string bad = R"({"stage": 1, "overlap_comm": 1})";
  CHECK(Contains(InputErrorMessage([&] { engine("bad.json", bad); }),
                 "zero_optimization.overlap_comm = 1: must be true or false"));

  Problem problem = ExampleProblem();
  problem.training.dp_bucket_bytes = 100e6;  // 2-byte gradients: 5e7 elements
  const Plan plan = BlocksPlan(problem, {32}, 1, 16, 1, 1, Recompute::kNone, 1);
  const std::string config = ExportPlan(problem, plan, Target::kDeepSpeed, "test").front().text;
  CHECK(Contains(config, "\"overlap_comm\": true"));
  CHECK(Contains(config, "\"reduce_bucket_size\": 50000000"));
}

}  // namespace stratos
