#pragma once
// A GPT built from the same ModelSpec as the cost model, one pipeline stage at a time.
//
// Layer i of the stage is layer i of ModelSpec::layers: [embedding, num_layers x block, head].
// The embedding is token + learned position embeddings; a block is pre-LayerNorm causal
// self-attention and a GeLU MLP with biases (GPT-2); the head is the final LayerNorm, the LM head
// (tied to the word embeddings when tie_word_embeddings) and the mean cross entropy. No dropout:
// the run is deterministic.
//
// Tensor parallelism is Megatron-LM's (Shoeybi et al. 2019, §3): Q, K, V and fc1 are
// column-parallel (heads and ffn columns split over TP ranks), the attention output projection
// and fc2 are row-parallel followed by an all-reduce, the word embeddings are vocab-parallel
// (rows split, looked up where owned, all-reduced). The LM head is column-parallel over the
// vocabulary; instead of Megatron's vocab-parallel cross entropy, the logits are all-gathered
// and every TP rank computes the full cross entropy (a documented simplification: same loss and
// gradients, TP-times more logit memory and an all-gather of (b, s, V) floats).
//
// Parameters are initialized from the full (unsharded) tensor drawn from a generator seeded by
// (seed, layer, parameter), then sliced: a run's initial weights do not depend on its plan.
// All parameters of a stage are views into one flat fp32 buffer (FlatParameters()) on the
// stage's device. With bf16 (CUDA only) the forward runs under autocast (runtime/device.h):
// GEMMs and attention in bf16, the loss in fp32, fp32 parameters (the master weights) and
// gradients. The residual stream, the layer norms on it and the activations passed between
// stages are bf16 (Megatron-LM's default); with fp32_residual (Megatron's
// --fp32-residual-connection) they are fp32, and the layer norms run in fp32. Attention is
// at::scaled_dot_product_attention (fused: FlashAttention on CUDA) with LibTorch >= 2.0, the
// explicit masked softmax before.
#include <torch/torch.h>

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "costmodel/model.h"
#include "costmodel/problem.h"
#include "runtime/communicator.h"

namespace stratos {

// How the weight matrices of the blocks (Q, K, V, the attention output projection, fc1, fc2) and
// an untied LM head are drawn; embeddings are normal(0, 0.02), biases 0 and layer norms 1 / 0 in
// every scheme. fan_in / fan_out are the full (unsharded) matrix's input / output sizes.
//   kGpt2:   normal(0, 0.02), the residual projections (attention output, fc2) with std
//            0.02 / sqrt(2 L) for L blocks (GPT-2, Radford et al. 2019, §2.3; the runtime's
//            default: "scaled residual" init);
//   kNormal: normal(0, 0.02) for every matrix (GPT, Radford et al. 2018, §4.1);
//   kXavier: uniform(-a, a), a = sqrt(6 / (fan_in + fan_out)) (Glorot & Bengio, AISTATS 2010,
//            eq. 16);
//   kKaiming: normal(0, sqrt(2 / fan_in)) (He et al., ICCV 2015, eq. 10).
enum class InitScheme { kGpt2, kNormal, kXavier, kKaiming };
// "gpt2" | "normal" | "xavier" | "kaiming"
const char* InitSchemeName(InitScheme scheme);
// The scheme named `name`; throws InputError naming `where`, `key` and the names it accepts.
InitScheme ParseInitScheme(const std::string& name, const std::string& where,
                           const std::string& key);

// Checks that the runtime can build `model`: family "gpt", kv heads == heads, positive sizes.
// Throws InputError naming the model and the rule otherwise.
void CheckRuntimeModel(const ModelSpec& model);

// Megatron f and g (Shoeybi et al. 2019, Fig. 3) and the logits gather, as autograd functions.
// `tp` may be a group of one (then they are identities).
// Identity forward, all-reduce of the gradient backward.  x: any shape
torch::Tensor CopyToTensorParallel(const torch::Tensor& x, Communicator* tp);
// All-reduce forward, identity backward.  x: any shape
torch::Tensor ReduceFromTensorParallel(const torch::Tensor& x, Communicator* tp);
// All-gather along the last dimension forward; backward keeps this rank's slice.
// x: (..., n) -> (..., n * tp->Size())
torch::Tensor GatherLastDimFromTensorParallel(const torch::Tensor& x, Communicator* tp);

struct ParameterInfo {
  std::string name;       // e.g. "block.2.attn.q.weight"
  int layer = 0;          // index into ModelSpec::layers
  int64_t offset = 0;     // into FlatParameters()
  int64_t numel = 0;      // local (sharded) elements
  bool word_embedding = false;  // the (possibly tied) word embedding shard, wte or lm_head copy
};

class GptStage {
 public:
  // Builds layers [first_layer, last_layer) of `model` for TP rank tp->Rank() of tp->Size(),
  // with its parameters on `device` (initialized on the CPU by `init`, so equal on every device)
  // and, if `bf16`, a bf16-autocast forward (CUDA only) whose residual stream is bf16, or fp32
  // with `fp32_residual`. Throws InputError if the model is not supported
  // (CheckRuntimeModel) or TP does not divide the heads, the ffn size or the vocabulary, and
  // std::runtime_error for bf16 on a CPU device or on a LibTorch without autocast (< 2.4).
  GptStage(const ModelSpec& model, int first_layer, int last_layer, Recompute recompute,
           Communicator* tp, uint64_t seed, torch::Device device = torch::Device(torch::kCPU),
           bool bf16 = false, bool fp32_residual = false, InitScheme init = InitScheme::kGpt2);
  // A stage of several model chunks (interleaved 1F1B's virtual stages on one pipeline rank):
  // `chunks` are [first, last) layer ranges in model order, not overlapping; their parameters
  // share one flat buffer, in chunk order. Throws as the constructor above.
  GptStage(const ModelSpec& model, const std::vector<std::pair<int, int>>& chunks,
           Recompute recompute, Communicator* tp, uint64_t seed,
           torch::Device device = torch::Device(torch::kCPU), bool bf16 = false,
           bool fp32_residual = false, InitScheme init = InitScheme::kGpt2);
  ~GptStage();
  GptStage(const GptStage&) = delete;
  GptStage& operator=(const GptStage&) = delete;

  // Whether the stage holds the embedding (first layer) / the head (last layer), in any chunk.
  bool IsFirst() const { return chunks_.front().first == 0; }
  bool IsLast() const;
  int NumChunks() const { return static_cast<int>(chunks_.size()); }
  // input: token ids (b, s) int64 on the first stage, hidden states (b, s, h) of
  // ActivationDtype() otherwise, on the stage's device.
  // targets: (b, s) int64 token ids, used on the last stage only.
  // Returns the mean cross entropy (scalar, fp32) on the last stage, hidden states (b, s, h) of
  // ActivationDtype() otherwise.
  // `chunk`: which of the stage's chunks runs (0 for a stage of one).
  torch::Tensor Forward(const torch::Tensor& input, const torch::Tensor& targets, int chunk = 0);

  // Where ZeRO-3's parameter gathers (runtime/data_parallel.h ParameterGatherer) hook in: the
  // hook is called with a layer index (into ModelSpec::layers) and
  //   kForward      before the layer's forward pass,
  //   kForwardDone  after it,
  //   kBackward     when the backward pass reaches the layer's output, before the layer's own
  //                 backward (and before a fully recomputed block reruns its forward).
  // The backward calls run on autograd's thread. An empty hook (the default) is not called.
  enum class LayerEvent { kForward, kForwardDone, kBackward };
  using LayerHook = std::function<void(int layer, LayerEvent event)>;
  void SetLayerHook(LayerHook hook) { hook_ = std::move(hook); }
  // The [begin, end) ranges of FlatParameters() that layer `layer` (a ModelSpec::layers index on
  // this stage) reads: its own parameters, plus the embedding's word embeddings for the head of
  // tied embeddings on one stage. Throws InternalError for a layer not on the stage.
  std::vector<std::pair<int64_t, int64_t>> LayerParameterRanges(int layer) const;
  // The stage's layers (ModelSpec::layers indices), in order.
  std::vector<int> LayerIndices() const;

  // Views into the flat buffer, in layer order.
  const std::vector<torch::Tensor>& Parameters() const { return parameters_; }
  const std::vector<ParameterInfo>& ParameterInfos() const { return infos_; }
  torch::Tensor FlatParameters() const { return flat_; }  // (num_local_parameters,)
  int64_t NumLocalParameters() const { return flat_.numel(); }
  int HiddenSize() const { return hidden_; }
  torch::Device Device() const { return flat_.device(); }
  bool Bf16() const { return bf16_; }
  // The dtype of the residual stream and of the activations and gradients sent between stages:
  // bf16 for a bf16 stage without fp32_residual, else fp32.
  torch::ScalarType ActivationDtype() const { return activation_dtype_; }

  struct Layer;  // defined in gpt.cc

 private:
  std::vector<std::pair<int, int>> chunks_;
  std::vector<int> chunk_begin_;  // chunk c is layers_[chunk_begin_[c], chunk_begin_[c + 1])
  int num_model_layers_;
  int hidden_;
  bool bf16_;
  torch::ScalarType activation_dtype_;
  std::vector<std::unique_ptr<Layer>> layers_;
  torch::Tensor flat_;
  std::vector<torch::Tensor> parameters_;
  std::vector<ParameterInfo> infos_;
  LayerHook hook_;
};

}  // namespace stratos
