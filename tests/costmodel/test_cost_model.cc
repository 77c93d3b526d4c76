// The cost model pinned to published formulas and hand-computed numbers.
#include <doctest/doctest.h>

#include <tuple>
#include <utility>

#include "costmodel/compression.h"
#include "costmodel/cost_model.h"
#include "costmodel/error.h"
#include "costmodel/evaluate.h"
#include "costmodel/synthetic.h"
#include "test_util.h"

using namespace stratos;

namespace {

// A GPT shape on a one-node cluster of ideal devices with plenty of memory.
Problem GptProblem(int hidden, int heads, int seq, int layers, int gpus) {
  Problem problem;
  ModelSpec& m = problem.model;
  m.name = "test-gpt";
  m.family = "gpt";
  m.source = "test";
  m.hidden_size = hidden;
  m.num_layers = layers;
  m.num_attention_heads = heads;
  m.num_key_value_heads = heads;
  m.ffn_hidden_size = 4 * hidden;
  m.vocab_size = 51200;
  m.seq_length = seq;
  m.max_position_embeddings = seq;
  m.tie_word_embeddings = true;
  BuildTransformerLayers(m);
  problem.cluster.name = "test";
  problem.cluster.devices.push_back({"gpu", 100e12, 1e15, 1e12, 1.0, 0.0, "test"});
  problem.cluster.node_groups.push_back({1, gpus, "gpu"});
  problem.cluster.networks.push_back({"nvlink", 100e9, 0.0, 1.0, "test"});
  problem.training.global_batch_size = 8;
  return problem;
}

StageConfig Config(int dp, int tp, int zero, Recompute recompute) {
  return StageConfig{1, dp * tp, dp, tp, zero, recompute, {}};
}

}  // namespace

TEST_CASE("ZeRO model-state bytes match Rajbhandari et al. Figure 1 (7.5B params, Nd = 64)") {
  // One explicit layer holding 7.5e9 parameters, on 64 data-parallel devices.
  Problem problem;
  problem.model.family = "explicit";
  LayerSpec layer;
  layer.param_count = layer.stored_param_count = 7.5e9;
  problem.model.layers = {layer};
  problem.cluster.devices.push_back({"gpu", 1e15, 1e15, 1e12, 1.0, 0.0, ""});
  problem.cluster.node_groups.push_back({8, 8, "gpu"});
  problem.cluster.networks = {{"intra", 1e11, 0, 1, ""}, {"inter", 1e11, 0, 1, ""}};
  problem.training.global_batch_size = 64;
  const CostModel cost_model(problem);
  const double expected_gb[] = {120, 31.4, 16.6, 1.9};
  for (int zero = 0; zero <= 3; ++zero) {
    const StageConfig config{8, 8, 64, 1, zero, Recompute::kNone, {}};
    REQUIRE(cost_model.CheckConfig(config, 1) == "");
    CHECK(cost_model.LayerTerms(0, config, 1).state_bytes / 1e9 ==
          doctest::Approx(expected_gb[zero]).epsilon(0.01));
  }
  // ZeRO-3 holds the layer's gathered parameters, the next layer's prefetched and its gradient.
  const double pb = problem.training.param_dtype_bytes, gb = problem.training.grad_dtype_bytes;
  CHECK(cost_model.StageOverhead({8, 8, 64, 1, 3, Recompute::kNone, {}}, 1, true, true)
            .working_bytes == doctest::Approx(7.5e9 * (2 * pb + gb)));
}

TEST_CASE("ZeRO-3 holds the largest layer's gathered parameters and gradient and the next "
          "layer's prefetched parameters, on every stage with DP > 1") {
  // h = 1024, V = 51200, s = 512: the largest layer is the embedding, (V + s) x h with learned
  // positions, above a block (12 h^2 + 13 h).
  Problem problem = GptProblem(1024, 16, 512, 2, 8);
  problem.training.param_dtype_bytes = 2;
  problem.training.grad_dtype_bytes = 4;
  const CostModel cost_model(problem);
  const double largest = (51200.0 + 512) * 1024;
  CHECK(problem.model.layers.front().stored_param_count == largest);
  // The block's (other, h) weight matrices (what gradient compression compresses): fused QKV,
  // the output projection, fc1 and fc2.
  CHECK(LayerWeightMatrixRows(problem.model, LayerKind::kTransformer) ==
        std::vector<double>{3 * 1024, 1024, 4 * 1024, 4 * 1024});
  CHECK(LayerWeightMatrixRows(problem.model, LayerKind::kEmbedding) ==
        std::vector<double>{51200, 512});
  CHECK(LayerWeightMatrixRows(problem.model, LayerKind::kExplicit).empty());
  for (int tp : {1, 2}) {
    const auto zero3 = cost_model.StageOverhead(Config(4, tp, 3, Recompute::kNone), 2, true, true);
    CHECK(zero3.working_bytes == doctest::Approx(largest / tp * (2 * 2 + 4)));
    // Full recomputation's working set adds to it.
    const auto both = cost_model.StageOverhead(Config(4, tp, 3, Recompute::kFull), 2, true, true);
    const auto full = cost_model.StageOverhead(Config(4, tp, 2, Recompute::kFull), 2, true, true);
    CHECK(full.working_bytes > 0);
    CHECK(both.working_bytes == doctest::Approx(zero3.working_bytes + full.working_bytes));
  }
  // Nothing to gather without DP, nor below ZeRO-3.
  CHECK(cost_model.StageOverhead(Config(1, 2, 3, Recompute::kNone), 8, true, true).working_bytes ==
        0);
  CHECK(cost_model.StageOverhead(Config(4, 2, 2, Recompute::kNone), 2, true, true).working_bytes ==
        0);
  // A small vocabulary: a block, 12 h^2 + 13 h, is the largest layer.
  Problem small_vocab = GptProblem(1024, 16, 512, 2, 8);
  small_vocab.model.vocab_size = 1000;
  BuildTransformerLayers(small_vocab.model);
  const CostModel small(small_vocab);
  CHECK(small.StageOverhead(Config(4, 1, 3, Recompute::kNone), 2, true, true).working_bytes ==
        doctest::Approx((12.0 * 1024 * 1024 + 13 * 1024) *
                        (2 * small_vocab.training.param_dtype_bytes +
                         small_vocab.training.grad_dtype_bytes)));
}

TEST_CASE("ZeRO-3 all-gathers a parameter tensor at a time (DeepSpeed): a GPT block's 12 each pay "
          "the latency; a layer at a time (FSDP) once") {
  // One block of h = 1024 (12 h^2 + 13 h bf16 parameters) on a DP group of 4 GPUs of one node
  // at 100 GB/s with 1 us per ring step: an all-gather of B bytes takes 3/4 B / 100 GB/s + 3 us.
  Problem problem = GptProblem(1024, 16, 512, 2, 8);
  problem.cluster.networks[0].latency_seconds = 1e-6;
  const double h = 1024, params = 12 * h * h + 13 * h;
  const LayerSpec& block = problem.model.layers[1];
  // The block's tensors: qkv, out, fc1, fc2 weights, then 8 vectors (4 biases, 2 LayerNorms'
  // weight and bias) sharing the 13 h other elements; a llama block: 5 matrices and 2 norms.
  const std::vector<double> tensors = LayerParameterTensorElements(problem.model, block, 1);
  REQUIRE(tensors.size() == 12);
  CHECK(tensors[0] == 3 * h * h);
  CHECK(tensors[2] == 4 * h * h);
  CHECK(tensors[11] == doctest::Approx(13 * h / 8));
  double sum = 0;
  for (double n : tensors) sum += n;
  CHECK(sum == doctest::Approx(params));
  CHECK(LayerParameterTensorElements(problem.model, block, 2).size() == 12);
  CHECK(LayerParameterTensorElements(problem.model, problem.model.layers[0], 1).size() == 2);
  CHECK(LayerParameterTensorElements(problem.model, problem.model.layers.back(), 1).size() == 3);
  ModelSpec llama = problem.model;
  llama.family = "llama";
  BuildTransformerLayers(llama);
  CHECK(LayerParameterTensorElements(llama, llama.layers[1], 1).size() == 7);
  CHECK(LayerParameterTensorElements(llama, llama.layers.back(), 1).size() == 2);  // norm, lm_head
  // BERT: word, position and token-type embeddings' LayerNorm; the head's pooler and MLM
  // transform (dense + bias each), its LayerNorm, the decoder (tied) and its bias.
  ModelSpec bert = problem.model;
  bert.family = "bert";
  BuildTransformerLayers(bert);
  CHECK(LayerParameterTensorElements(bert, bert.layers[1], 1).size() == 12);
  for (const LayerSpec& layer : bert.layers) {
    double total = 0;
    for (double n : LayerParameterTensorElements(bert, layer, 2)) total += n;
    CHECK(total == doctest::Approx(layer.stored_param_count / 2));
  }
  LayerSpec op = block;  // an operator of an operator-granularity block: one submodule
  op.block_operator = true;
  CHECK(LayerParameterTensorElements(problem.model, op, 2) == std::vector<double>{params / 2});

  const double bandwidth = 3.0 / 4 * params * 2 / 100e9;
  auto gather = [&](Zero3Gather unit, Recompute recompute) {
    problem.training.zero3_gather = unit;
    return CostModel(problem).LayerTerms(1, Config(4, 1, 3, recompute), 1).zero3_gather_seconds;
  };
  // Forward and backward: two gathers of the block per microbatch; full recomputation a third.
  CHECK(gather(Zero3Gather::kLayer, Recompute::kNone) == doctest::Approx(2 * (bandwidth + 3e-6)));
  CHECK(gather(Zero3Gather::kTensor, Recompute::kNone) ==
        doctest::Approx(2 * (bandwidth + 12 * 3e-6)));
  CHECK(gather(Zero3Gather::kTensor, Recompute::kFull) ==
        doctest::Approx(3 * (bandwidth + 12 * 3e-6)));
  // Prefetched (FSDP), each pass pays what the block's compute in it does not hide: on this
  // ideal device (100 TFLOP/s) the block's compute hides the whole gather; on a 1 GB/s link the
  // gather outlasts each pass by its difference.
  const LayerCompute compute = LayerComputeSeconds(problem.model, 1, problem.cluster.Device(),
                                                   problem.training, 2, 1, Recompute::kFull);
  REQUIRE(compute.forward_seconds > bandwidth + 3e-6);
  CHECK(gather(Zero3Gather::kLayerPrefetch, Recompute::kFull) == 0.0);
  problem.cluster.networks[0].bandwidth_bytes_per_second = 1e9;
  const double slow = 3.0 / 4 * params * 2 / 1e9 + 3e-6;
  REQUIRE(slow > compute.backward_seconds);
  CHECK(gather(Zero3Gather::kLayerPrefetch, Recompute::kFull) ==
        doctest::Approx(3 * slow - compute.forward_seconds - compute.backward_seconds -
                        compute.recompute_seconds));
  CHECK(gather(Zero3Gather::kLayer, Recompute::kFull) == doctest::Approx(3 * slow));
  // The default is DeepSpeed's.
  CHECK(TrainingSpec{}.zero3_gather == Zero3Gather::kTensor);
  CHECK(ParseZero3Gather("layer", "test") == Zero3Gather::kLayer);
  CHECK(ParseZero3Gather("layer-prefetch", "test") == Zero3Gather::kLayerPrefetch);
  CHECK(std::string(Zero3GatherName(Zero3Gather::kLayerPrefetch)) == "layer-prefetch");
  // One list of names, every one of which parses back to its unit.
  CHECK(Zero3GatherNames() == std::vector<std::string>{"tensor", "layer", "layer-prefetch"});
  for (const std::string& name : Zero3GatherNames())
    CHECK(Zero3GatherName(ParseZero3Gather(name, "test")) == name);
  CHECK_THROWS_WITH_AS(ParseZero3Gather("block", "flags"),
                       doctest::Contains("must be \"tensor\", \"layer\" or \"layer-prefetch\""),
                       InputError);
}

TEST_CASE("ZeRO-2/3 reduce-scatter every microbatch's gradients: m - 1 reduce-scatters (their "
          "exposed share) on top of the iteration's last one") {
  // One block of h = 1024 (12 h^2 + 13 h parameters, fp32 gradients) on a DP group of 4 GPUs of
  // one node at 100 GB/s: a reduce-scatter moves 3/4 of the gradient bytes over each GPU's link.
  Problem problem = GptProblem(1024, 16, 512, 2, 8);
  problem.training.grad_dtype_bytes = 4;
  const double grad_bytes = (12.0 * 1024 * 1024 + 13 * 1024) * 4;
  const double reduce_scatter = 3.0 / 4 * grad_bytes / 100e9;
  for (double overlap : {0.0, 0.5}) {
    problem.training.dp_overlap_fraction = overlap;
    const CostModel cost_model(problem);
    for (int m : {1, 2}) {  // global batch 8 over DP 4: 2 samples per replica
      CAPTURE(m);
      const double expected = (1 - overlap) * (m - 1.0) / m * reduce_scatter;
      for (int zero : {2, 3})
        CHECK(cost_model.LayerTerms(1, Config(4, 1, zero, Recompute::kNone), m)
                  .zero_reduce_scatter_seconds == doctest::Approx(expected));
      // ZeRO 0-1 keep whole gradients and accumulate them: one sync per iteration.
      for (int zero : {0, 1})
        CHECK(cost_model.LayerTerms(1, Config(4, 1, zero, Recompute::kNone), m)
                  .zero_reduce_scatter_seconds == 0.0);
    }
    // A one-stage plan: ZeRO-2 costs ZeRO-1's iteration plus the m - 1 earlier reduce-scatters
    // of every layer (both end with a reduce-scatter and an all-gather of the parameters), less
    // the gradient accumulation (2 x 4 - 2 = 6 bytes per parameter per microbatch, fused) into
    // the 3 / 4 of the gradients that are not this rank's shard.
    Plan plan;
    plan.global_batch_size = 8;
    plan.num_microbatches = 2;
    plan.stages = {{0, problem.NumLayers(), Config(4, 1, 1, Recompute::kNone)}};
    const double zero1 = Evaluate(cost_model, plan).iteration_seconds;
    plan.stages[0].config = Config(4, 1, 2, Recompute::kNone);
    double all_layers = 0, accumulation = 0;
    for (const LayerSpec& layer : problem.model.layers) {
      all_layers += 3.0 / 4 * layer.stored_param_count * 4 / 100e9;
      accumulation += 3.0 / 4 * layer.stored_param_count * 6 / 1e12;
    }
    CHECK(Evaluate(cost_model, plan).iteration_seconds ==
          doctest::Approx(zero1 + (1 - overlap) * all_layers - 2 * accumulation));
  }
  // A framework that keeps the whole gradient buffer reduces once per iteration.
  problem.training.zero_reduce_every_microbatch = false;
  CHECK(CostModel(problem).LayerTerms(1, Config(4, 1, 2, Recompute::kNone), 2)
            .zero_reduce_scatter_seconds == 0.0);
}

TEST_CASE("DP sync: ZeRO-0 all-reduces the gradients, ZeRO-1/2 reduce-scatter them and "
          "all-gather the half-precision parameters, ZeRO-3 only reduce-scatters, each collective "
          "at its own calibration") {
  // One block of h = 1024 (12 h^2 + 13 h parameters), fp32 gradients and bf16 parameters, on a
  // DP group of 4 GPUs of one node at 100 GB/s: each collective moves (n - 1)/n = 3/4 of its
  // buffer over each GPU's link per pass, an all-reduce two passes.
  Problem problem = GptProblem(1024, 16, 512, 2, 8);
  problem.training.grad_dtype_bytes = 4;
  problem.training.param_dtype_bytes = 2;
  const double params = 12.0 * 1024 * 1024 + 13 * 1024;
  auto sync = [&](const Problem& p, int zero) {
    return CostModel(p).LayerTerms(1, Config(4, 1, zero, Recompute::kNone), 2).dp_sync_seconds;
  };
  CHECK(sync(problem, 0) == doctest::Approx(2 * 3.0 / 4 * params * 4 / 100e9));
  for (int zero : {1, 2})
    CHECK(sync(problem, zero) == doctest::Approx(3.0 / 4 * params * (4 + 2) / 100e9));
  CHECK(sync(problem, 3) == doctest::Approx(3.0 / 4 * params * 4 / 100e9));
  // A network calibrated per collective (calibrate/): reduce-scatters at 50 GB/s, all-gathers at
  // 80, all-reduces at 100. ZeRO-2's earlier reduce-scatters (m = 2: half of one) at 50 too.
  Problem fitted = problem;
  NetworkLevel& level = fitted.cluster.networks[0];
  level.collective_fits[static_cast<int>(Collective::kReduceScatter)] = LinkFit{50e9, 0.0};
  level.collective_fits[static_cast<int>(Collective::kAllGather)] = LinkFit{80e9, 0.0};
  CHECK(sync(fitted, 0) == doctest::Approx(sync(problem, 0)));
  CHECK(sync(fitted, 1) ==
        doctest::Approx(3.0 / 4 * params * 4 / 50e9 + 3.0 / 4 * params * 2 / 80e9));
  CHECK(sync(fitted, 3) == doctest::Approx(3.0 / 4 * params * 4 / 50e9));
  CHECK(CostModel(fitted).LayerTerms(1, Config(4, 1, 2, Recompute::kNone), 2)
            .zero_reduce_scatter_seconds == doctest::Approx(0.5 * 3.0 / 4 * params * 4 / 50e9));
}

TEST_CASE("the head keeps the fp32 softmax of its logits and holds the loss's transient beside "
          "it once per stage") {
  // h = 1024, V = 51200, s = 512; TP 2 splits the logits (vocabulary-parallel cross entropy).
  Problem problem = GptProblem(1024, 16, 512, 2, 8);
  const int head = problem.NumLayers() - 1;
  const double logits = 512.0 * 51200;
  CHECK(problem.model.layers[head].logits_per_sample == logits);
  CHECK(problem.model.layers[1].logits_per_sample == 0);
  for (double transient : {2.0, 6.0}) {
    problem.training.loss_transient_bytes_per_logit = transient;
    const CostModel cost_model(problem);
    // 8 samples over DP 2 in m = 2 microbatches: b = 2 per replica.
    const StageTerms terms = cost_model.LayerTerms(head, Config(2, 2, 0, Recompute::kNone), 2);
    CHECK(terms.working_bytes == doctest::Approx(transient * 2 * logits / 2));
    CHECK(terms.activation_bytes ==
          doctest::Approx(2 * (2.0 * 512 * 1024 + 4 * logits) / 2));  // bf16 input (sequence
                                                                    // parallel) + softmax
    CHECK(cost_model.LayerTerms(1, Config(2, 2, 0, Recompute::kNone), 2).working_bytes == 0);
  }
  problem.training.loss_transient_bytes_per_logit = -1;
  CHECK_THROWS_AS(ValidateTrainingSpec(problem.training, "test"), InputError);
}

TEST_CASE("the head's logits go through HBM in the cast and the cross entropy's passes, hand "
          "computed; the transient is memory only") {
  // h = 1024, V = 51200, s = 512, one sample on one rank; peak 100 TFLOP/s at efficiency 1,
  // HBM 1 TB/s (GptProblem).
  Problem problem = GptProblem(1024, 16, 512, 2, 8);
  const int head = problem.NumLayers() - 1;
  const double logits = 512.0 * 51200;
  const double gemm = 2.0 * 512 * 1024 * 51200 / 100e12;
  const double input = 2.0 * 512 * 1024;  // bf16 input of the LM head, stored
  for (double transient : {2.0, 6.0}) {
    problem.training.loss_transient_bytes_per_logit = transient;
    const LayerCompute c = LayerComputeSeconds(problem.model, head, problem.cluster.Device(),
                                               problem.training, 1.0, 1, Recompute::kNone);
    // Forward: bf16 logits written (2), cast to fp32 (2 + 4), max (4), subtract (8), exp (8),
    // sum (4), normalize (8). Backward: 2x the GEMM, the input's traffic twice, the gradient's
    // scaling (8) and cast (6).
    CHECK(c.loss_forward_seconds == doctest::Approx(logits * 32 / 1e12));
    CHECK(c.forward_seconds == doctest::Approx(gemm + input / 1e12 + logits * (2 + 6 + 32) / 1e12));
    CHECK(c.backward_seconds == doctest::Approx(2 * gemm + 2 * input / 1e12 + logits * 14 / 1e12));
  }
  // A block has no loss.
  CHECK(LayerComputeSeconds(problem.model, 1, problem.cluster.Device(), problem.training, 1.0, 1,
                            Recompute::kNone)
            .loss_forward_seconds == 0);
}

TEST_CASE("unfused elementwise kernels (Megatron-LM v1.1.5 without its fusions): a GPT block's "
          "HBM traffic counted by hand, replicated over TP ranks") {
  // h = 1024, f = 4096, a = 16, s = 512, TP 2, no sequence parallelism; HBM 1 TB/s (GptProblem).
  Problem problem = GptProblem(1024, 16, 512, 2, 8);
  problem.training.sequence_parallel = false;
  const double h = 1024, f = 4096, s = 512, scores = 16 * s;  // scores per token
  const BlockElementwiseBytes bytes = UnfusedBlockElementwiseBytes(problem.model, 2, false, true);
  // Forward: 38 h replicated (two LayerNorms, two bias-dropout-adds), 4 h + 8 f and 14 a s on
  // this rank's half (permute copy, bias add and GeLU; masked_fill_, softmax, dropout).
  CHECK(bytes.forward == doctest::Approx(s * (38 * h + (4 * h + 8 * f) / 2 + 14 * scores / 2)));
  CHECK(bytes.attention_forward == doctest::Approx(s * 14 * scores / 2));
  // Backward: 38 h replicated, 10 h + 8 f and 16 a s on the half.
  CHECK(bytes.backward == doctest::Approx(s * (38 * h + (10 * h + 8 * f) / 2 + 16 * scores / 2)));
  // Sequence parallelism splits the replicated part too; FlashAttention streams no scores.
  CHECK(UnfusedBlockElementwiseBytes(problem.model, 2, true, true).forward ==
        doctest::Approx(s * (19 * h + (4 * h + 8 * f) / 2 + 14 * scores / 2)));
  CHECK(UnfusedBlockElementwiseBytes(problem.model, 2, false, false).attention_forward == 0);

  // The block's passes: the fused roofline (stored bytes once forward, twice backward) replaced
  // by these counts, the GEMMs and the attention core unchanged; selective recomputation runs
  // the attention's forward kernels again.
  const DeviceSpec& device = problem.cluster.Device();
  const Recompute selective = Recompute::kSelective;
  const LayerCompute fused =
      LayerComputeSeconds(problem.model, 1, device, problem.training, 2.0, 2, selective);
  problem.training.fused_elementwise_kernels = false;
  const LayerCompute unfused =
      LayerComputeSeconds(problem.model, 1, device, problem.training, 2.0, 2, selective);
  const LayerSpec& block = problem.model.layers[1];
  const double stored =
      2.0 * (block.activation_replicated_bytes + (block.activation_sharded_bytes +
                                                  block.activation_attention_bytes) / 2);
  CHECK(unfused.forward_seconds - fused.forward_seconds ==
        doctest::Approx((2.0 * bytes.forward - stored) / 1e12));
  CHECK(unfused.backward_seconds - fused.backward_seconds ==
        doctest::Approx((2.0 * bytes.backward - 2 * stored) / 1e12));
  const double stored_scores = 2.0 * block.activation_attention_bytes / 2;
  CHECK(unfused.recompute_seconds - fused.recompute_seconds ==
        doctest::Approx((2.0 * bytes.attention_forward - stored_scores) / 1e12));
  CHECK(unfused.forward_flops == fused.forward_flops);
  // The head keeps its own count; a llama block has no unfused count.
  const int head = problem.NumLayers() - 1;
  problem.training.fused_elementwise_kernels = true;
  const Recompute none = Recompute::kNone;
  const double head_fused =
      LayerComputeSeconds(problem.model, head, device, problem.training, 1.0, 1, none)
          .forward_seconds;
  problem.training.fused_elementwise_kernels = false;
  CHECK(LayerComputeSeconds(problem.model, head, device, problem.training, 1.0, 1, none)
            .forward_seconds == head_fused);
  ModelSpec llama = problem.model;
  llama.family = "llama";
  CHECK_THROWS_WITH_AS(UnfusedBlockElementwiseBytes(llama, 1, false, true),
                       doctest::Contains("a llama block has none"), InputError);
}

TEST_CASE("activation bytes per transformer layer follow Korthikanti et al. Table 2") {
  const int h = 1024, a = 16, s = 512, t = 4;
  Problem problem = GptProblem(h, a, s, 2, 8);
  problem.training.global_batch_size = 8;
  const CostModel cost_model(problem);
  const double sbh = 1.0 * s * h;  // one sample per replica below (m = 8 / dp)
  auto act = [&](int dp, int tp, Recompute r, bool sp) {
    problem.training.sequence_parallel = sp;
    const int m = 8 / dp;  // b = 1
    return cost_model.LayerTerms(1, Config(dp, tp, 0, r), m).activation_bytes;
  };
  CHECK(act(1, 1, Recompute::kNone, true) == doctest::Approx(sbh * (34 + 5.0 * a * s / h)));
  CHECK(act(1, t, Recompute::kNone, false) ==
        doctest::Approx(sbh * (10 + 24.0 / t + 5.0 * a * s / (h * t))));
  CHECK(act(1, t, Recompute::kNone, true) == doctest::Approx(sbh * (34.0 / t + 5.0 * a * s / (h * t))));
  CHECK(act(1, t, Recompute::kSelective, false) == doctest::Approx(sbh * (10 + 24.0 / t)));
  CHECK(act(1, t, Recompute::kSelective, true) == doctest::Approx(sbh * 34.0 / t));
  CHECK(act(1, 1, Recompute::kFull, false) == doctest::Approx(sbh * 2));
}

TEST_CASE("with FlashAttention a block stores no attention scores: s h 34 bytes per sample") {
  const int h = 1024, a = 16, s = 512;
  Problem problem = GptProblem(h, a, s, 2, 8);
  problem.training.global_batch_size = 8;
  UseFlashAttention(problem.model);
  CHECK(problem.model.layers[0].ActivationBytes() > 0);  // the embedding keeps its own
  const CostModel cost_model(problem);
  const double sbh = 1.0 * s * h;
  CHECK(cost_model.LayerTerms(1, Config(1, 1, 0, Recompute::kNone), 8).activation_bytes ==
        doctest::Approx(sbh * 34));
  CHECK(cost_model.LayerTerms(1, Config(1, 1, 0, Recompute::kSelective), 8).activation_bytes ==
        doctest::Approx(sbh * 34));
  // Its FLOPs stay those of attention with the scores (4 s^2 h per sample in forward).
  CHECK(problem.model.layers[1].attention_flops == 4.0 * s * s * h);
}

TEST_CASE("FlashAttention's kernel computes the causal half of the scores and recomputes them in "
          "backward, hand computed; a bidirectional model computes all of them") {
  // h = 1024, a = 16, s = 512, two samples on one rank; peak 100 TFLOP/s at efficiency 1, HBM
  // 1 TB/s (GptProblem).
  const int h = 1024, a = 16, s = 512;
  Problem problem = GptProblem(h, a, s, 2, 8);
  UseFlashAttention(problem.model);
  const DeviceSpec& device = problem.cluster.Device();
  const LayerSpec& block = problem.model.layers[1];
  const double attention = 2 * 4.0 * s * s * h;         // model FLOPs of the score GEMMs
  const double dense = 2 * block.forward_flops - attention;
  const double stored = 2 * 34.0 * s * h;                // bytes: no scores with FlashAttention
  const double share = (s + 1.0) / (2.0 * s);            // causal: the diagonal and below
  CHECK(FlashAttentionComputedShare(problem.model) == doctest::Approx(share));
  auto passes = [&] {
    return LayerComputeSeconds(problem.model, 1, device, problem.training, 2.0, 1,
                               Recompute::kSelective);
  };
  const LayerCompute causal = passes();
  CHECK(causal.forward_seconds ==
        doctest::Approx((dense + share * attention) / 100e12 + stored / 1e12));
  // Backward: the dense GEMMs twice, the scores' five GEMMs against the forward's two.
  CHECK(causal.backward_seconds ==
        doctest::Approx((2 * dense + 2.5 * share * attention) / 100e12 + 2 * stored / 1e12));
  // Selective recomputation reruns the kernel's forward; its FLOPs stay the model's.
  CHECK(causal.recompute_seconds == doctest::Approx(share * attention / 100e12));
  CHECK(causal.recompute_flops == doctest::Approx(attention));
  CHECK(causal.forward_flops == doctest::Approx(2 * block.forward_flops));

  problem.model.family = "bert";
  CHECK(FlashAttentionComputedShare(problem.model) == 1.0);
  const LayerCompute bidirectional = passes();
  CHECK(bidirectional.forward_seconds ==
        doctest::Approx((dense + attention) / 100e12 + stored / 1e12));
  CHECK(bidirectional.backward_seconds ==
        doctest::Approx((2 * dense + 2.5 * attention) / 100e12 + 2 * stored / 1e12));

  // Stored scores (no FlashAttention): the attention core at its FLOPs, backward twice forward.
  Problem materialized = GptProblem(h, a, s, 2, 8);
  const LayerCompute plain = LayerComputeSeconds(materialized.model, 1, device,
                                                 materialized.training, 2.0, 1, Recompute::kNone);
  CHECK(plain.backward_seconds == doctest::Approx(2 * plain.forward_seconds));
}

TEST_CASE("framework buffers add their bytes per parameter to the model states, unsharded") {
  Problem problem = GptProblem(1024, 16, 512, 2, 8);
  const double params = problem.model.layers[1].stored_param_count;
  const double before = CostModel(problem).LayerTerms(1, Config(2, 1, 1, Recompute::kNone), 4)
                            .state_bytes;
  problem.training.buffer_bytes_per_param = 2;  // e.g. autocast's bf16 weight copies
  const double after = CostModel(problem).LayerTerms(1, Config(2, 1, 1, Recompute::kNone), 4)
                           .state_bytes;
  CHECK(after - before == doctest::Approx(2 * params));
  problem.training.buffer_bytes_per_param = -1;
  CHECK(testing::Contains(testing::InputErrorMessage([&] {
                            ValidateTrainingSpec(problem.training, "run options");
                          }),
                          "run options: training.buffer_bytes_per_param = -1: must be >= 0"));
}

TEST_CASE("a flat gradient buffer counts whole, except under ZeRO-2/3 reducing every microbatch "
          "at DP > 1 (the shard is the gradient the model states count)") {
  Problem problem = GptProblem(1024, 16, 512, 2, 8);
  const double params = problem.model.layers[1].stored_param_count;
  auto state = [&](int dp, int zero) {
    return CostModel(problem).LayerTerms(1, Config(dp, 1, zero, Recompute::kNone), 4).state_bytes;
  };
  auto added = [&](int dp, int zero) {
    problem.training.grad_buffer_bytes_per_param = 0;
    const double before = state(dp, zero);
    problem.training.grad_buffer_bytes_per_param = 4;
    return state(dp, zero) - before;
  };
  problem.training.zero_reduce_every_microbatch = true;
  CHECK(added(2, 0) == doctest::Approx(4 * params));
  CHECK(added(2, 1) == doctest::Approx(4 * params));
  CHECK(added(2, 2) == 0);
  CHECK(added(2, 3) == 0);
  CHECK(added(1, 2) == doctest::Approx(4 * params));  // no DP: the runtime keeps its buffer
  // A framework that reduces once per iteration keeps the whole buffer under ZeRO-2 too.
  problem.training.zero_reduce_every_microbatch = false;
  CHECK(added(2, 2) == doctest::Approx(4 * params));
  problem.training.grad_buffer_bytes_per_param = -4;
  CHECK(testing::Contains(
      testing::InputErrorMessage([&] { ValidateTrainingSpec(problem.training, "run options"); }),
      "run options: training.grad_buffer_bytes_per_param = -4: must be >= 0"));
}

TEST_CASE("every microbatch adds its weight gradients into the gradient buffer, over the shard "
          "under ZeRO-2/3: fused 2 grad - param bytes per parameter, unfused 2 grad + param, "
          "hand computed") {
  // h = 1024: a block's 12 h^2 + 13 h parameters; bf16 weights; HBM 1 TB/s (GptProblem).
  Problem problem = GptProblem(1024, 16, 512, 2, 8);
  const double h = 1024, block_params = 12 * h * h + 13 * h;
  REQUIRE(problem.model.layers[1].stored_param_count == doctest::Approx(block_params));
  for (const bool fused : {true, false}) {
    problem.training.fused_elementwise_kernels = fused;
    for (const double grad_bytes : {2.0, 4.0}) {
      CAPTURE(fused);
      CAPTURE(grad_bytes);
      problem.training.grad_dtype_bytes = grad_bytes;
      // Megatron's fp32 main_grad: 6 fused, 10 unfused; bf16 gradients: 2, 6.
      const double bytes = fused ? 2 * grad_bytes - 2 : 2 * grad_bytes + 2;
      CHECK(GradientAccumulationBytesPerParam(problem.training) == bytes);
      const CostModel cost_model(problem);
      // The block's own compute at one sample per microbatch (8 samples over DP 2 in 4).
      auto block_compute = [&](int tp) {
        return LayerComputeSeconds(problem.model, 1, problem.cluster.Device(), problem.training,
                                   1.0, tp, Recompute::kNone)
            .TotalSeconds();
      };
      for (const int tp : {1, 2})
        CHECK(cost_model.LayerTerms(1, Config(2, tp, 1, Recompute::kNone), 4).compute_seconds ==
              doctest::Approx(block_compute(tp) + block_params / tp * bytes / 1e12));
      // ZeRO-2 reducing every microbatch: each rank adds into its half of the gradients.
      CHECK(cost_model.LayerTerms(1, Config(2, 1, 2, Recompute::kNone), 4).compute_seconds ==
            doctest::Approx(block_compute(1) + block_params / 2 * bytes / 1e12));
    }
  }
}

TEST_CASE("recomputation costs one forward (full) or the attention scores (selective)") {
  const Problem problem = GptProblem(1024, 16, 512, 2, 8);
  const CostModel cost_model(problem);
  const LayerSpec& block = problem.model.layers[1];
  const auto none = cost_model.LayerTerms(1, Config(1, 1, 0, Recompute::kNone), 8);
  const auto selective = cost_model.LayerTerms(1, Config(1, 1, 0, Recompute::kSelective), 8);
  const auto full = cost_model.LayerTerms(1, Config(1, 1, 0, Recompute::kFull), 8);
  CHECK(none.model_flops == doctest::Approx(3 * block.forward_flops));
  CHECK(none.hardware_flops == doctest::Approx(none.model_flops));
  CHECK(full.hardware_flops == doctest::Approx(4 * block.forward_flops));
  CHECK(selective.hardware_flops == doctest::Approx(3 * block.forward_flops + block.attention_flops));
  CHECK(none.compute_seconds < selective.compute_seconds);
  CHECK(selective.compute_seconds < full.compute_seconds);
}

TEST_CASE("ring all-reduce moves 2(n-1)/n of the buffer per GPU plus 2(n-1) latencies") {
  Problem problem = GptProblem(1024, 16, 512, 2, 8);
  problem.cluster.networks[0].latency_seconds = 1e-6;
  const CostModel cost_model(problem);
  const double bytes = 1e9;
  CHECK(cost_model.AllReduceSeconds(bytes, 1, 8, 1) ==
        doctest::Approx(2.0 * 7 / 8 * bytes / 100e9 + 14e-6));
  CHECK(cost_model.AllGatherSeconds(bytes, 1, 4, 1) ==
        doctest::Approx(3.0 / 4 * bytes / 100e9 + 3e-6));
  CHECK(cost_model.AllReduceSeconds(bytes, 1, 1, 1) == 0.0);
}

TEST_CASE("an all-reduce across k nodes takes NCCL's tree latency, 2 floor(log2 k) inter-node "
          "steps, an all-gather the ring's k - 1") {
  Problem problem = GptProblem(1024, 16, 512, 2, 8);
  problem.cluster.networks = {{"nvlink", 200e9, 1e-6, 1.0, ""}, {"ib", 25e9, 10e-6, 1.0, ""}};
  for (auto [k, tree_steps] : {std::pair{2, 2}, std::pair{3, 2}, std::pair{4, 4},
                               std::pair{8, 6}, std::pair{64, 12}}) {
    CAPTURE(k);
    problem.cluster.node_groups[0].count = k;
    const CostModel cost_model(problem);
    // Latency only (no bytes), one GPU per node: no intra-node steps.
    CHECK(cost_model.AllReduceSeconds(0.0, k, 1, 1) == doctest::Approx(tree_steps * 10e-6));
    CHECK(cost_model.AllGatherSeconds(0.0, k, 1, 1) == doctest::Approx((k - 1) * 10e-6));
    // 8 GPUs per node add the intra-node ring's 2 (8 - 1) steps to the all-reduce.
    CHECK(cost_model.AllReduceSeconds(0.0, k, 8, 1) ==
          doctest::Approx(tree_steps * 10e-6 + 14 * 1e-6));
  }
}

TEST_CASE("hierarchical all-reduce across nodes shares each node's NICs among its groups") {
  Problem problem = GptProblem(1024, 16, 512, 2, 8);
  problem.cluster.node_groups[0].count = 4;
  problem.cluster.networks = {{"nvlink", 200e9, 0.0, 1.0, ""}, {"ib", 25e9, 0.0, 1.0, ""}};
  const CostModel cost_model(problem);
  const double bytes = 1e9;
  // 4 nodes x 2 GPUs per node, 4 such groups per node.
  const double intra = 2.0 * 1 / 2 * bytes / 200e9;
  const double inter = 4 * 2.0 * 3 / 4 * bytes / 25e9;
  CHECK(cost_model.AllReduceSeconds(bytes, 4, 2, 4) == doctest::Approx(intra + inter));
}

TEST_CASE("tied word embeddings split over the pipeline: the first and the last stage all-reduce "
          "their copies' gradient pairwise, in the tail") {
  // h = 1024, V = 51200, tp 2: each rank's copy holds V h / 2 parameters; bf16 gradients.
  Problem problem = GptProblem(1024, 16, 512, 2, 8);
  const double bytes = 51200.0 * 1024 / 2 * 2;
  const StageConfig config = Config(2, 2, 1, Recompute::kNone);
  {
    // One node: a pair of ranks over NVLink, 2 (n - 1) / n = 1 buffer per GPU, no latency.
    const CostModel cost_model(problem);
    const double pair = bytes / 100e9;
    const StageTerms first = cost_model.StageOverhead(config, 2, true, false);
    CHECK(first.embedding_sync_seconds == doctest::Approx(pair));
    CHECK(cost_model.StageOverhead(config, 2, false, true).embedding_sync_seconds ==
          doctest::Approx(pair));
    CHECK(first.AdditiveTailSeconds() ==
          doctest::Approx(first.dp_sync_exposed_seconds + first.optimizer_seconds + pair));
    // A middle stage and a single-stage pipeline hold no split copy.
    CHECK(cost_model.StageOverhead(config, 2, false, false).embedding_sync_seconds == 0.0);
    CHECK(cost_model.StageOverhead(config, 2, true, true).embedding_sync_seconds == 0.0);
  }
  {
    // DeepSpeed's fp32_allreduce: the DP sync in fp32, the tied weight's own fp16 gradient.
    Problem fp32 = problem;
    fp32.training.grad_dtype_bytes = 4;
    CHECK(CostModel(fp32).StageOverhead(config, 2, true, false).embedding_sync_seconds ==
          doctest::Approx(2 * bytes / 100e9));
    fp32.training.tied_embedding_grad_bytes = 2;
    CHECK(CostModel(fp32).StageOverhead(config, 2, true, false).embedding_sync_seconds ==
          doctest::Approx(bytes / 100e9));
  }
  {
    // Two nodes: the ends on different nodes, the 4 pairs of a stage's node sharing its NICs.
    Problem two = problem;
    two.cluster.node_groups[0].count = 2;
    two.cluster.node_groups[0].gpus_per_node = 4;
    two.cluster.networks = {{"nvlink", 100e9, 0.0, 1.0, ""}, {"ib", 50e9, 0.0, 1.0, ""}};
    CHECK(CostModel(two).StageOverhead(config, 2, false, true).embedding_sync_seconds ==
          doctest::Approx(4 * bytes / 50e9));
  }
  {
    Problem untied = problem;
    untied.model.tie_word_embeddings = false;
    BuildTransformerLayers(untied.model);
    CHECK(CostModel(untied).StageOverhead(config, 2, true, false).embedding_sync_seconds == 0.0);
  }
}

TEST_CASE("Evaluate of a seed case equals the seed objective plus the constant fill term") {
  // 12 layers of cost 1 in 4 stages, B = 3, cut cost 2: seed optimum 12 with split 3|3|3|3.
  const SeedCase seed = MakeSeedPartitionCase(12, 4, 3, 1.0, 2.0);
  Plan plan;
  plan.global_batch_size = 3;
  plan.num_microbatches = 3;
  for (int s = 0; s < 4; ++s) plan.stages.push_back({3 * s, 3 * s + 3, StageConfig{}});
  const Estimate estimate = Evaluate(seed.problem, plan);
  CHECK(estimate.steady_seconds + estimate.tail_seconds == doctest::Approx(12.0));
  CHECK(estimate.iteration_seconds == doctest::Approx(12.0 + 12.0));
  CHECK(estimate.max_stage_seconds == doctest::Approx(3.0));
  CHECK(estimate.Fits());
}

TEST_CASE("Evaluate: iteration = sum t + (m-1) max t + max e over the per-stage terms") {
  Problem problem = GptProblem(512, 8, 256, 4, 8);
  problem.training.global_batch_size = 16;
  Plan plan;
  plan.global_batch_size = 16;
  plan.num_microbatches = 4;
  plan.stages = {{0, 2, Config(2, 2, 1, Recompute::kSelective)},
                 {2, 6, Config(2, 1, 0, Recompute::kNone)}};
  const Estimate e = Evaluate(problem, plan);
  const std::vector<double> t = {e.stages[0].microbatch_seconds, e.stages[1].microbatch_seconds};
  const std::vector<double> tail = {e.stages[0].tail_seconds, e.stages[1].tail_seconds};
  CHECK(e.iteration_seconds == doctest::Approx(PipelineObjective(t, tail, {0.0, 0.0}, 4)));
  CHECK(e.iteration_seconds ==
        doctest::Approx(t[0] + t[1] + 3 * std::max(t[0], t[1]) + std::max(tail[0], tail[1])));
  CHECK(tail[0] > 0);
  CHECK(tail[1] > 0);
  // 1F1B: stage 0 of 2 holds 2 microbatches, stage 1 holds 1.
  CHECK(e.stages[0].microbatches_in_flight == 2);
  CHECK(e.stages[1].microbatches_in_flight == 1);
  CHECK(e.stages[1].terms.p2p_seconds > 0);
  CHECK(e.num_devices == 6);
  CHECK(e.mfu > 0);
  CHECK(e.mfu < 1);
}

TEST_CASE("a stage that does not fit reports which stage and by how much") {
  Problem problem = GptProblem(1024, 16, 512, 2, 8);
  problem.cluster.devices[0].memory_bytes = 100e6;  // 100 MB
  Plan plan;
  plan.global_batch_size = 8;
  plan.num_microbatches = 8;
  plan.stages = {{0, 4, Config(1, 1, 0, Recompute::kNone)}};
  const Estimate e = Evaluate(problem, plan);
  CHECK_FALSE(e.Fits());
  const std::string message = e.MemoryViolation();
  CHECK(message.find("stage 0") != std::string::npos);
  CHECK(message.find("GiB over") != std::string::npos);
}

TEST_CASE("a TP group larger than a node takes whole nodes: its all-reduces cross the NICs and "
          "its DP groups hold one GPU per node") {
  // 4 nodes of 4 GPUs, 100 GB/s inside a node and 10 GB/s between nodes; TP 8 over pairs of
  // nodes, DP 2: the DP group of rank r is {r, r + 8}, nodes 0 and 2 (or 1 and 3), and all four
  // GPUs of a node are in different DP groups.
  Problem problem = GptProblem(1024, 16, 512, 2, 4);
  problem.cluster.node_groups[0].count = 4;
  problem.cluster.networks.push_back({"ib", 10e9, 0.0, 1.0, "test"});
  const CostModel cost_model(problem);
  const StageConfig across{4, 4, 2, 8, 0, Recompute::kNone, {}};
  const StageConfig inside{1, 4, 1, 4, 0, Recompute::kNone, {}};
  REQUIRE(cost_model.CheckConfig(across, 2) == "");
  const GroupLayout tp = TensorParallelLayout(across);
  CHECK(std::make_tuple(tp.nodes, tp.gpus_per_node, tp.concurrent_groups) ==
        std::make_tuple(2, 4, 1));
  const GroupLayout tp4 = TensorParallelLayout(inside);
  CHECK(std::make_tuple(tp4.nodes, tp4.gpus_per_node, tp4.concurrent_groups) ==
        std::make_tuple(1, 4, 1));
  const GroupLayout tp2 = TensorParallelLayout(StageConfig{1, 4, 2, 2, 0, Recompute::kNone, {}});
  CHECK(std::make_tuple(tp2.nodes, tp2.gpus_per_node, tp2.concurrent_groups) ==
        std::make_tuple(1, 2, 2));

  // 2 all-reduces forward and 2 backward of the block's output, each over the two nodes.
  const int m = 2;
  const double b = cost_model.ReplicaMicrobatchSize(across, m);
  const double message = b * problem.model.layers[1].output_bytes;
  const StageTerms block = cost_model.LayerTerms(1, across, m);
  CHECK(block.tp_comm_seconds ==
        doctest::Approx(4 * CollectiveSeconds(problem.cluster, Collective::kAllReduce, message,
                                              GroupLayout{2, 4, 1})));
  // ... slower than the same all-reduce over NVLink inside one node.
  CHECK(block.tp_comm_seconds > 4 * CollectiveSeconds(problem.cluster, Collective::kAllReduce,
                                                      message, GroupLayout{1, 4, 1}));
  // The DP all-reduce (ZeRO-0) of the block's 1/8 of the gradients: 2 nodes, one rank on each,
  // the node's 4 DP groups sharing its NICs.
  const double params = problem.model.layers[1].stored_param_count / 8;
  CHECK(block.dp_sync_seconds ==
        doctest::Approx(CollectiveSeconds(problem.cluster, Collective::kAllReduce,
                                          params * problem.training.grad_dtype_bytes,
                                          GroupLayout{2, 1, 4}, false)));
  // TP 6 on nodes of 4 GPUs neither divides a node nor takes whole nodes.
  CHECK(cost_model.CheckConfig(StageConfig{3, 4, 2, 6, 0, Recompute::kNone, {}}, 2)
            .find("multiple of them") != std::string::npos);
}

TEST_CASE("CheckConfig names the broken rule") {
  const Problem problem = GptProblem(1024, 16, 512, 2, 8);
  const CostModel cost_model(problem);
  CHECK(cost_model.CheckConfig(Config(3, 1, 0, Recompute::kNone), 1).find("does not divide") !=
        std::string::npos);
  CHECK(cost_model.CheckConfig(StageConfig{1, 8, 2, 2, 0, Recompute::kNone, {}}, 1)
            .find("!= 8 devices") != std::string::npos);
  CHECK(cost_model.CheckConfig(StageConfig{2, 8, 16, 1, 0, Recompute::kNone, {}}, 1)
            .find("cluster has 1") != std::string::npos);
  CHECK(cost_model.CheckConfig(Config(1, 1, 0, Recompute::kNone), 3).find("global batch") !=
        std::string::npos);
}
