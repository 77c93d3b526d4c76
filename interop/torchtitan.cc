// torchtitan: the job TOML (schema of torchtitan <= v0.2.2, torchtitan/config/job_config.py;
// ../shared/formats/torchtitan_job.toml) and reading it back.
#include <fmt/format.h>
#include <fmt/ranges.h>

#include <climits>
#include <set>

#include "costmodel/error.h"
#include "costmodel/toml_reader.h"
#include "interop/targets.h"

namespace stratos {

namespace {

// torchtitan's llama3 flavors (torchtitan/models/llama3/__init__.py, llama3_configs): FFN size
// from ffn_dim_multiplier and multiple_of as its FeedForward computes it; vocabulary of the
// Llama 3 tokenizer.
struct Flavor {
  const char* name;
  int hidden, layers, heads, kv_heads, ffn;
};
constexpr Flavor kFlavors[] = {{"8B", 4096, 32, 32, 8, 14336},
                               {"70B", 8192, 80, 64, 8, 28672},
                               {"405B", 16384, 126, 128, 8, 53248}};
constexpr int kLlama3Vocab = 128256;

std::string FlavorList() {
  std::string text;
  for (const Flavor& f : kFlavors)
    text += fmt::format("{}{} (hidden {}, {} layers, {} heads, {} kv heads, ffn {})",
                        text.empty() ? "" : ", ", f.name, f.hidden, f.layers, f.heads, f.kv_heads,
                        f.ffn);
  return text;
}

const char* ScheduleClass(const ParallelLayout& layout) {
  if (layout.virtual_stages > 1) return "Interleaved1F1B";
  return layout.schedule == Schedule::kGpipe ? "GPipe" : "1F1B";
}

// Quoted TOML list of the module names of each virtual stage.
std::string ModuleParts(const ParallelLayout& layout) {
  std::string text = "module_fqns_per_model_part = [\n";
  for (const std::vector<std::string>& modules : StageModules(layout)) {
    std::vector<std::string> quoted;
    for (const std::string& name : modules) quoted.push_back("\"" + name + "\"");
    text += fmt::format("  [{}],\n", fmt::join(quoted, ", "));
  }
  return text + "]\n";
}

}  // namespace

std::string TorchtitanFlavor(const ModelSpec& model, const std::string& where) {
  if (model.family == "llama")
    for (const Flavor& f : kFlavors)
      if (model.hidden_size == f.hidden && model.num_layers == f.layers &&
          model.num_attention_heads == f.heads && model.num_key_value_heads == f.kv_heads &&
          model.ffn_hidden_size == f.ffn)
        return f.name;
  ThrowInputError(where, "model", model.name,
                  fmt::format("torchtitan trains its registered llama3 flavors: {}", FlavorList()));
}

ModelSpec TorchtitanFlavorModel(const std::string& flavor, const std::string& where) {
  for (const Flavor& f : kFlavors)
    if (flavor == f.name) {
      ModelSpec model;
      model.name = fmt::format("llama3-{}", f.name);
      model.family = "llama";
      model.source = where;
      model.hidden_size = f.hidden;
      model.num_layers = f.layers;
      model.num_attention_heads = f.heads;
      model.num_key_value_heads = f.kv_heads;
      model.ffn_hidden_size = f.ffn;
      model.vocab_size = kLlama3Vocab;
      model.tie_word_embeddings = false;
      return model;
    }
  ThrowInputError(where, "model.flavor", flavor,
                  fmt::format("stratos knows the llama3 flavors {}", FlavorList()));
}

ExportFile TorchtitanToml(const Problem& problem, const ParallelLayout& layout,
                          const std::string& where) {
  const int dp = layout.data_parallel;
  const bool pipelined = layout.pipeline_parallel > 1;
  std::string text = fmt::format(
      "# torchtitan job of a stratos plan: {} on {} node{} x {} GPUs ({})\n"
      "#   TP {} x PP {}{} x DP {} (ZeRO-{}), micro-batch {}, global batch {}\n"
      "# Launch on every node:\n"
      "#   torchrun --nnodes {} --nproc_per_node {} --rdzv_backend c10d --rdzv_endpoint "
      "$HEAD:29500 \\\n"
      "#       -m torchtitan.train --job.config_file ./torchtitan_job.toml\n\n",
      problem.model.name, layout.nodes, layout.nodes == 1 ? "" : "s", layout.gpus_per_node,
      problem.cluster.name, layout.tensor_parallel, layout.pipeline_parallel,
      layout.virtual_stages > 1 ? fmt::format(" (v {})", layout.virtual_stages) : "", dp,
      layout.zero_stage, layout.micro_batch_size, layout.global_batch_size, layout.nodes,
      layout.gpus_per_node);
  if (!layout.placement_note.empty()) text += "# " + layout.placement_note + "\n\n";
  text += "[job]\ndump_folder = \"./outputs\"\n";
  text += fmt::format("description = \"{} exported by stratos\"\n\n", problem.model.name);
  text += fmt::format("[model]\nname = \"llama3\"\nflavor = \"{}\"\n\n",
                      TorchtitanFlavor(problem.model, where));
  // With PP a DP rank's batch is split into microbatches; without it, microbatches are
  // gradient-accumulation steps (global = local x DP x accumulation).
  const int local = pipelined ? layout.global_batch_size / dp : layout.micro_batch_size;
  text += fmt::format(
      "[training]\nlocal_batch_size = {}\nglobal_batch_size = {}\nseq_len = {}\nsteps = 1000\n"
      "mixed_precision_param = \"{}\"\n\n",
      local, layout.global_batch_size, problem.model.seq_length,
      layout.bf16 ? "bfloat16" : "float32");
  const bool shard = layout.zero_stage >= 2;
  text += fmt::format(
      "[parallelism]\ndata_parallel_replicate_degree = {}\ndata_parallel_shard_degree = {}\n"
      "fsdp_reshard_after_forward = \"{}\"\ntensor_parallel_degree = {}\n"
      "context_parallel_degree = 1\npipeline_parallel_degree = {}\n",
      shard ? 1 : dp, shard ? dp : 1, layout.zero_stage == 3 ? "always" : "never",
      layout.tensor_parallel, layout.pipeline_parallel);
  if (pipelined) {
    text += fmt::format("pipeline_parallel_schedule = \"{}\"\n", ScheduleClass(layout));
    text += fmt::format("pipeline_parallel_microbatch_size = {}\n", layout.micro_batch_size);
    text += ModuleParts(layout);
  }
  const char* mode = layout.recompute == Recompute::kFull        ? "full"
                     : layout.recompute == Recompute::kSelective ? "selective"
                                                                 : "none";
  text += fmt::format("\n[activation_checkpoint]\nmode = \"{}\"\n", mode);
  if (layout.recompute == Recompute::kSelective) text += "selective_ac_option = \"op\"\n";
  return {"torchtitan_job.toml", text, false};
}

ImportedConfig ImportTorchtitan(const std::string& path, const std::string& text, int world_size) {
  const toml::table root = ParseTomlText(text, path);
  auto table = [&](const char* name) -> const toml::table& {
    static const toml::table empty;
    const toml::node* node = root.get(name);
    if (node == nullptr) return empty;
    if (!node->is_table()) ThrowInputError(path, name, "(value)", "must be a table");
    return *node->as_table();
  };
  const TomlTableReader model_table(table("model"), "model", path);
  const TomlTableReader training(table("training"), "training", path);
  const TomlTableReader parallel(table("parallelism"), "parallelism", path);
  const TomlTableReader checkpoint(table("activation_checkpoint"), "activation_checkpoint", path);
  ImportedConfig imported;
  const std::string name = model_table.String("name").value_or("llama3");
  if (name != "llama3")
    ThrowInputError(path, "model.name", name, "stratos imports torchtitan's llama3 models");
  imported.model = TorchtitanFlavorModel(model_table.RequireString("flavor"), path);
  imported.model.seq_length = training.Int("seq_len", 1).value_or(2048);
  imported.model.max_position_embeddings = imported.model.seq_length;
  for (const char* key : {"context_parallel_degree", "expert_parallel_degree"})
    if (parallel.Int(key, 1).value_or(1) != 1)
      parallel.Fail(key, "stratos plans have no context or expert parallelism (must be 1)");
  ParallelLayout& layout = imported.layout;
  layout.tensor_parallel = static_cast<int>(parallel.Int("tensor_parallel_degree", 1).value_or(1));
  const int p = layout.pipeline_parallel =
      static_cast<int>(parallel.Int("pipeline_parallel_degree", 1).value_or(1));
  const int replicate =
      static_cast<int>(parallel.Int("data_parallel_replicate_degree", 1).value_or(1));
  int shard = static_cast<int>(parallel.Int("data_parallel_shard_degree", -1).value_or(-1));
  if (shard == 0) parallel.Fail("data_parallel_shard_degree", "must be -1 or >= 1");
  if (shard == -1) {
    const long long used = static_cast<long long>(layout.tensor_parallel) * p * replicate;
    if (world_size <= 0 || world_size % used != 0)
      ThrowInputError(path, "parallelism.data_parallel_shard_degree", -1,
                      fmt::format("\"all leftover ranks\" needs a world size divisible by {} "
                                  "(give the cluster)",
                                  used));
    shard = static_cast<int>(world_size / used);
  }
  if (replicate > 1 && shard > 1)
    ThrowInputError(path, "parallelism.data_parallel_replicate_degree", replicate,
                    "HSDP (replicate and shard both > 1) has no stratos equivalent");
  const long long world64 = static_cast<long long>(layout.tensor_parallel) * p * replicate * shard;
  if (world64 > ClusterSpec::kMaxDevices)
    ThrowInputError(path, "parallelism", fmt::format("{} ranks", world64),
                    fmt::format("the degrees must multiply to at most {}",
                                ClusterSpec::kMaxDevices));
  layout.data_parallel = replicate * shard;
  if (shard > 1) {
    const std::string reshard = parallel.String("fsdp_reshard_after_forward").value_or("default");
    if (reshard != "default" && reshard != "always" && reshard != "never")
      parallel.Fail("fsdp_reshard_after_forward", "must be default, always or never");
    // torchtitan: "default" is "never" under PP and "always" without it.
    const bool reshards = reshard == "always" || (reshard == "default" && p == 1);
    layout.zero_stage = reshards ? 3 : 2;
  }
  const long long world = layout.WorldSize();
  if (world_size > 0 && world != world_size)
    ThrowInputError(path, "parallelism", fmt::format("{} ranks", world),
                    fmt::format("the degrees must multiply to the world size {}", world_size));
  const int local = training.RequireInt("local_batch_size", 1);
  const int global = static_cast<int>(training.Int("global_batch_size", -1).value_or(-1));
  const long long per_step = static_cast<long long>(local) * layout.data_parallel;
  if (global <= 0 && per_step > INT_MAX)
    training.Fail("local_batch_size", "local_batch_size x DP must be at most 2^31 - 1");
  layout.global_batch_size = global > 0 ? global : static_cast<int>(per_step);
  if (layout.global_batch_size % per_step != 0)
    training.Fail("global_batch_size",
                  fmt::format("must be a multiple of local_batch_size x DP = {} x {}", local,
                              layout.data_parallel));
  layout.micro_batch_size =
      p > 1 ? static_cast<int>(parallel.Int("pipeline_parallel_microbatch_size", 1).value_or(1))
            : local;
  if (local % layout.micro_batch_size != 0)
    parallel.Fail("pipeline_parallel_microbatch_size",
                  fmt::format("must divide local_batch_size {}", local));
  layout.bf16 = training.String("mixed_precision_param").value_or("bfloat16") != "float32";
  const std::string mode = checkpoint.String("mode").value_or("selective");
  if (mode == "none") {
    layout.recompute = Recompute::kNone;
  } else if (mode == "selective") {
    layout.recompute = Recompute::kSelective;
  } else if (mode == "full") {
    layout.recompute = Recompute::kFull;
  } else {
    checkpoint.Fail("mode", "stratos imports none, selective or full");
  }
  // Stages.
  const int L = imported.model.num_layers;
  if (p == 1) {
    layout.blocks = {L};
    return imported;
  }
  const std::string schedule = parallel.String("pipeline_parallel_schedule").value_or("1F1B");
  std::string lower;
  for (char c : schedule) lower += static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  int v = 0;
  if (lower == "1f1b") {
    v = 1;
  } else if (lower == "gpipe") {
    v = 1;
    layout.schedule = Schedule::kGpipe;
  } else if (lower != "interleaved1f1b") {
    parallel.Fail("pipeline_parallel_schedule",
                  "stratos imports 1F1B, GPipe and Interleaved1F1B");
  }
  if (const toml::node* parts = parallel.Find("module_fqns_per_model_part")) {
    if (!parts->is_array()) parallel.Fail("module_fqns_per_model_part", "must be a list of lists");
    int next_block = 0;
    for (const toml::node& part : *parts->as_array()) {
      if (!part.is_array())
        parallel.Fail("module_fqns_per_model_part", "must be a list of lists");
      int count = 0;
      for (const toml::node& module : *part.as_array()) {
        const std::string fqn = module.value_or(std::string());
        if (fqn.rfind("layers.", 0) == 0) {
          if (fqn != fmt::format("layers.{}", next_block))
            parallel.Fail("module_fqns_per_model_part",
                          fmt::format("\"{}\" out of order: stratos stages hold consecutive "
                                      "layers (expected layers.{})",
                                      fqn, next_block));
          ++next_block, ++count;
        }
      }
      layout.blocks.push_back(count);
    }
  } else {
    const int n = p * (v == 0 ? 2 : v);
    const int first_less =
        static_cast<int>(parallel.Int("pipeline_parallel_first_stage_less_layers", 0).value_or(1));
    const int last_less =
        static_cast<int>(parallel.Int("pipeline_parallel_last_stage_less_layers", 0).value_or(1));
    const int per = static_cast<int>(
        parallel.Int("pipeline_parallel_layers_per_stage", 1).value_or((L + first_less + last_less) / n));
    const int total = L + first_less + last_less;
    if (total % per != 0 || per <= std::max(first_less, last_less))
      parallel.Fail("pipeline_parallel_layers_per_stage",
                    fmt::format("layers + first/last stage allowance = {} must split into stages "
                                "of {}",
                                total, per));
    for (int i = 0; i < total / per; ++i)
      layout.blocks.push_back(per - (i == 0 ? first_less : 0) - (i == total / per - 1 ? last_less : 0));
  }
  const int n = static_cast<int>(layout.blocks.size());
  if (n % p != 0)
    parallel.Fail("pipeline_parallel_degree",
                  fmt::format("must divide the {} stages of module_fqns_per_model_part", n));
  layout.virtual_stages = n / p;
  if (v == 1 && layout.virtual_stages != 1)
    parallel.Fail("pipeline_parallel_schedule",
                  fmt::format("\"{}\" runs one stage per rank, the config has {}", schedule,
                              layout.virtual_stages));
  return imported;
}

}  // namespace stratos
