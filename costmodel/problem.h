#pragma once
// Problem = model + cluster + training options: everything a searcher needs.
#include <string>
#include <vector>

#include "costmodel/cluster.h"
#include "costmodel/model.h"

namespace stratos {

enum class Schedule { kGpipe, kOneFOneB };
enum class Recompute { kNone, kSelective, kFull };
// ZeRO-3's unit of parameter gathering (TrainingSpec::zero3_gather).
enum class Zero3Gather { kTensor, kLayer, kLayerPrefetch };

const char* ScheduleName(Schedule schedule);        // "gpipe" | "1f1b"
const char* RecomputeName(Recompute recompute);     // "none" | "selective" | "full"
const char* Zero3GatherName(Zero3Gather unit);  // "tensor" | "layer" | "layer-prefetch"
// Every unit's name, in the enum's order: the one list the CLI, spec files and parser accept.
std::vector<std::string> Zero3GatherNames();
// "\"tensor\", \"layer\" or \"layer-prefetch\"": the rule an error message states.
std::string Zero3GatherRule();
// Throw InputError naming `where` and the allowed values for anything else.
Schedule ParseSchedule(const std::string& text, const std::string& where);
Recompute ParseRecompute(const std::string& text, const std::string& where);
Zero3Gather ParseZero3Gather(const std::string& text, const std::string& where);

struct TrainingSpec {
  int global_batch_size = 512;        // samples (sequences) per optimizer step
  Schedule schedule = Schedule::kOneFOneB;
  // Bytes per stored activation element: 2 (bf16/fp16, the layers' own accounting), 4 (fp32:
  // the activations' memory doubles; compute and messages are priced at 2 bytes still).
  double activation_dtype_bytes = 2;
  double param_dtype_bytes = 2;       // bf16 weights
  double grad_dtype_bytes = 2;        // bf16 gradients (reduced in bf16)
  // Bytes per element of the tied word embeddings' gradient that the first and the last pipeline
  // stage all-reduce (StageTerms::embedding_sync_seconds); 0: grad_dtype_bytes. Differs where
  // the DP sync casts: DeepSpeed's fp32_allreduce reduces fp16 gradients in fp32, while its
  // pipeline engine all-reduces the tied weight's own fp16 gradient (2).
  double tied_embedding_grad_bytes = 0;
  // fp32 master weights + Adam m and v: K = 12 bytes/param (ZeRO, Rajbhandari et al. SC'20 §3).
  double optimizer_state_bytes_per_param = 12;
  // Bytes the optimizer step reads and writes per parameter it updates (Adam: read fp32 p, m, v
  // and the grad, write fp32 p, m, v and the bf16 copy).
  double optimizer_step_bytes_per_param = 32;
  // Bytes per parameter the framework keeps beside the weights, gradients and optimizer states
  // at its peak, not sharded by ZeRO: e.g. autocast's cache of half-precision copies of the
  // weights (stratos's runtime under bf16: 2).
  double buffer_bytes_per_param = 0;
  // Bytes per parameter of a flat gradient buffer beside the per-parameter gradients (stratos's
  // runtime: 4, fp32), which the DP reduction fills; kept whole except where ZeRO-2/3 reduce
  // every microbatch's gradients (zero_reduce_every_microbatch, DP > 1): each pass's gradients
  // are then reduce-scattered into this rank's shard and released, and the shard is the
  // gradient the model states already count (grad_dtype_bytes / DP).
  double grad_buffer_bytes_per_param = 0;
  // Bytes per logit the cross entropy holds at its forward peak beyond the fp32 softmax it keeps
  // for the backward pass (4 bytes per logit, the head's stored activation): Megatron-LM's
  // vocab_parallel_cross_entropy (Megatron-Core's, and v1.1.5's as AMP's example vendors it)
  // exponentiates the logits' fp32 copy in place while the half-precision logits are alive: 2.
  // An implementation that computes exp() into a new tensor holds 2 + 4 = 6. Per logit on this
  // TP rank (vocabulary-parallel), a transient of the last stage (StageTerms::working_bytes);
  // memory only (the passes' time: cost_model.h kCrossEntropyForwardBytesPerLogit).
  double loss_transient_bytes_per_logit = 2;
  // Share of the DP gradient synchronization hidden behind the backward pass, in [0, 1]. With
  // dp_bucket_bytes > 0 it applies only to what the buckets do not carry: ZeRO-1/2's all-gather
  // of the updated parameters (Megatron-Core --overlap-param-gather hides it).
  double dp_overlap_fraction = 0.0;
  // Gradient bucket size in bytes (of the gradients' dtype, per device); 0: no buckets. > 0: the
  // DP gradient reduction (ZeRO-0's all-reduce, ZeRO-1/2/3's reduce-scatter) of the last
  // microbatch runs bucket by bucket as its backward pass produces them, as PyTorch DDP
  // (bucket_cap_mb, 25 MB) and Megatron-Core (--overlap-grad-reduce, --ddp-bucket-size) do:
  // StageTerms::BucketedDpExposedSeconds prices the part that is not hidden. Compressed
  // gradients (compression.h) are exchanged after the backward pass as before, and ZeRO-2/3's
  // reduce-scatters of the microbatches before the last (zero_reduce_every_microbatch) keep
  // dp_overlap_fraction: they are part of the microbatch time, which stays additive.
  double dp_bucket_bytes = 0.0;
  // ZeRO-2/3 reduce-scatter every microbatch's gradients (DeepSpeed, FSDP: a rank keeps only its
  // shard of them, so it cannot accumulate microbatches locally; stratos's runtime too, since
  // 2026-11-28); false: once per iteration, as a framework that keeps the whole gradient buffer
  // does.
  bool zero_reduce_every_microbatch = true;
  // How ZeRO-3 gathers a layer's parameters in each pass (forward, its recomputation, backward).
  // kTensor: one all-gather per parameter tensor, as DeepSpeed's ZeRO-3 partitions every
  // nn.Parameter on its own and all-gathers it when its submodule runs (DeepSpeed's
  // runtime/zero/partition_parameters.py, _allgather_param; later versions coalesce a
  // submodule's weight and bias into one call, which this unit counts as two): a GPT block pays
  // 12 collectives' latency and launch, and a ring all-gather's steps grow with the DP size.
  // kLayer: one all-gather of the whole layer, waited for before the layer runs (stratos's
  // runtime, ParameterGatherer). kLayerPrefetch: one per layer, each issued while the layer
  // before it computes (PyTorch FSDP's per-block units as torchtitan wraps them, with FSDP's
  // forward and backward prefetch): a pass pays only what the layer's own compute in that pass
  // does not hide, max(0, gather - compute) (uniform blocks: the layer before computes as long).
  // kTensor and kLayer are paid in full. The bytes are the same for all three (compression.h
  // LayerParameterTensorElements lists the tensors).
  Zero3Gather zero3_gather = Zero3Gather::kTensor;
  // Tensor parallelism uses Megatron sequence parallelism (activations split by TP everywhere).
  bool sequence_parallel = true;
  // A transformer block's memory-bound kernels as the framework runs them. true: fused, as later
  // Megatron-LM runs them by default (masked softmax, bias + GeLU, bias + dropout + add; its
  // --no-*-fusion flags turn them off), Megatron-DeepSpeed and Megatron-Core: each stored
  // activation streams through HBM once forward and twice backward (cost_model.h
  // LayerComputeSeconds). false: one PyTorch kernel per op, as Megatron-LM v1.1.5 runs a GPT or
  // BERT block without its --*-fusion flags (AMP's example): cost_model.h
  // UnfusedBlockElementwiseBytes. Whole blocks only (a block split into operators keeps the
  // fused count); Llama blocks (RMSNorm, SwiGLU) have no unfused count and are refused.
  bool fused_elementwise_kernels = true;

  // The options below model what Megatron-Core does beyond the plain schedule. Their defaults
  // (0, 0, 1) reproduce the cost model without them, number for number.
  //
  // Share of the tensor-parallel collectives hidden behind the GEMMs that produce or consume
  // them, in [0, 1]: Megatron-Core --tp-comm-overlap (Transformer Engine userbuffers) splits
  // each sequence-parallel all-gather / reduce-scatter into chunks pipelined with the GEMM
  // (Wang et al., "Overlap Communication with Dependent Computation via Decomposition in Large
  // Deep Learning Models", ASPLOS'23). Scales StageTerms::tp_comm_seconds by (1 - fraction).
  double tp_comm_overlap_fraction = 0.0;
  // Share of the pipeline point-to-point sends hidden behind compute, in [0, 1]: Megatron-Core
  // overlaps them with the other model chunks of the interleaved schedule
  // (--overlap-p2p-communication, on by default there). Scales StageTerms::p2p_seconds.
  double pp_comm_overlap_fraction = 0.0;
  // Pipeline sends split over the stage's TP ranks, each sending 1/tp of the boundary
  // activations and the receiving stage all-gathering them over TP unless sequence_parallel
  // (Megatron-LM's scatter/gather, Narayanan et al. SC'21 §4.1; stratos's runtime too); false:
  // every TP rank sends the whole activation.
  bool pp_scatter_gather = true;
  // Virtual pipeline stages per device v >= 1: the interleaved 1F1B schedule (Narayanan et al.
  // SC'21 §2.2.2) gives each device v model chunks, which shrinks the bubble by v, multiplies
  // the point-to-point sends by v and holds the activations of Megatron-Core's warm-up
  // (ChunkForwardsInFlight). v = 1 is plain 1F1B / GPipe. Honoured by Evaluate() and
  // StageOverhead(); the searchers search plans' own virtual stages (Plan::virtual_stages).
  int virtual_pipeline_stages = 1;
};

// Throws InputError naming `where`, the field, its value and the rule if an option of
// TrainingSpec is out of range (overlap fractions outside [0, 1], virtual_pipeline_stages < 1,
// global_batch_size < 1, buffer_bytes_per_param, grad_buffer_bytes_per_param,
// loss_transient_bytes_per_logit or dp_bucket_bytes < 0).
void ValidateTrainingSpec(const TrainingSpec& training, const std::string& where);

struct Problem {
  ModelSpec model;
  ClusterSpec cluster;
  TrainingSpec training;

  int NumDevices() const { return cluster.NumDevices(); }
  int NumLayers() const { return model.NumLayers(); }
};

}  // namespace stratos
