#pragma once
// The analytical cost model, organized so that a stage's cost is a SUM over its layers plus a
// per-stage overhead (DESIGN.md §5, "additivity is what makes the relaxation exact"):
//
//   terms(stage) = sum_{l in stage} LayerTerms(l, config, m) + StageOverhead(config, m, first, last)
//
// and every derived figure (microbatch time t_s, exposed tail e_s, peak memory) is an affine
// function of these sums. Evaluate(), the DP, the exhaustive search and the relaxation all use
// these two functions; nobody re-derives a formula.
//
// Pipeline objective (Alpa, Zheng et al. OSDI'22, Eq. 2, plus the iteration's tail):
//   T = sum_s t_s + (m - 1) * max_s t_s + max_s e_s + sum_s c_s
// where t_s is the forward+backward time of one microbatch on stage s (compute, TP collectives,
// point-to-point sends, ZeRO-3 gathers, ZeRO-2/3 gradient reduce-scatters), e_s the stage's exposed tail after its last backward
// (DP gradient synchronization not hidden behind backward, optimizer step, the tied word
// embeddings' all-reduce between the first and the last stage) and c_s a one-time
// cost charged per stage (explicit models' cut cost). Stages own disjoint devices, so their tails
// run concurrently: the iteration pays the longest, max_s e_s (conservatively ignoring that later
// stages finish their last backward earlier in 1F1B). The DP stays exact by enumerating both
// maxima (baselines/dp_searcher.h).
#include <algorithm>
#include <vector>

#include "costmodel/collective.h"
#include "costmodel/problem.h"
#include "costmodel/stage_config.h"

namespace stratos {

// The time a bucketed DP gradient reduction runs on after the backward pass ends: its buckets
// are reduced one after another as the backward pass fills them, so with the gradients coming
// out evenly over the backward window W the reduction S ends max(S - W, b) after it, b the
// reduction of one bucket (at most S: gradients that fill less than one bucket are reduced at
// the end). Neglects the first bucket's fill before its reduction starts (the W / B of
// max(S - W (B - 1) / B, S / B) for B buckets). Seconds; nondecreasing in S - W, S and b.
inline double BucketedDpExposedSeconds(double sync_seconds, double backward_window_seconds,
                                       double last_bucket_seconds) {
  return std::max(sync_seconds - backward_window_seconds,
                  std::min(last_bucket_seconds, sync_seconds));
}

// Additive quantities of a set of layers under one stage configuration. Per device.
struct StageTerms {
  // Per microbatch (t_s is their sum):
  double compute_seconds = 0;       // GEMMs + memory-bound ops, forward + backward + recompute
  double tp_comm_seconds = 0;       // TP all-reduces (or SP all-gather/reduce-scatter) and the
                                    // all-gathers after scatter/gather receives
  double p2p_seconds = 0;           // pipeline sends of activations (fwd) and their grads (bwd)
  double zero3_gather_seconds = 0;  // ZeRO-3 parameter all-gathers, forward and backward
  double zero_reduce_scatter_seconds = 0;  // ZeRO-2/3 gradient reduce-scatters of the m - 1
                                           // microbatches before the last, exposed share / m
  double forward_seconds = 0;       // the forward share of the above (for the simulator)
  // Per iteration, exposed tail (e_s: their sum plus BucketedDpExposedSeconds()):
  double dp_sync_exposed_seconds = 0;  // DP gradient sync not hidden behind the backward pass
  double optimizer_seconds = 0;        // optimizer step (memory bound)
  double embedding_sync_seconds = 0;   // tied word embeddings' gradient all-reduce between the
                                       // first and the last pipeline stage (StageOverhead)
  // Bucketed DP gradient reduction (TrainingSpec::dp_bucket_bytes > 0; else all 0):
  double dp_bucketed_sync_seconds = 0;    // S: the last microbatch's gradient reduction
  double dp_backward_window_seconds = 0;  // W: that microbatch's backward pass (+ recompute)
  double dp_last_bucket_seconds = 0;      // b: the reduction of one bucket (stage overhead)
  // Per iteration, one-time cost (c_s):
  double cut_cost_seconds = 0;         // explicit models' one-time boundary cost
  double dp_sync_seconds = 0;          // full DP sync time (report only; exposed share above)
  // Memory, bytes per device:
  double state_bytes = 0;        // weights + gradients + optimizer states (after ZeRO sharding)
  double activation_bytes = 0;   // stored activations of ONE in-flight microbatch
  double working_bytes = 0;      // transient working sets, not multiplied by microbatches in
                                 // flight (summed: conservative where they never coexist)
  // Work, for reporting (per microbatch, per device):
  double model_flops = 0;        // forward + backward, without recomputation
  double hardware_flops = 0;     // including recomputation

  double MicrobatchSeconds() const {
    return compute_seconds + tp_comm_seconds + p2p_seconds + zero3_gather_seconds +
           zero_reduce_scatter_seconds;
  }
  // The bucketed reduction's exposed time (::BucketedDpExposedSeconds; 0 without buckets). Not
  // additive over layers: every consumer sums S, W and b over the stage first.
  double BucketedDpExposedSeconds() const {
    return stratos::BucketedDpExposedSeconds(dp_bucketed_sync_seconds,
                                             dp_backward_window_seconds, dp_last_bucket_seconds);
  }
  // e_s: combined over stages by max (they run concurrently at the end of the iteration).
  double ExposedTailSeconds() const {
    return AdditiveTailSeconds() + BucketedDpExposedSeconds();
  }
  // The additive part of e_s (all of it without buckets): a lower bound on ExposedTailSeconds()
  // of any sum of terms, as BucketedDpExposedSeconds() >= 0.
  double AdditiveTailSeconds() const {
    return dp_sync_exposed_seconds + optimizer_seconds + embedding_sync_seconds;
  }
  // c_s: combined over stages by sum.
  double OneTimeSeconds() const { return cut_cost_seconds; }
  // `microbatches_in_flight`: microbatches' worth of stored activations (fractional with virtual
  // stages: ChunkForwardsInFlight / v).
  double PeakMemoryBytes(double microbatches_in_flight) const {
    return state_bytes + microbatches_in_flight * activation_bytes + working_bytes;
  }
  StageTerms& operator+=(const StageTerms& o);
  StageTerms& operator-=(const StageTerms& o);
  StageTerms& operator*=(double w);
};

// Microbatches whose activations a stage holds at its peak (Narayanan et al. SC'21 §2.2):
// GPipe holds all m; 1F1B holds min(m, p - s) at stage s of p (0-based).
int MicrobatchesInFlight(Schedule schedule, int num_stages, int stage_index, int num_microbatches);

// Forward passes whose activations pipeline rank `stage_index` of `num_stages` holds at its peak
// when each rank has `virtual_stages` = v model chunks, each pass one microbatch through one
// chunk (1/v of the rank's activations). v = 1: MicrobatchesInFlight. v > 1, the interleaved 1F1B
// schedule as Megatron-Core runs it (forward_backward_pipelining_with_interleaving): rank r
// warms up with 2 (p - r - 1) + (v - 1) p chunk forwards and the steady state adds one, at most
// all m v: min(2 (p - r - 1) + (v - 1) p + 1, m v). Rank 0 then holds p + (p - 1) / v
// microbatches' worth, Korthikanti et al. 2022 §4.2.3's (1 + (p-1)/(p v)) p; the last rank
// p - (p - 1) / v, where plain 1F1B holds 1. Throws InternalError for v > 1 with GPipe.
int ChunkForwardsInFlight(Schedule schedule, int num_stages, int stage_index,
                          int num_microbatches, int virtual_stages);

// HBM traffic of the vocabulary-parallel cross entropy over the logits of a head, bytes per
// logit on its TP rank, as Megatron-LM's vocab_parallel_cross_entropy runs it (in place on an
// fp32 copy of the half-precision logits; the same passes in Megatron-LM v1.1.5, Megatron-Core
// and Megatron-DeepSpeed). Forward: the cast to fp32 (read 2, write 4), the maximum over the
// vocabulary (read 4), subtracting it (4 + 4), exp in place (4 + 4), the sum (read 4) and the
// division into the softmax it keeps (4 + 4); the logits GEMM's own write of the half-precision
// logits (2) is the head's. Backward: scaling the kept softmax into the gradient in place
// (4 + 4) and its cast back to half precision (read 4, write 2).
inline constexpr double kLogitCastForwardBytes = 2 + 4;
inline constexpr double kCrossEntropyForwardBytesPerLogit = 4 + 8 + 8 + 4 + 8;
inline constexpr double kCrossEntropyBackwardBytesPerLogit = 8 + 6;

// HBM traffic of one GPT or BERT block's memory-bound kernels when each op is its own PyTorch
// kernel, bytes per sample on one of `tensor_parallel` ranks (TrainingSpec::
// fused_elementwise_kernels = false): Megatron-LM v1.1.5's ParallelTransformerLayer without
// --scaled-upper-triang-masked-softmax-fusion, --bias-gelu-fusion and --bias-dropout-fusion (AMP's
// ds_pretrain_gpt2_pipe.sh passes none; its vendored megatron/model/transformer.py and
// fused_softmax.py), counted kernel by kernel at 2 bytes per element and 1 per dropout-mask
// element, per token of hidden size h, MLP width f, a heads and sequence s:
//   forward:  replicated 38 h (split by tp only with sequence parallelism): two LayerNorms (read,
//             write: 4 h each) and two bias-dropout-adds (bias add 4 h, dropout 4 h + its mask h,
//             residual add 6 h); sharded 4 h + 8 f (/ tp): the context's permute copy (4 h), the
//             bias add and GeLU as two kernels (4 f each); attention 14 a s (/ tp, materialized
//             scores only): masked_fill_ in place (read 2 + mask 1, write 2), softmax (2 + 2) and
//             dropout (2 + 2 + mask 1) over every score.
//   backward: replicated 38 h: two LayerNorm backwards (read grad and input, write: 6 h each), two
//             dropout backwards (read grad and mask, write: 5 h each), the two bias gradients
//             (read 2 h each), the two residual junctions' gradient adds (6 h each); sharded
//             10 h + 8 f (/ tp): GeLU backward (6 f), the fc1 bias gradient (2 f), the permute's
//             copy back (4 h), the QKV bias gradient (6 h); attention 16 a s (/ tp): dropout (5),
//             softmax (read output and grad, write: 6) and masked_fill (5) backwards.
// The GEMMs' operands and the attention core's score write and read are priced with the GEMMs
// (AttentionCoreSeconds). `attention_forward` is the forward's attention part, what selective
// recomputation runs again. Requires a transformer shape; throws InputError for the llama family.
struct BlockElementwiseBytes {
  double forward = 0;
  double backward = 0;
  double attention_forward = 0;
};
BlockElementwiseBytes UnfusedBlockElementwiseBytes(const ModelSpec& model, int tensor_parallel,
                                                   bool sequence_parallel,
                                                   bool materialized_attention);

// Bytes per parameter that one microbatch's gradient accumulation moves through HBM beyond what
// the weight-gradient GEMM's own output write (param_dtype_bytes, priced with the GEMM) moves.
// Fused (training.fused_elementwise_kernels, Megatron-LM's default --gradient-accumulation-fusion:
// the GEMM's epilogue accumulates into the gradient buffer, C += A^T B): the buffer read and
// written in place of that write, 2 grad - param bytes (6 for Megatron's fp32 main_grad under
// bf16, 2 for fp16 gradients). Unfused (PyTorch autograd's in-place .grad add, Megatron-LM v1.1.5):
// the fresh gradient read and the buffer read and written, 2 grad + param bytes (10, 6).
// Charged every microbatch over the parameters a device accumulates (CostModel::LayerTerms).
double GradientAccumulationBytesPerParam(const TrainingSpec& training);

// FlashAttention (Dao et al. NeurIPS'22; FlashAttention-2, Dao 2023), the attention of a block
// whose scores are never stored (UseFlashAttention), computes per head only the scores a causal
// mask keeps: FlashAttentionComputedShare, (s + 1) / (2 s) of the s^2 for a causal model
// (FlashAttention-2 §3.1.1 skips the score tiles above the diagonal; counted here by element, not
// by tile), all of them for a bidirectional one (BERT). Its backward recomputes the scores from Q
// and K before the four gradient products (FlashAttention Algorithm 4): five s x s x d GEMMs per
// head against the forward's two, kFlashAttentionBackwardToForward times the forward.
inline constexpr double kFlashAttentionBackwardToForward = 2.5;
double FlashAttentionComputedShare(const ModelSpec& model);

// Where a stage's TP groups sit, TP innermost (Megatron-LM's rank order): tp <= the mesh's GPUs
// per node g: one node, tp of its GPUs, g / tp groups sharing each node; tp a multiple of g: tp / g
// whole nodes, g GPUs in each, one group per node, so its collectives cross the NICs (Narayanan
// et al. SC'21 §5.4 measure TP across nodes, Figure 13). Counts of nodes and GPUs. For a config
// that passes CostModel::CheckStructure; others are not checked and give a meaningless layout.
GroupLayout TensorParallelLayout(const StageConfig& config);

// Compute time of one pass of `samples` sequences through layer `layer_index` of `model` on one
// of `tensor_parallel` ranks of `device` (per device, seconds; FLOPs per device): the forward,
// its backward without recomputation, and what `recompute` adds. GEMM FLOPs at the device's
// matmul curve (or scalar efficiency) plus the activation-traffic roofline (a head's logits
// through the cast and the cross entropy's passes, kCrossEntropyForwardBytesPerLogit; a block's
// kernels unfused with training.fused_elementwise_kernels = false, UnfusedBlockElementwiseBytes,
// which throws InputError for a llama block); FlashAttention's core (a transformer layer with
// attention FLOPs and no stored scores) at FlashAttentionComputedShare of its FLOPs forward and
// kFlashAttentionBackwardToForward times that backward; with use_layer_curve and a device whose
// layer_curve is set, a transformer block's passes go through
// that curve (cluster.h LayerCurve). The compute part of CostModel::LayerTerms; also what
// `stratos calibrate` fits the block curve against (use_layer_curve = false).
struct LayerCompute {
  double forward_seconds = 0;
  double backward_seconds = 0;   // without recomputation
  double recompute_seconds = 0;  // added to the backward pass by recomputation
  double forward_flops = 0;
  double recompute_flops = 0;
  // The part of forward_seconds that the cross entropy's passes take (a head's; 0 otherwise):
  // what a profile of the head's layers without the loss leaves out.
  double loss_forward_seconds = 0;
  double TotalSeconds() const { return forward_seconds + backward_seconds + recompute_seconds; }
};
LayerCompute LayerComputeSeconds(const ModelSpec& model, int layer_index,
                                 const DeviceSpec& device, const TrainingSpec& training,
                                 double samples, int tensor_parallel, Recompute recompute,
                                 bool use_layer_curve = true);

class CostModel {
 public:
  // Keeps a reference to `problem`, which must outlive the CostModel. On a heterogeneous cluster
  // (several node groups) each stage is priced on its group's view (ClusterSpec::GroupView):
  // compute, memory capacity, TP and DP collectives from the group's device and levels.
  explicit CostModel(const Problem& problem);

  const Problem& problem() const { return problem_; }

  // Whether `config` can run with this microbatch count at all (mesh fits the cluster,
  // DP divides the microbatch, TP divides the heads and either divides the mesh's GPUs per node
  // or takes whole nodes, TensorParallelLayout). Empty string if valid,
  // otherwise the rule broken, e.g. "data_parallel 3 does not divide the microbatch of 8 samples".
  std::string CheckConfig(const StageConfig& config, int num_microbatches) const;
  // The rules of CheckConfig that do not depend on the microbatch count (a node group the
  // cluster has, a mesh that fits that group's nodes, ...).
  std::string CheckStructure(const StageConfig& config) const;

  // The homogeneous cluster a stage in node group `node_group` is priced on: the problem's
  // cluster itself when it has one group, else its GroupView. Throws InternalError when out of
  // range.
  const ClusterSpec& GroupCluster(int node_group) const;

  // Terms of layer `layer` (index into problem.model.layers) on a stage with `config`, when the
  // global batch is split into `num_microbatches`. Requires CheckConfig(...) == "".
  StageTerms LayerTerms(int layer, const StageConfig& config, int num_microbatches) const;

  // Per-stage terms that do not scale with the layers: point-to-point sends to the next stage
  // (unless last) and of gradients to the previous one (unless first), collective latencies,
  // the recomputation working set, ZeRO-3's gathered-parameter working set, the explicit cut
  // cost. `previous_group` / `next_group` are
  // the node groups of the pipeline ranks the stage receives from / sends to (interleaved: the
  // ranks before and after it, wrapping around); -1 means the stage's own group. A send to
  // another group crosses ClusterSpec::LinkBetween.
  StageTerms StageOverhead(const StageConfig& config, int num_microbatches, bool first_stage,
                           bool last_stage, int previous_group = -1, int next_group = -1) const;

  // Samples one DP replica processes per microbatch: global_batch / (m * dp).
  double ReplicaMicrobatchSize(const StageConfig& config, int num_microbatches) const;

  // Usable memory per device of node group `node_group`, bytes: what tensors may take at their
  // peak, (memory - reserved_memory) / (1 + memory_fragmentation) of the group's device.
  double DeviceMemoryCapacityBytes(int node_group = 0) const;

  // Ring collective times over a group laid out as `nodes` x `gpus_per_node_in_group` GPUs of
  // the first node group (a homogeneous cluster's only one), `concurrent_groups` such groups sharing each node's NICs. Hierarchical when the
  // group spans nodes: intra-node ring over the node's share, then inter-node ring over nodes
  // (NCCL's ring/tree on a two-level network; bus bandwidth per nccl-tests PERFORMANCE.md).
  // all-reduce moves 2(n-1)/n of the bytes per rank, all-gather/reduce-scatter (n-1)/n.
  double AllReduceSeconds(double bytes, int nodes, int gpus_per_node_in_group,
                          int concurrent_groups) const;
  double AllGatherSeconds(double bytes, int nodes, int gpus_per_node_in_group,
                          int concurrent_groups) const;

 private:
  const Problem& problem_;
  std::vector<ClusterSpec> group_views_;  // one per node group when there are several
  // Stored parameters of the model's largest layer at TP 1: the unit whose gathered parameters
  // (and the next one's, prefetched) and gradient ZeRO-3 holds at its peak.
  double largest_layer_params_ = 0;
};

}  // namespace stratos
