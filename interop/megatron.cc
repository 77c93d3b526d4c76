// Megatron-LM: the pretrain_gpt.py flags of a layout and a torchrun launch script; reading them
// back. Flag names: NVIDIA/Megatron-LM megatron/training/arguments.py (core_v0.15);
// --pipeline-model-parallel-layout: docs pipeline_parallel_layout.md (E embedding, t a decoder
// layer, L the loss/output layer, '|' between virtual stages in model order).
#include <fmt/format.h>

#include <algorithm>
#include <cctype>
#include <cmath>
#include <set>

#include "costmodel/error.h"
#include "interop/targets.h"

namespace stratos {

namespace {

// The --pipeline-model-parallel-layout value: "Et*3|t*4|...|t*5L".
std::string LayoutString(const ParallelLayout& layout) {
  std::string text;
  const int n = static_cast<int>(layout.blocks.size());
  for (int i = 0; i < n; ++i) {
    if (i > 0) text += "|";
    if (i == 0) text += "E";
    const int b = layout.blocks[i];
    if (b == 1) text += "t";
    if (b > 1) text += fmt::format("t*{}", b);
    if (i == n - 1) text += "L";
  }
  return text;
}

// Blocks per virtual stage from a layout string; `v` is set from the entries and p.
std::vector<int> ParseLayoutString(const std::string& text, int p, int& v,
                                   const std::string& where) {
  const std::string flag = "--pipeline-model-parallel-layout";
  std::vector<int> blocks;
  std::string entry;
  std::vector<std::string> entries;
  for (char c : text + "|") {
    if (c == '|') {
      entries.push_back(entry);
      entry.clear();
    } else if (!std::isspace(static_cast<unsigned char>(c)) && c != '"' && c != '\'') {
      entry += c;
    }
  }
  const int n = static_cast<int>(entries.size());
  for (int i = 0; i < n; ++i) {
    const std::string& e = entries[i];
    int count = 0;
    for (size_t k = 0; k < e.size();) {
      const char c = e[k++];
      int repeat = 1;
      if (k < e.size() && e[k] == '*') {
        size_t digits = ++k;
        while (k < e.size() && std::isdigit(static_cast<unsigned char>(e[k]))) ++k;
        if (k == digits) ThrowInputError(where, flag, text, "'*' must be followed by a count");
        if (k - digits > 7 || std::stoi(e.substr(digits, k - digits)) > ModelSpec::kMaxLayers)
          ThrowInputError(where, flag, text,
                          fmt::format("a repeat count must be at most {}", ModelSpec::kMaxLayers));
        repeat = std::stoi(e.substr(digits, k - digits));
      }
      if (c == 't') {
        count += repeat;
        if (count > ModelSpec::kMaxLayers)
          ThrowInputError(where, flag, text,
                          fmt::format("more than {} layers in a stage", ModelSpec::kMaxLayers));
      } else if (c == 'E' || c == 'L') {
        const bool ok = repeat == 1 && (c == 'E' ? i == 0 : i == n - 1);
        if (!ok)
          ThrowInputError(where, flag, text,
                          fmt::format("'{}' belongs once in the {} virtual stage", c,
                                      c == 'E' ? "first" : "last"));
      } else {
        ThrowInputError(where, flag, text,
                        fmt::format("'{}' has no stratos equivalent (stratos plans hold E, t and "
                                    "L entries)",
                                    c));
      }
    }
    blocks.push_back(count);
  }
  if (n % p != 0)
    ThrowInputError(where, flag, text,
                    fmt::format("{} virtual stages are not a multiple of the {} pipeline ranks", n,
                                p));
  v = n / p;
  return blocks;
}

}  // namespace

int FlagInt(const std::map<std::string, std::string>& flags, const std::string& flag,
             const std::string& where, int fallback, int min_value) {
  auto it = flags.find(flag);
  if (it == flags.end()) return fallback;
  const std::string& text = it->second;
  size_t used = 0;
  long long value = 0;
  try {
    value = std::stoll(text, &used);
  } catch (const std::exception&) {
    used = 0;
  }
  if (text.empty() || used != text.size())
    ThrowInputError(where, flag, fmt::format("\"{}\"", text), "must be an integer");
  if (value < min_value || value > 1'000'000'000)
    ThrowInputError(where, flag, value, fmt::format("must be in [{}, 1e9]", min_value));
  return static_cast<int>(value);
}

std::vector<FlagGroup> MegatronFlagGroups(const Problem& problem, const ParallelLayout& layout,
                                          bool deepspeed) {
  const ModelSpec& m = problem.model;
  FlagGroup model{"MODEL_ARGS", {}};
  auto add = [](FlagGroup& g, std::string line) { g.lines.push_back(std::move(line)); };
  add(model, fmt::format("--num-layers {}", m.num_layers));
  add(model, fmt::format("--hidden-size {}", m.hidden_size));
  add(model, fmt::format("--ffn-hidden-size {}", m.ffn_hidden_size));
  add(model, fmt::format("--num-attention-heads {}", m.num_attention_heads));
  // Megatron-DeepSpeed (microsoft/Megatron-DeepSpeed examples_deepspeed/
  // pretrain_llama2_distributed.sh) predates some Megatron-Core spellings.
  if (m.num_key_value_heads != m.num_attention_heads) {
    if (deepspeed) {
      add(model, fmt::format("--num-key-value-heads {}", m.num_key_value_heads));
    } else {
      add(model, "--group-query-attention");
      add(model, fmt::format("--num-query-groups {}", m.num_key_value_heads));
    }
  }
  add(model, fmt::format("--seq-length {}", m.seq_length));
  add(model, fmt::format("--max-position-embeddings {}", m.max_position_embeddings));
  if (m.family == "llama") {
    add(model, deepspeed ? "--use-rotary-position-embeddings" : "--position-embedding-type rope");
    add(model, deepspeed ? "--normalization rmsnorm" : "--normalization RMSNorm");
    add(model, "--swiglu");
    add(model, "--disable-bias-linear");
  } else if (!deepspeed) {
    add(model, "--position-embedding-type learned_absolute");
  }
  if (!m.tie_word_embeddings) add(model, "--untie-embeddings-and-output-weights");

  FlagGroup training{"TRAINING_ARGS", {}};
  add(training, fmt::format("--micro-batch-size {}", layout.micro_batch_size));
  add(training, fmt::format("--global-batch-size {}", layout.global_batch_size));
  if (layout.bf16) add(training, "--bf16");
  if (layout.recompute == Recompute::kSelective) {
    add(training, "--recompute-granularity selective");
  } else if (layout.recompute == Recompute::kFull) {
    if (deepspeed) add(training, "--deepspeed-activation-checkpointing");
    add(training, "--recompute-granularity full");
    add(training, "--recompute-method uniform");
    add(training, "--recompute-num-layers 1");
  }
  add(training, "--train-iters 1000       # training hyperparameters: yours, not the plan's");
  add(training, "--lr 3.0e-4");

  FlagGroup parallel{"MODEL_PARALLEL_ARGS", {}};
  add(parallel, fmt::format("--tensor-model-parallel-size {}", layout.tensor_parallel));
  if (layout.sequence_parallel) add(parallel, "--sequence-parallel");
  add(parallel, fmt::format("--pipeline-model-parallel-size {}", layout.pipeline_parallel));
  if (layout.pipeline_parallel > 1) {
    // Even blocks are Megatron's own placement; anything else needs the layout flag.
    if (!layout.EvenBlocks()) {
      add(parallel, fmt::format("--pipeline-model-parallel-layout \"{}\"", LayoutString(layout)));
    } else if (layout.virtual_stages > 1) {
      add(parallel, fmt::format("--num-layers-per-virtual-pipeline-stage {}", layout.blocks[0]));
    }
  } else if (deepspeed) {
    add(parallel, "--no-pipeline-parallel");
  }
  if (deepspeed) {
    add(parallel, "--deepspeed");
    add(parallel, "--deepspeed_config ds_config.json");
    add(parallel, fmt::format("--zero-stage {}", layout.zero_stage));
  } else if (layout.zero_stage == 1) {
    add(parallel, "--use-distributed-optimizer");
  }
  // DP gradient buckets (TrainingSpec::dp_bucket_bytes) in parameters of the gradients' dtype;
  // the distributed optimizer's all-gather under the next forward where it is priced hidden.
  if (!deepspeed && problem.training.dp_bucket_bytes > 0 && layout.data_parallel > 1) {
    add(parallel, "--overlap-grad-reduce");
    add(parallel, fmt::format("--ddp-bucket-size {}", DpBucketElements(problem.training)));
    if (layout.zero_stage == 1 && problem.training.dp_overlap_fraction == 1.0)
      add(parallel, "--overlap-param-gather");
  }

  FlagGroup data{"DATA_ARGS", {}};
  if (deepspeed) {
    add(data, "--data-path ${DATA_PATH:-my-gpt_text_document}   # your data and tokenizer");
  } else {
    add(data, "--mock-data               # replace with your --data-path and tokenizer");
  }
  add(data, "--tokenizer-type NullTokenizer");
  add(data, fmt::format("--vocab-size {}", m.vocab_size));
  return {model, training, parallel, data};
}

long long DpBucketElements(const TrainingSpec& training) {
  return std::llround(std::max(1.0, training.dp_bucket_bytes / training.grad_dtype_bytes));
}

std::string BashArrays(const std::vector<FlagGroup>& groups) {
  std::string text;
  for (const FlagGroup& group : groups) {
    text += group.name + "=(\n";
    for (const std::string& line : group.lines) text += "    " + line + "\n";
    text += ")\n\n";
  }
  return text;
}

ExportFile MegatronScript(const Problem& problem, const ParallelLayout& layout) {
  std::vector<FlagGroup> groups = MegatronFlagGroups(problem, layout, false);
  FlagGroup distributed{"DISTRIBUTED_ARGS",
                        {fmt::format("--nproc_per_node {}", layout.gpus_per_node),
                         fmt::format("--nnodes {}", layout.nodes), "--node_rank ${NODE_RANK:-0}",
                         "--master_addr ${MASTER_ADDR:-localhost}",
                         "--master_port ${MASTER_PORT:-6000}"}};
  groups.insert(groups.begin(), distributed);
  std::string text = fmt::format(
      "#!/bin/bash\n"
      "# Megatron-LM launch of a stratos plan: {} on {} node{} x {} GPUs ({})\n"
      "#   TP {} x PP {}{} x DP {}, micro-batch {}, global batch {} ({} microbatches per DP "
      "rank)\n"
      "# Run on every node with NODE_RANK, MASTER_ADDR and MASTER_PORT set.\n\n"
      "export CUDA_DEVICE_MAX_CONNECTIONS=1\n\n",
      problem.model.name, layout.nodes, layout.nodes == 1 ? "" : "s", layout.gpus_per_node,
      problem.cluster.name, layout.tensor_parallel, layout.pipeline_parallel,
      layout.virtual_stages > 1 ? fmt::format(" (VPP {})", layout.virtual_stages) : "",
      layout.data_parallel, layout.micro_batch_size, layout.global_batch_size,
      layout.NumMicrobatches());
  if (!layout.placement_note.empty()) text += "# " + layout.placement_note + "\n\n";
  text += BashArrays(groups);
  text +=
      "torchrun \"${DISTRIBUTED_ARGS[@]}\" pretrain_gpt.py \\\n"
      "    \"${MODEL_ARGS[@]}\" \\\n"
      "    \"${TRAINING_ARGS[@]}\" \\\n"
      "    \"${MODEL_PARALLEL_ARGS[@]}\" \\\n"
      "    \"${DATA_ARGS[@]}\"\n";
  return {"megatron_args.sh", text, true};
}

ImportedConfig ImportMegatron(const std::string& path, const std::string& text, int world_size) {
  const std::map<std::string, std::string> flags = FlagValues(ShellWords(text));
  auto has = [&](const std::string& flag) { return flags.count(flag) > 0; };
  for (const char* flag : {"--context-parallel-size", "--expert-model-parallel-size"})
    if (FlagInt(flags, flag, path, 1) != 1)
      ThrowInputError(path, flag, flags.at(flag),
                      "stratos plans have no context or expert parallelism (must be 1)");
  if (has("--num-experts"))
    ThrowInputError(path, "--num-experts", flags.at("--num-experts"),
                    "stratos plans dense models (no mixture of experts)");
  ImportedConfig imported;
  ParallelLayout& layout = imported.layout;
  const int L = FlagInt(flags, "--num-layers", path, 0);
  if (L == 0)
    ThrowInputError(path, "--num-layers", "(missing)",
                    "the layer count is required (Megatron-LM and Megatron-DeepSpeed launches "
                    "carry the model flags)");
  ModelSpec& model = imported.model;
  if (has("--hidden-size") && has("--num-attention-heads") && has("--seq-length") &&
      has("--vocab-size")) {
    model.family = has("--swiglu") ? "llama" : "gpt";
    model.name = "megatron-import";
    model.source = path;
    model.num_layers = L;
    model.hidden_size = FlagInt(flags, "--hidden-size", path, 0);
    model.num_attention_heads = FlagInt(flags, "--num-attention-heads", path, 0);
    model.num_key_value_heads = FlagInt(
        flags, "--num-query-groups", path,
        FlagInt(flags, "--num-key-value-heads", path, model.num_attention_heads));
    model.ffn_hidden_size = FlagInt(flags, "--ffn-hidden-size", path, 0);  // 0: 4 h
    model.seq_length = FlagInt(flags, "--seq-length", path, 0);
    model.max_position_embeddings =
        FlagInt(flags, "--max-position-embeddings", path, model.seq_length);
    model.vocab_size = FlagInt(flags, "--vocab-size", path, 0);
    model.tie_word_embeddings = !has("--untie-embeddings-and-output-weights");
  }
  const int nodes = FlagInt(flags, "--nnodes", path, 0);
  int per_node = FlagInt(flags, "--nproc_per_node", path, 0);
  if (per_node == 0) per_node = FlagInt(flags, "--nproc-per-node", path, 0);
  int world = world_size;
  if (nodes > 0 && per_node > 0) {
    imported.world_known = true;
    layout.nodes = nodes;
    layout.gpus_per_node = per_node;
    if (static_cast<long long>(nodes) * per_node > ClusterSpec::kMaxDevices)
      ThrowInputError(path, "--nnodes x --nproc_per_node", static_cast<long long>(nodes) * per_node,
                      fmt::format("must be at most {}", ClusterSpec::kMaxDevices));
    world = nodes * per_node;
  }
  if (world <= 0)
    ThrowInputError(path, "--nnodes x --nproc_per_node", "(missing)",
                    "give the world size (torchrun flags in the file, or the cluster)");
  layout.tensor_parallel = FlagInt(flags, "--tensor-model-parallel-size", path, 1);
  const int p = layout.pipeline_parallel = FlagInt(flags, "--pipeline-model-parallel-size", path, 1);
  const long long model_parallel = static_cast<long long>(layout.tensor_parallel) * p;
  if (world % model_parallel != 0)
    ThrowInputError(path, "--tensor-model-parallel-size x --pipeline-model-parallel-size",
                    model_parallel, fmt::format("must divide the world size {}", world));
  layout.data_parallel = static_cast<int>(world / model_parallel);
  layout.micro_batch_size = FlagInt(flags, "--micro-batch-size", path, 1);
  layout.global_batch_size = FlagInt(flags, "--global-batch-size", path, 0);
  const long long per_step = static_cast<long long>(layout.micro_batch_size) * layout.data_parallel;
  if (layout.global_batch_size == 0 && per_step <= 1'000'000'000)
    layout.global_batch_size = static_cast<int>(per_step);
  if (layout.global_batch_size == 0 || layout.global_batch_size % per_step != 0)
    ThrowInputError(path, "--global-batch-size", layout.global_batch_size,
                    fmt::format("must be a multiple of micro-batch x DP = {} x {}",
                                layout.micro_batch_size, layout.data_parallel));
  layout.bf16 = has("--bf16") || has("--fp16");
  layout.sequence_parallel = has("--sequence-parallel") && layout.tensor_parallel > 1;
  layout.zero_stage = has("--use-distributed-optimizer") ? 1 : 0;
  if (has("--overlap-grad-reduce") && !has("--deepspeed"))
    imported.dp_bucket_params =
        has("--ddp-bucket-size")
            ? FlagInt(flags, "--ddp-bucket-size", path, 0, 1)
            : std::max(40'000'000.0, 1'000'000.0 * layout.data_parallel);
  imported.overlap_param_gather =
      has("--overlap-param-gather") && imported.dp_bucket_params > 0 && layout.zero_stage == 1;
  if (has("--deepspeed")) layout.zero_stage = FlagInt(flags, "--zero-stage", path, 0, 0);
  if (layout.zero_stage > 3)
    ThrowInputError(path, "--zero-stage", layout.zero_stage, "must be 0, 1, 2 or 3");
  if (has("--recompute-granularity")) {
    const std::string& g = flags.at("--recompute-granularity");
    if (g == "selective") {
      layout.recompute = Recompute::kSelective;
    } else if (g == "full") {
      layout.recompute = Recompute::kFull;
    } else {
      ThrowInputError(path, "--recompute-granularity", g, "must be full or selective");
    }
  } else if (has("--recompute-activations")) {
    layout.recompute = Recompute::kSelective;
  } else if (has("--checkpoint-activations")) {
    layout.recompute = Recompute::kFull;
  }
  if (layout.recompute == Recompute::kFull && has("--recompute-method") &&
      flags.at("--recompute-method") == "block" &&
      static_cast<long long>(FlagInt(flags, "--recompute-num-layers", path, 1)) * p < L)
    ThrowInputError(path, "--recompute-method", "block",
                    "stratos recomputes every layer of a stage or none (use uniform, or block "
                    "with all layers)");
  layout.schedule = Schedule::kOneFOneB;
  // Blocks per virtual stage.
  if (has("--pipeline-model-parallel-layout")) {
    layout.blocks =
        ParseLayoutString(flags.at("--pipeline-model-parallel-layout"), p, layout.virtual_stages,
                          path);
  } else {
    int v = FlagInt(flags, "--num-virtual-stages-per-pipeline-rank", path, 1);
    if (has("--num-layers-per-virtual-pipeline-stage")) {
      const int per = FlagInt(flags, "--num-layers-per-virtual-pipeline-stage", path, 1);
      if (static_cast<long long>(per) * p > L || L % (per * p) != 0)
        ThrowInputError(path, "--num-layers-per-virtual-pipeline-stage", per,
                        fmt::format("x {} pipeline ranks must divide the {} layers", p, L));
      v = L / (per * p);
    }
    if (static_cast<long long>(p) * v > L + 2)
      ThrowInputError(path, "--num-virtual-stages-per-pipeline-rank", v,
                      fmt::format("{} pipeline ranks x {} virtual stages exceed the {} layers", p, v,
                                  L + 2));
    layout.virtual_stages = v;
    const int n = p * v;
    const int first = FlagInt(flags, "--decoder-first-pipeline-num-layers", path, -1, 0);
    const int last = FlagInt(flags, "--decoder-last-pipeline-num-layers", path, -1, 0);
    // First / last stage counts are per rank; split into v chunks.
    int rest = L, middle_ranks = p;
    if (first >= 0) rest -= first, --middle_ranks;
    if (last >= 0) rest -= last, --middle_ranks;
    if (rest < 0 || (middle_ranks > 0 ? rest % middle_ranks != 0 : rest != 0))
      ThrowInputError(path, "--num-layers", L,
                      fmt::format("the blocks left for the middle {} pipeline ranks ({}) must "
                                  "split evenly",
                                  middle_ranks, rest));
    const int middle = middle_ranks > 0 ? rest / middle_ranks : 0;
    std::vector<int> per_rank(p, middle);
    if (first >= 0) per_rank.front() = first;
    if (last >= 0) per_rank.back() = last;
    layout.blocks.assign(n, 0);
    for (int r = 0; r < p; ++r) {
      if (per_rank[r] % v != 0)
        ThrowInputError(path, "--num-layers", L,
                        fmt::format("pipeline rank {} holds {} blocks, not a multiple of the {} "
                                    "virtual stages",
                                    r, per_rank[r], v));
      for (int c = 0; c < v; ++c) layout.blocks[c * p + r] = per_rank[r] / v;
    }
  }
  return imported;
}

}  // namespace stratos
