#include "runtime/gpt.h"

#include <ATen/CPUGeneratorImpl.h>
#include <fmt/format.h>

#include <cmath>

#include "costmodel/error.h"
#include "runtime/device.h"

namespace stratos {

using torch::Tensor;
using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

const char* InitSchemeName(InitScheme scheme) {
  switch (scheme) {
    case InitScheme::kGpt2: return "gpt2";
    case InitScheme::kNormal: return "normal";
    case InitScheme::kXavier: return "xavier";
    case InitScheme::kKaiming: return "kaiming";
  }
  return "?";
}

InitScheme ParseInitScheme(const std::string& name, const std::string& where,
                           const std::string& key) {
  for (InitScheme scheme :
       {InitScheme::kGpt2, InitScheme::kNormal, InitScheme::kXavier, InitScheme::kKaiming})
    if (name == InitSchemeName(scheme)) return scheme;
  ThrowInputError(where, key, fmt::format("\"{}\"", name),
                  "must be one of gpt2, normal, xavier, kaiming");
}

void CheckRuntimeModel(const ModelSpec& model) {
  const std::string where = model.source.empty() ? model.name : model.source;
  if (model.family != "gpt")
    ThrowInputError(where, "model.family", fmt::format("\"{}\"", model.family),
                    "the runtime builds \"gpt\" models only in this version");
  if (model.num_key_value_heads != model.num_attention_heads)
    ThrowInputError(where, "model.num_key_value_heads", model.num_key_value_heads,
                    "the runtime's GPT has no grouped-query attention: must equal "
                    "num_attention_heads");
  if (model.NumLayers() != model.num_layers + 2)
    ThrowInputError(where, "model.num_layers", model.num_layers,
                    "layer list must be [embedding, blocks, head]");
}

// ---------------------------------------------------------------------------------------------
// Megatron f / g and the logits gather.

namespace {

Communicator* CommFrom(AutogradContext* ctx) {
  return reinterpret_cast<Communicator*>(ctx->saved_data["comm"].toInt());
}

struct CopyToTp : torch::autograd::Function<CopyToTp> {
  static Tensor forward(AutogradContext* ctx, Tensor x, Communicator* tp) {
    ctx->saved_data["comm"] = reinterpret_cast<int64_t>(tp);
    return x.view_as(x);
  }
  static variable_list backward(AutogradContext* ctx, variable_list grad) {
    Tensor g = grad[0].contiguous().clone();
    CommFrom(ctx)->AllReduceSum(g);
    return {g, Tensor()};
  }
};

struct ReduceFromTp : torch::autograd::Function<ReduceFromTp> {
  static Tensor forward(AutogradContext* ctx, Tensor x, Communicator* tp) {
    Tensor y = x.contiguous().clone();
    tp->AllReduceSum(y);
    return y;
  }
  static variable_list backward(AutogradContext* ctx, variable_list grad) {
    return {grad[0], Tensor()};
  }
};

struct GatherLastDim : torch::autograd::Function<GatherLastDim> {
  static Tensor forward(AutogradContext* ctx, Tensor x, Communicator* tp) {
    ctx->saved_data["comm"] = reinterpret_cast<int64_t>(tp);
    ctx->saved_data["n"] = x.size(-1);
    const int size = tp->Size();
    Tensor input = x.contiguous();
    std::vector<Tensor> parts;
    for (int r = 0; r < size; ++r) parts.push_back(torch::empty_like(input));
    tp->AllGather(parts, input);
    return torch::cat(parts, -1);
  }
  static variable_list backward(AutogradContext* ctx, variable_list grad) {
    Communicator* tp = CommFrom(ctx);
    const int64_t n = ctx->saved_data["n"].toInt();
    return {grad[0].narrow(-1, tp->Rank() * n, n).contiguous(), Tensor()};
  }
};

}  // namespace

Tensor CopyToTensorParallel(const Tensor& x, Communicator* tp) {
  return tp->Size() == 1 ? x : CopyToTp::apply(x, tp);
}
Tensor ReduceFromTensorParallel(const Tensor& x, Communicator* tp) {
  return tp->Size() == 1 ? x : ReduceFromTp::apply(x, tp);
}
Tensor GatherLastDimFromTensorParallel(const Tensor& x, Communicator* tp) {
  return tp->Size() == 1 ? x : GatherLastDim::apply(x, tp);
}

// ---------------------------------------------------------------------------------------------
// Layers.

namespace {

// How a parameter is sliced over TP ranks.
enum class Shard { kReplicated, kRows, kColumns };
enum class Init { kNormal, kScaledNormal, kZeros, kOnes };

struct ParamSpec {
  std::string name;
  std::vector<int64_t> full_shape;
  Shard shard;
  Init init;
  bool word_embedding = false;
  bool matrix = false;  // a block's or the untied head's weight matrix (InitScheme applies)
  int seed_layer = -1;  // layer whose seed draws it (-1: its own); the tied LM head copies wte
  std::string seed_name;
};

ParamSpec Spec(std::string name, std::vector<int64_t> shape, Shard shard, Init init,
               bool word_embedding = false) {
  ParamSpec spec;
  spec.matrix = !word_embedding && shape.size() == 2 &&
                (init == Init::kNormal || init == Init::kScaledNormal) &&
                name.rfind("embedding.", 0) != 0;
  spec.name = std::move(name);
  spec.full_shape = std::move(shape);
  spec.shard = shard;
  spec.init = init;
  spec.word_embedding = word_embedding;
  return spec;
}

}  // namespace

struct GptStage::Layer {
  virtual ~Layer() = default;
  virtual Tensor Forward(const Tensor& x, const Tensor& targets) = 0;
  std::vector<ParamSpec> specs;
  std::vector<Tensor> params;  // local shards, in specs order (set by GptStage)
  int index = 0;
};

namespace {

using Layer = GptStage::Layer;

struct Shape {
  int64_t h, a, f, V, s, P;
  int tp, tp_rank;
};

struct EmbeddingLayer : Layer {
  Shape x;
  Communicator* tp;
  EmbeddingLayer(const Shape& shape, Communicator* comm) : x(shape), tp(comm) {
    specs.push_back(Spec("embedding.wte", {x.V, x.h}, Shard::kRows, Init::kNormal, true));
    specs.push_back(Spec("embedding.wpe", {x.P, x.h}, Shard::kReplicated, Init::kNormal));
  }
  // ids: (b, s) int64 -> (b, s, h)
  Tensor Forward(const Tensor& ids, const Tensor&) override {
    const Tensor& wte = params[0];  // (V / tp, h)
    const Tensor& wpe = params[1];  // (P, h)
    Tensor tokens;
    if (x.tp == 1) {
      tokens = torch::embedding(wte, ids);
    } else {
      const int64_t rows = x.V / x.tp;
      const int64_t start = x.tp_rank * rows;
      Tensor outside = (ids < start).logical_or(ids >= start + rows);  // (b, s)
      Tensor local = (ids - start).masked_fill(outside, 0);
      tokens = torch::embedding(wte, local).masked_fill(outside.unsqueeze(-1), 0.0);
      tokens = ReduceFromTensorParallel(tokens, tp);
    }
    const int64_t seq = ids.size(1);
    return tokens + wpe.narrow(0, 0, seq).unsqueeze(0);
  }
};

// Layer norm (eps 1e-5) over the last dimension of the residual stream x: (..., h), weight and
// bias (h,) fp32. An fp32 x is normalized in fp32 (under autocast too, which runs layer norms in
// fp32); a bf16 x (bf16 residual stream, Megatron-LM's default in bf16 training) in bf16 with
// the weights cast to bf16, the kernel accumulating the statistics in fp32, so that the stream
// never round-trips through fp32 memory. Returns x's dtype.
Tensor LayerNorm(const Tensor& x, const Tensor& weight, const Tensor& bias) {
  if (x.scalar_type() != torch::kBFloat16)
    return torch::layer_norm(x, {x.size(-1)}, weight, bias, 1e-5);
  NoAutocastScope no_autocast;
  return torch::layer_norm(x, {x.size(-1)}, weight.to(x.scalar_type()), bias.to(x.scalar_type()),
                           1e-5);
}

Tensor CausalAttention(const Tensor& q, const Tensor& k, const Tensor& v, int64_t heads) {
  // q, k, v: (b, s, heads * d) -> (b, s, heads * d)
  const int64_t b = q.size(0), s = q.size(1), d = q.size(2) / heads;
  auto split = [&](const Tensor& t) { return t.view({b, s, heads, d}).transpose(1, 2); };
#if TORCH_VERSION_MAJOR >= 2
  // softmax(q k^T / sqrt(d) + causal mask) v, fused (Dao et al. 2022 FlashAttention on CUDA).
  Tensor out = at::scaled_dot_product_attention(split(q), split(k), split(v), {}, 0.0,
                                                /*is_causal=*/true);
#else
  Tensor scores = torch::matmul(split(q), split(k).transpose(-2, -1)) / std::sqrt(double(d));
  Tensor mask = torch::ones({s, s}, q.options().dtype(torch::kBool)).triu(1);  // future positions
  scores = scores.masked_fill(mask, -std::numeric_limits<float>::infinity());
  Tensor out = torch::matmul(torch::softmax(scores, -1), split(v));  // (b, heads, s, d)
#endif
  return out.transpose(1, 2).contiguous().view({b, s, heads * d});
}

// Megatron-LM's RowParallelLinear: the partial products all-reduced over TP, the replicated bias
// added once after; with one TP rank, the bias goes into the GEMM (its epilogue on CUDA).
// x: (..., in / tp), weight: (out, in / tp), bias: (out,) -> (..., out)
Tensor RowParallelLinear(const Tensor& x, const Tensor& weight, const Tensor& bias,
                         Communicator* tp) {
  if (tp->Size() == 1) return torch::linear(x, weight, bias);
  return ReduceFromTensorParallel(torch::linear(x, weight), tp) + bias;
}

struct BlockLayer;

// Reentrant activation checkpoint (as torch.utils.checkpoint with use_reentrant=True): forward
// without a graph keeping only the inputs, backward recomputes the forward with a graph and
// back-propagates through it, which also accumulates the parameters' gradients.
struct BlockCheckpoint : torch::autograd::Function<BlockCheckpoint> {
  static Tensor forward(AutogradContext* ctx, Tensor x, BlockLayer* block);
  static variable_list backward(AutogradContext* ctx, variable_list grad);
};

struct AttentionCheckpoint : torch::autograd::Function<AttentionCheckpoint> {
  static Tensor forward(AutogradContext* ctx, Tensor q, Tensor k, Tensor v, int64_t heads) {
    ctx->save_for_backward({q, k, v});
    ctx->saved_data["heads"] = heads;
    ctx->saved_data["autocast"] = AutocastEnabled();
    return CausalAttention(q, k, v, heads);
  }
  static variable_list backward(AutogradContext* ctx, variable_list grad) {
    variable_list saved = ctx->get_saved_variables();
    variable_list inputs;
    for (const Tensor& t : saved) inputs.push_back(t.detach().requires_grad_(true));
    Tensor out;
    {
      // The backward runs on autograd's thread: recompute under the forward's autocast state.
      torch::AutoGradMode enable(true);
      AutocastScope autocast(ctx->saved_data["autocast"].toBool());
      out = CausalAttention(inputs[0], inputs[1], inputs[2], ctx->saved_data["heads"].toInt());
    }
    variable_list grads = torch::autograd::grad({out}, inputs, {grad[0]});
    return {grads[0], grads[1], grads[2], Tensor()};
  }
};

struct BlockLayer : Layer {
  Shape x;
  Communicator* tp;
  Recompute recompute;
  BlockLayer(const Shape& shape, Communicator* comm, Recompute rc, int block, int num_blocks)
      : x(shape), tp(comm), recompute(rc) {
    const std::string p = fmt::format("block.{}.", block);
    // GPT-2: residual projections drawn with std 0.02 / sqrt(2 * num_blocks).
    specs = {
        Spec(p + "ln1.weight", {x.h}, Shard::kReplicated, Init::kOnes),
        Spec(p + "ln1.bias", {x.h}, Shard::kReplicated, Init::kZeros),
        Spec(p + "attn.q.weight", {x.h, x.h}, Shard::kRows, Init::kNormal),
        Spec(p + "attn.q.bias", {x.h}, Shard::kRows, Init::kZeros),
        Spec(p + "attn.k.weight", {x.h, x.h}, Shard::kRows, Init::kNormal),
        Spec(p + "attn.k.bias", {x.h}, Shard::kRows, Init::kZeros),
        Spec(p + "attn.v.weight", {x.h, x.h}, Shard::kRows, Init::kNormal),
        Spec(p + "attn.v.bias", {x.h}, Shard::kRows, Init::kZeros),
        Spec(p + "attn.o.weight", {x.h, x.h}, Shard::kColumns, Init::kScaledNormal),
        Spec(p + "attn.o.bias", {x.h}, Shard::kReplicated, Init::kZeros),
        Spec(p + "ln2.weight", {x.h}, Shard::kReplicated, Init::kOnes),
        Spec(p + "ln2.bias", {x.h}, Shard::kReplicated, Init::kZeros),
        Spec(p + "mlp.fc1.weight", {x.f, x.h}, Shard::kRows, Init::kNormal),
        Spec(p + "mlp.fc1.bias", {x.f}, Shard::kRows, Init::kZeros),
        Spec(p + "mlp.fc2.weight", {x.h, x.f}, Shard::kColumns, Init::kScaledNormal),
        Spec(p + "mlp.fc2.bias", {x.h}, Shard::kReplicated, Init::kZeros),
    };
    (void)num_blocks;
  }
  // (b, s, h) -> (b, s, h)
  Tensor Compute(const Tensor& in) {
    const auto& P = params;
    const int64_t local_heads = x.a / x.tp;
    // Under autocast the normalized input is cast once for the three projections.
    Tensor h1 = CopyToTensorParallel(AutocastInput(LayerNorm(in, P[0], P[1])), tp);
    Tensor q = torch::linear(h1, P[2], P[3]);  // (b, s, h / tp)
    Tensor k = torch::linear(h1, P[4], P[5]);
    Tensor v = torch::linear(h1, P[6], P[7]);
    Tensor attn = recompute == Recompute::kSelective
                      ? AttentionCheckpoint::apply(q, k, v, local_heads)
                      : CausalAttention(q, k, v, local_heads);
    Tensor out = in + RowParallelLinear(attn, P[8], P[9], tp);
    Tensor h2 = CopyToTensorParallel(AutocastInput(LayerNorm(out, P[10], P[11])), tp);
    Tensor m = torch::gelu(torch::linear(h2, P[12], P[13]));  // (b, s, f / tp)
    return out + RowParallelLinear(m, P[14], P[15], tp);
  }
  Tensor Forward(const Tensor& in, const Tensor&) override {
    if (recompute == Recompute::kFull) return BlockCheckpoint::apply(in, this);
    return Compute(in);
  }
};

Tensor BlockCheckpoint::forward(AutogradContext* ctx, Tensor x, BlockLayer* block) {
  ctx->save_for_backward({x});
  ctx->saved_data["block"] = reinterpret_cast<int64_t>(block);
  ctx->saved_data["autocast"] = AutocastEnabled();
  return block->Compute(x);
}

variable_list BlockCheckpoint::backward(AutogradContext* ctx, variable_list grad) {
  auto* block = reinterpret_cast<BlockLayer*>(ctx->saved_data["block"].toInt());
  Tensor x = ctx->get_saved_variables()[0].detach().requires_grad_(true);
  Tensor y;
  {
    torch::AutoGradMode enable(true);
    AutocastScope autocast(ctx->saved_data["autocast"].toBool());
    y = block->Compute(x);
  }
  torch::autograd::backward({y}, {grad[0]});
  return {x.grad(), Tensor()};
}

// The LM head's GEMM, h: (b, s, h) @ weight: (rows, h)^T -> (b, s, rows). On CUDA the weight is
// zero-padded to a multiple of kVocabPadding rows for the GEMM and the padded logits dropped
// after it: the same logits and gradients, but cuBLAS's tensor-core kernels need the dimension
// aligned, and for GPT-2's 50,257 (odd) it otherwise falls back to an sm75 CUTLASS kernel: on an
// H200 (LibTorch 2.11, 16,384 tokens, hidden 2048) the logits took 37.1 ms and their two
// backward GEMMs 47.2 ms, padded 4.2 ms and 7.9 ms (Kineto traces read by
// experiments/gpu/head_kernels.py: experiments/gpu/results/h200-2026-11-26b/head_kernels.txt).
// Megatron-LM pads the vocabulary itself (--make-vocab-size-divisible-by 128); padding only the
// GEMM keeps the model, its parameters and its checkpoints unchanged.
constexpr int64_t kVocabPadding = 128;
Tensor LogitsGemm(const Tensor& h, const Tensor& weight) {
  const int64_t rows = weight.size(0);
  const int64_t padded = (rows + kVocabPadding - 1) / kVocabPadding * kVocabPadding;
  if (!h.is_cuda() || padded == rows) return torch::linear(h, weight);
  // Cast first (under autocast), so that the padded copy is made once, in bf16.
  const Tensor w = torch::constant_pad_nd(AutocastInput(weight), {0, 0, 0, padded - rows});
  return torch::linear(h, w).narrow(-1, 0, rows);
}

struct HeadLayer : Layer {
  Shape x;
  Communicator* tp;
  Tensor shared_wte;  // set when the word embeddings are tied and on this stage
  HeadLayer(const Shape& shape, Communicator* comm, bool tied, bool embedding_on_stage,
            int embedding_layer)
      : x(shape), tp(comm) {
    specs.push_back(Spec("head.ln_f.weight", {x.h}, Shard::kReplicated, Init::kOnes));
    specs.push_back(Spec("head.ln_f.bias", {x.h}, Shard::kReplicated, Init::kZeros));
    if (!tied) {
      specs.push_back(Spec("head.lm_head.weight", {x.V, x.h}, Shard::kRows, Init::kNormal));
    } else if (!embedding_on_stage) {
      // Megatron-LM: the last stage keeps a copy of the tied word embeddings, initialized as the
      // first stage's and kept equal by all-reducing their gradients.
      ParamSpec copy = Spec("head.wte_copy", {x.V, x.h}, Shard::kRows, Init::kNormal, true);
      copy.seed_layer = embedding_layer;
      copy.seed_name = "embedding.wte";
      specs.push_back(copy);
    }
  }
  // hidden: (b, s, h), targets: (b, s) -> scalar mean cross entropy
  Tensor Forward(const Tensor& in, const Tensor& targets) override {
    Tensor h = CopyToTensorParallel(LayerNorm(in, params[0], params[1]), tp);
    const Tensor& weight = params.size() > 2 ? params[2] : shared_wte;  // (V / tp, h)
    Tensor logits = GatherLastDimFromTensorParallel(LogitsGemm(h, weight), tp);  // (b, s, V)
    return torch::cross_entropy_loss(logits.reshape({-1, x.V}), targets.reshape({-1}));
  }
};

uint64_t ParamSeed(uint64_t seed, int layer, const std::string& name) {
  // FNV-1a over the name, mixed with the run seed and the layer index.
  uint64_t hash = 1469598103934665603ull;
  for (char c : name) hash = (hash ^ static_cast<unsigned char>(c)) * 1099511628211ull;
  return hash ^ (seed * 0x9E3779B97F4A7C15ull) ^ (static_cast<uint64_t>(layer) << 32);
}

}  // namespace

GptStage::GptStage(const ModelSpec& model, int first_layer, int last_layer, Recompute recompute,
                   Communicator* tp, uint64_t seed, torch::Device device, bool bf16,
                   bool fp32_residual, InitScheme init)
    : GptStage(model, std::vector<std::pair<int, int>>{{first_layer, last_layer}}, recompute, tp,
               seed, device, bf16, fp32_residual, init) {}

GptStage::GptStage(const ModelSpec& model, const std::vector<std::pair<int, int>>& chunks,
                   Recompute recompute, Communicator* tp, uint64_t seed, torch::Device device,
                   bool bf16, bool fp32_residual, InitScheme init)
    : chunks_(chunks),
      num_model_layers_(model.NumLayers()),
      hidden_(model.hidden_size),
      bf16_(bf16),
      activation_dtype_(bf16 && !fp32_residual ? torch::kBFloat16 : torch::kFloat32) {
  CheckRuntimeModel(model);
  if (bf16 && !device.is_cuda())
    throw std::runtime_error("bf16 autocast runs on CUDA only; the CPU runtime trains in fp32");
  if (bf16 && !AutocastSupported())
    throw std::runtime_error(fmt::format("bf16 needs LibTorch >= 2.4 (this is {})", TORCH_VERSION));
  const std::string where = model.source.empty() ? model.name : model.source;
  STRATOS_CHECK(!chunks.empty(), "a stage of no chunks");
  for (size_t c = 0; c < chunks.size(); ++c) {
    const auto [first_layer, last_layer] = chunks[c];
    STRATOS_CHECK(0 <= first_layer && first_layer < last_layer && last_layer <= model.NumLayers() &&
                      (c == 0 || chunks[c - 1].second <= first_layer),
                  "stage chunk {}: layers [{}, {}) of {}", c, first_layer, last_layer,
                  model.NumLayers());
  }
  const bool holds_embedding = chunks.front().first == 0;
  const bool holds_head = chunks.back().second == model.NumLayers();
  Shape x{model.hidden_size,     model.num_attention_heads, model.ffn_hidden_size,
          model.vocab_size,      model.seq_length,          model.max_position_embeddings,
          tp->Size(),            tp->Rank()};
  const int T = x.tp;
  if (x.a % T != 0)
    ThrowInputError(where, "model.num_attention_heads", x.a,
                    fmt::format("must be divisible by tensor_parallel {}", T));
  if (x.f % T != 0)
    ThrowInputError(where, "model.ffn_hidden_size", x.f,
                    fmt::format("must be divisible by tensor_parallel {}", T));
  if (x.V % T != 0)
    ThrowInputError(where, "model.vocab_size", x.V,
                    fmt::format("must be divisible by tensor_parallel {} (vocab-parallel "
                                "embedding; pad the vocabulary)",
                                T));
  const int num_blocks = model.num_layers;
  const int head_layer = model.NumLayers() - 1;
  chunk_begin_.push_back(0);
  for (const auto& [first_layer, last_layer] : chunks) {
    for (int l = first_layer; l < last_layer; ++l) {
      std::unique_ptr<Layer> layer;
      if (l == 0) {
        layer = std::make_unique<EmbeddingLayer>(x, tp);
      } else if (l == head_layer) {
        layer = std::make_unique<HeadLayer>(x, tp, model.tie_word_embeddings, holds_embedding, 0);
      } else {
        layer = std::make_unique<BlockLayer>(x, tp, recompute, l - 1, num_blocks);
      }
      layer->index = l;
      layers_.push_back(std::move(layer));
    }
    chunk_begin_.push_back(static_cast<int>(layers_.size()));
  }

  // Local shapes and the flat buffer.
  auto local_shape = [&](const ParamSpec& spec) {
    std::vector<int64_t> shape = spec.full_shape;
    if (spec.shard == Shard::kRows) shape[0] /= T;
    if (spec.shard == Shard::kColumns) shape[1] /= T;
    return shape;
  };
  int64_t total = 0;
  for (const auto& layer : layers_)
    for (const ParamSpec& spec : layer->specs) {
      int64_t n = 1;
      for (int64_t d : local_shape(spec)) n *= d;
      total += n;
    }
  flat_ = torch::empty({total}, torch::TensorOptions().dtype(torch::kFloat32).device(device));
  const double std_normal = 0.02;
  const double std_scaled = 0.02 / std::sqrt(2.0 * std::max(1, num_blocks));
  int64_t offset = 0;
  for (auto& layer : layers_) {
    for (const ParamSpec& spec : layer->specs) {
      const std::vector<int64_t> shape = local_shape(spec);
      int64_t n = 1;
      for (int64_t d : shape) n *= d;
      Tensor view = flat_.narrow(0, offset, n).view(shape);
      {
        torch::NoGradGuard no_grad;
        Tensor full;
        const int seed_layer = spec.seed_layer >= 0 ? spec.seed_layer : layer->index;
        const std::string& seed_name = spec.seed_name.empty() ? spec.name : spec.seed_name;
        auto generator = at::make_generator<at::CPUGeneratorImpl>(ParamSeed(seed, seed_layer, seed_name));
        // Weight matrices are (out, in).
        const double fan_out = static_cast<double>(spec.full_shape[0]);
        const double fan_in = spec.matrix ? static_cast<double>(spec.full_shape[1]) : 1.0;
        const InitScheme scheme = spec.matrix ? init : InitScheme::kGpt2;
        switch (spec.init) {
          case Init::kNormal:
          case Init::kScaledNormal:
            if (scheme == InitScheme::kXavier) {
              const double a = std::sqrt(6.0 / (fan_in + fan_out));
              full = torch::rand(spec.full_shape, generator, torch::kFloat32) * (2 * a) - a;
            } else {
              const double std_dev =
                  scheme == InitScheme::kKaiming ? std::sqrt(2.0 / fan_in)
                  : spec.init == Init::kScaledNormal && scheme == InitScheme::kGpt2
                      ? std_scaled
                      : std_normal;
              full = torch::randn(spec.full_shape, generator, torch::kFloat32) * std_dev;
            }
            break;
          case Init::kZeros: full = torch::zeros(spec.full_shape); break;
          case Init::kOnes: full = torch::ones(spec.full_shape); break;
        }
        if (spec.shard == Shard::kRows) full = full.narrow(0, x.tp_rank * shape[0], shape[0]);
        if (spec.shard == Shard::kColumns) full = full.narrow(1, x.tp_rank * shape[1], shape[1]);
        view.copy_(full);
      }
      view.requires_grad_(true);
      layer->params.push_back(view);
      parameters_.push_back(view);
      infos_.push_back({spec.name, layer->index, offset, n, spec.word_embedding});
      offset += n;
    }
  }
  // Tied embeddings on one stage: the head uses the embedding's own wte.
  if (holds_embedding && holds_head && model.tie_word_embeddings) {
    auto* head = static_cast<HeadLayer*>(layers_.back().get());
    head->shared_wte = layers_.front()->params[0];
  }
}

GptStage::~GptStage() = default;

bool GptStage::IsLast() const { return chunks_.back().second == num_model_layers_; }

std::vector<std::pair<int64_t, int64_t>> GptStage::LayerParameterRanges(int layer) const {
  std::vector<std::pair<int64_t, int64_t>> ranges;
  bool found = false;
  for (const auto& l : layers_) found = found || l->index == layer;
  STRATOS_CHECK(found, "layer {} is not on this stage", layer);
  for (const ParameterInfo& info : infos_) {
    if (info.layer != layer) continue;
    if (!ranges.empty() && ranges.back().second == info.offset)
      ranges.back().second += info.numel;
    else
      ranges.emplace_back(info.offset, info.offset + info.numel);
  }
  // The head of tied embeddings on one stage reads the embedding's word embeddings.
  if (layer == num_model_layers_ - 1 &&
      static_cast<const HeadLayer&>(*layers_.back()).shared_wte.defined())
    for (const ParameterInfo& info : infos_)
      if (info.layer == 0 && info.word_embedding)
        ranges.emplace(ranges.begin(), info.offset, info.offset + info.numel);
  return ranges;
}

std::vector<int> GptStage::LayerIndices() const {
  std::vector<int> indices;
  for (const auto& layer : layers_) indices.push_back(layer->index);
  return indices;
}

namespace {
// Identity forward; backward calls the stage's layer hook with kBackward first. `hook` points
// at the stage's own hook member, which outlives the graph as the stage does.
struct LayerBackwardHook : torch::autograd::Function<LayerBackwardHook> {
  static Tensor forward(AutogradContext* ctx, Tensor x, const GptStage::LayerHook* hook,
                        int64_t layer) {
    ctx->saved_data["hook"] = reinterpret_cast<int64_t>(hook);
    ctx->saved_data["layer"] = layer;
    return x.view_as(x);
  }
  static variable_list backward(AutogradContext* ctx, variable_list grad) {
    const auto* hook =
        reinterpret_cast<const GptStage::LayerHook*>(ctx->saved_data["hook"].toInt());
    // A graph kept after its hook was cleared (SetLayerHook({})) passes through.
    if (*hook)
      (*hook)(static_cast<int>(ctx->saved_data["layer"].toInt()), GptStage::LayerEvent::kBackward);
    return {grad[0], Tensor(), Tensor()};
  }
};
}  // namespace

Tensor GptStage::Forward(const Tensor& input, const Tensor& targets, int chunk) {
  STRATOS_CHECK(0 <= chunk && chunk < NumChunks(), "chunk {} of {}", chunk, NumChunks());
  AutocastScope autocast(bf16_);
  Tensor x = input;
  for (int l = chunk_begin_[chunk]; l < chunk_begin_[chunk + 1]; ++l) {
    auto& layer = layers_[l];
    if (hook_) hook_(layer->index, LayerEvent::kForward);
    x = layer->Forward(x, targets);
    // The embedding sums fp32 tables; the residual stream after it has the activation dtype.
    if (layer->index == 0) x = x.to(activation_dtype_);
    if (hook_) {
      hook_(layer->index, LayerEvent::kForwardDone);
      x = LayerBackwardHook::apply(x, &hook_, layer->index);
    }
  }
  return x;
}

}  // namespace stratos
