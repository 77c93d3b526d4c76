#include "costmodel/cost_model.h"

#include <algorithm>
#include <fmt/format.h>

#include "costmodel/collective.h"
#include "costmodel/error.h"
#include "costmodel/matmul_efficiency.h"

namespace stratos {

StageTerms& StageTerms::operator+=(const StageTerms& o) {
  compute_seconds += o.compute_seconds;
  tp_comm_seconds += o.tp_comm_seconds;
  p2p_seconds += o.p2p_seconds;
  zero3_gather_seconds += o.zero3_gather_seconds;
  zero_reduce_scatter_seconds += o.zero_reduce_scatter_seconds;
  forward_seconds += o.forward_seconds;
  dp_sync_exposed_seconds += o.dp_sync_exposed_seconds;
  optimizer_seconds += o.optimizer_seconds;
  embedding_sync_seconds += o.embedding_sync_seconds;
  dp_bucketed_sync_seconds += o.dp_bucketed_sync_seconds;
  dp_backward_window_seconds += o.dp_backward_window_seconds;
  dp_last_bucket_seconds += o.dp_last_bucket_seconds;
  cut_cost_seconds += o.cut_cost_seconds;
  dp_sync_seconds += o.dp_sync_seconds;
  state_bytes += o.state_bytes;
  activation_bytes += o.activation_bytes;
  working_bytes += o.working_bytes;
  model_flops += o.model_flops;
  hardware_flops += o.hardware_flops;
  return *this;
}

StageTerms& StageTerms::operator*=(double w) {
  compute_seconds *= w;
  tp_comm_seconds *= w;
  p2p_seconds *= w;
  zero3_gather_seconds *= w;
  zero_reduce_scatter_seconds *= w;
  forward_seconds *= w;
  dp_sync_exposed_seconds *= w;
  optimizer_seconds *= w;
  embedding_sync_seconds *= w;
  dp_bucketed_sync_seconds *= w;
  dp_backward_window_seconds *= w;
  dp_last_bucket_seconds *= w;
  cut_cost_seconds *= w;
  dp_sync_seconds *= w;
  state_bytes *= w;
  activation_bytes *= w;
  working_bytes *= w;
  model_flops *= w;
  hardware_flops *= w;
  return *this;
}

StageTerms& StageTerms::operator-=(const StageTerms& o) {
  StageTerms negated = o;
  negated *= -1.0;
  return *this += negated;
}

int MicrobatchesInFlight(Schedule schedule, int num_stages, int stage_index, int num_microbatches) {
  STRATOS_CHECK(stage_index >= 0 && stage_index < num_stages, "stage {} of {}", stage_index,
                num_stages);
  if (schedule == Schedule::kGpipe) return num_microbatches;
  return std::min(num_microbatches, num_stages - stage_index);
}

int ChunkForwardsInFlight(Schedule schedule, int num_stages, int stage_index,
                          int num_microbatches, int virtual_stages) {
  const int v = virtual_stages;
  if (v == 1) return MicrobatchesInFlight(schedule, num_stages, stage_index, num_microbatches);
  STRATOS_CHECK(v > 1 && schedule == Schedule::kOneFOneB, "{} virtual stages with {}", v,
                ScheduleName(schedule));
  STRATOS_CHECK(stage_index >= 0 && stage_index < num_stages, "stage {} of {}", stage_index,
                num_stages);
  const int p = num_stages;
  return std::min(2 * (p - stage_index - 1) + (v - 1) * p + 1, num_microbatches * v);
}

CostModel::CostModel(const Problem& problem) : problem_(problem) {
  const ClusterSpec& cluster = problem.cluster;
  if (cluster.NumGroups() > 1)
    for (int g = 0; g < cluster.NumGroups(); ++g) group_views_.push_back(cluster.GroupView(g));
  // ZeRO-3 gathers a layer's parameters at a time: the largest layer sets its working memory.
  for (const LayerSpec& layer : problem.model.layers)
    largest_layer_params_ = std::max(largest_layer_params_, layer.stored_param_count);
}

const ClusterSpec& CostModel::GroupCluster(int node_group) const {
  if (group_views_.empty()) {
    STRATOS_CHECK(node_group == 0, "node group {} of a cluster with one", node_group);
    return problem_.cluster;
  }
  STRATOS_CHECK(node_group >= 0 && node_group < static_cast<int>(group_views_.size()),
                "node group {} of {}", node_group, group_views_.size());
  return group_views_[node_group];
}

double CostModel::DeviceMemoryCapacityBytes(int node_group) const {
  const DeviceSpec& device = GroupCluster(node_group).Device();
  return (device.memory_bytes - device.reserved_memory_bytes) / (1.0 + device.memory_fragmentation);
}

double CostModel::ReplicaMicrobatchSize(const StageConfig& config, int num_microbatches) const {
  return static_cast<double>(problem_.training.global_batch_size) /
         (static_cast<double>(num_microbatches) * config.data_parallel);
}

std::string CostModel::CheckStructure(const StageConfig& c) const {
  const int groups = problem_.cluster.NumGroups();
  if (c.node_group < 0 || c.node_group >= groups)
    return fmt::format("node_group {} must be in [0, {}] (the cluster has {} node group{})",
                       c.node_group, groups - 1, groups, groups == 1 ? "" : "s");
  const ClusterSpec& cluster = GroupCluster(c.node_group);
  const int gpus_per_node = cluster.GpusPerNode();
  if (c.mesh_nodes < 1 || c.mesh_gpus_per_node < 1)
    return fmt::format("mesh {}x{} must have at least one device", c.mesh_nodes,
                       c.mesh_gpus_per_node);
  const std::string where = groups == 1 ? std::string("the cluster")
                                        : "node group " + problem_.cluster.GroupName(c.node_group);
  if (c.mesh_nodes > cluster.NumNodes())
    return fmt::format("mesh spans {} nodes but {} has {}", c.mesh_nodes, where,
                       cluster.NumNodes());
  if (c.mesh_gpus_per_node > gpus_per_node)
    return fmt::format("mesh uses {} GPUs per node but nodes have {}", c.mesh_gpus_per_node,
                       gpus_per_node);
  if (c.mesh_nodes > 1 && c.mesh_gpus_per_node != gpus_per_node)
    return fmt::format("a mesh spanning {} nodes must use all {} GPUs of each node",
                       c.mesh_nodes, gpus_per_node);
  if (c.data_parallel < 1 || c.tensor_parallel < 1)
    return "data_parallel and tensor_parallel must be >= 1";
  if (c.data_parallel * c.tensor_parallel != c.NumDevices())
    return fmt::format("data_parallel {} x tensor_parallel {} != {} devices of the mesh",
                       c.data_parallel, c.tensor_parallel, c.NumDevices());
  // TP inside a node divides its GPUs; a TP group over several nodes takes whole nodes
  // (TensorParallelLayout), so that data_parallel x tensor_parallel = devices then also makes
  // it divide the mesh's nodes.
  if (c.tensor_parallel <= c.mesh_gpus_per_node ? c.mesh_gpus_per_node % c.tensor_parallel != 0
                                                : c.tensor_parallel % c.mesh_gpus_per_node != 0)
    return fmt::format("tensor_parallel {} must divide the mesh's {} GPUs per node or be a "
                       "multiple of them (a TP group spanning nodes takes whole nodes)",
                       c.tensor_parallel, c.mesh_gpus_per_node);
  const ModelSpec& model = problem_.model;
  if (model.num_attention_heads > 0 && model.num_attention_heads % c.tensor_parallel != 0)
    return fmt::format("tensor_parallel {} must divide the {} attention heads",
                       c.tensor_parallel, model.num_attention_heads);
  if (model.num_key_value_heads > 0 && model.num_key_value_heads % c.tensor_parallel != 0)
    return fmt::format("tensor_parallel {} must divide the {} key/value heads",
                       c.tensor_parallel, model.num_key_value_heads);
  if (c.zero_stage < 0 || c.zero_stage > 3)
    return fmt::format("zero_stage {} must be 0, 1, 2 or 3", c.zero_stage);
  return CheckStageCompression(c.grad_compression, c.zero_stage);
}

std::string CostModel::CheckConfig(const StageConfig& c, int m) const {
  std::string structure = CheckStructure(c);
  if (!structure.empty()) return structure;
  const int batch = problem_.training.global_batch_size;
  if (m < 1 || batch % m != 0)
    return fmt::format("num_microbatches {} must divide the global batch {}", m, batch);
  if ((batch / m) % c.data_parallel != 0)
    return fmt::format("data_parallel {} does not divide the microbatch of {} samples",
                       c.data_parallel, batch / m);
  return "";
}

GroupLayout TensorParallelLayout(const StageConfig& c) {
  const int tp = c.tensor_parallel, gpn = c.mesh_gpus_per_node;
  if (tp <= gpn) return {1, tp, gpn / tp};
  return {tp / gpn, gpn, 1};
}

// Ring collective over `nodes` x `gpn` GPUs, `concurrent` such groups sharing each node's NICs.
// `factor` = 2 for all-reduce, 1 for all-gather / reduce-scatter (bytes moved per rank are
// factor * (n-1)/n of the buffer; nccl-tests doc/PERFORMANCE.md). The formula, with its
// calibrated constants, is CollectiveSeconds (costmodel/collective.h): factor 2 is priced as an
// all-reduce, factor 1 as an all-gather (the call sites do not say whether they mean a
// reduce-scatter; use CollectiveSeconds with Collective::kReduceScatter for one).
static double RingCollectiveSeconds(const ClusterSpec& cluster, double bytes, double factor,
                                    int nodes, int gpn, int concurrent, bool with_latency) {
  const Collective kind = factor == 2.0 ? Collective::kAllReduce : Collective::kAllGather;
  return CollectiveSeconds(cluster, kind, bytes, GroupLayout{nodes, gpn, concurrent},
                           with_latency);
}

double CostModel::AllReduceSeconds(double bytes, int nodes, int gpn, int concurrent) const {
  return RingCollectiveSeconds(problem_.cluster, bytes, 2.0, nodes, gpn, concurrent, true);
}

double CostModel::AllGatherSeconds(double bytes, int nodes, int gpn, int concurrent) const {
  return RingCollectiveSeconds(problem_.cluster, bytes, 1.0, nodes, gpn, concurrent, true);
}

namespace {

// Layout of the DP groups of a stage, the complement of its TP groups (TensorParallelLayout, TP
// innermost): a DP group has one rank in each of the node sets a TP group spans (mesh_nodes /
// its nodes of them) and as many ranks per node as TP groups share a node; the TP group's ranks
// in a node each sit in a different DP group, all sharing the node's NICs. TP inside a node:
// mesh_gpus_per_node / tp ranks in every node, tp groups per node; TP over k whole nodes: one
// rank in every k-th node, mesh_gpus_per_node groups per node.
GroupLayout DataParallelLayout(const StageConfig& c) {
  const GroupLayout tp = TensorParallelLayout(c);
  return {c.mesh_nodes / tp.nodes, tp.concurrent_groups, tp.gpus_per_node};
}

// DP gradient synchronization of a stage once per iteration (Rajbhandari et al. SC'20 §5, §7):
// ZeRO-0 all-reduces the gradients; ZeRO-1/2 reduce-scatter them and, after the optimizer step,
// all-gather the updated parameters (`param_bytes`: half precision where the gradients may be
// fp32); ZeRO-3 only reduce-scatters (it gathers the parameters in every pass instead). Each
// collective priced as its own kind (collective.h CollectiveSeconds: a calibrated cluster fits
// each kind apart). With bytes 0 and with_latency, the latency and launch terms alone.
// One reduce-scatter of `grad_bytes` over the DP group (ZeRO-2/3's per-microbatch ones too).
double ReduceScatterSeconds(const ClusterSpec& cluster, double grad_bytes, const GroupLayout& g,
                            bool with_latency) {
  return CollectiveSeconds(cluster, Collective::kReduceScatter, grad_bytes, g, with_latency);
}

// The gradient reduction: ZeRO-0's all-reduce, ZeRO-1/2/3's reduce-scatter (what buckets carry).
double DpReduceSeconds(const ClusterSpec& cluster, int zero_stage, double grad_bytes,
                       const GroupLayout& g, bool with_latency) {
  if (zero_stage == 0)
    return CollectiveSeconds(cluster, Collective::kAllReduce, grad_bytes, g, with_latency);
  return ReduceScatterSeconds(cluster, grad_bytes, g, with_latency);
}

// ZeRO-1/2's all-gather of the updated parameters after the optimizer step; 0 otherwise.
double DpGatherSeconds(const ClusterSpec& cluster, int zero_stage, double param_bytes,
                       const GroupLayout& g, bool with_latency) {
  if (zero_stage == 0 || zero_stage >= 3) return 0.0;
  return CollectiveSeconds(cluster, Collective::kAllGather, param_bytes, g, with_latency);
}

// A DP synchronization `reduce_seconds` + `gather_seconds` into `terms`, its exposed part
// without buckets (1 - dp_overlap_fraction) of both; `bucketed`: the reduction as the bucketed
// S (StageTerms::BucketedDpExposedSeconds) and (1 - dp_overlap_fraction) of the all-gather.
void SetDpSync(const TrainingSpec& training, bool bucketed, double reduce_seconds,
               double gather_seconds, StageTerms* terms) {
  terms->dp_sync_seconds = reduce_seconds + gather_seconds;
  if (bucketed) {
    terms->dp_bucketed_sync_seconds = reduce_seconds;
    terms->dp_sync_exposed_seconds = (1.0 - training.dp_overlap_fraction) * gather_seconds;
  } else {
    terms->dp_sync_exposed_seconds = (1.0 - training.dp_overlap_fraction) * terms->dp_sync_seconds;
  }
}

// ZeRO-3's all-gathers of one layer's parameters (`param_bytes` per element) on one TP rank in
// one pass, over the DP group `g`: one collective of all of them (Zero3Gather::kLayer and
// kLayerPrefetch) or one per parameter tensor (kTensor, LayerParameterTensorElements), each with
// its latency and launch.
double Zero3GatherSeconds(const ClusterSpec& cluster, const ModelSpec& model,
                          const LayerSpec& layer, int tp, double param_bytes, Zero3Gather unit,
                          const GroupLayout& g) {
  if (unit != Zero3Gather::kTensor)
    return CollectiveSeconds(cluster, Collective::kAllGather,
                             layer.stored_param_count / tp * param_bytes, g, true);
  double seconds = 0.0;
  for (double elements : LayerParameterTensorElements(model, layer, tp))
    seconds += CollectiveSeconds(cluster, Collective::kAllGather, elements * param_bytes, g, true);
  return seconds;
}

// Bytes per element of the tied embeddings' gradient all-reduce (TrainingSpec).
double TiedEmbeddingGradBytes(const TrainingSpec& training) {
  return training.tied_embedding_grad_bytes > 0 ? training.tied_embedding_grad_bytes
                                                : training.grad_dtype_bytes;
}

bool Recomputes(const LayerSpec& layer) {
  return layer.kind == LayerKind::kTransformer || layer.kind == LayerKind::kExplicit;
}

// Stored activation bytes of one sample on one device (Korthikanti et al. 2022, Table 2): the
// replicated part is split by TP only with sequence parallelism; selective recomputation drops
// the attention scores; full recomputation keeps only the layer input.
double ActivationBytesPerSample(const LayerSpec& layer, int tp, bool sequence_parallel,
                                Recompute recompute) {
  const double replicated_divisor = (sequence_parallel && tp > 1) ? tp : 1;
  if (Recomputes(layer) && recompute == Recompute::kFull)
    return layer.input_bytes / replicated_divisor;
  double bytes = layer.activation_replicated_bytes / replicated_divisor +
                 layer.activation_sharded_bytes / tp;
  if (!(Recomputes(layer) && recompute == Recompute::kSelective))
    bytes += layer.activation_attention_bytes / tp;
  return bytes;
}

// ZeRO-2/3 keep only their shard of the gradients, so they cannot accumulate microbatches
// locally: every backward pass reduce-scatters its gradients (DeepSpeed's engine: "ZeRO stage >= 2
// communicates during non gradient accumulation boundaries as well"; FSDP outside no_sync), the
// last one in the iteration's tail, the m - 1 before it as the pipeline runs. The share of one
// reduce-scatter that each of the m microbatches carries, exposed: (1 - dp_overlap_fraction)
// (m - 1) / m; 0 below ZeRO-2, for m = 1 or where the framework reduces once per iteration.
double ZeroReduceScatterShare(const StageConfig& c, int m, const TrainingSpec& training) {
  if (c.zero_stage < 2 || m <= 1 || !training.zero_reduce_every_microbatch) return 0.0;
  return (1.0 - training.dp_overlap_fraction) * (m - 1.0) / m;
}

// Stored activations are built at 2 bytes per element (model.cc, Korthikanti et al.'s bf16/fp16
// accounting); a training whose activations are fp32 stores twice as many bytes. Applied to the
// memory terms only: the compute terms' HBM roofline and the messages keep the 2-byte sizes.
double ActivationMemoryScale(const TrainingSpec& training) {
  return training.activation_dtype_bytes / 2.0;
}

}  // namespace

double GradientAccumulationBytesPerParam(const TrainingSpec& training) {
  const double buffer = 2.0 * training.grad_dtype_bytes;  // read and written
  if (training.fused_elementwise_kernels)
    return std::max(0.0, buffer - training.param_dtype_bytes);
  return buffer + training.param_dtype_bytes;
}

BlockElementwiseBytes UnfusedBlockElementwiseBytes(const ModelSpec& model, int tensor_parallel,
                                                   bool sequence_parallel,
                                                   bool materialized_attention) {
  if (model.family == "llama")
    throw InputError(fmt::format(
        "model {}: training.fused_elementwise_kernels = false: the unfused count is Megatron-LM "
        "v1.1.5's GPT/BERT block (LayerNorm, GeLU, dropout); a llama block has none",
        model.name));
  STRATOS_CHECK(model.hidden_size > 0 && model.seq_length > 0 && tensor_parallel >= 1,
                "transformer shape h={} s={} tp={}", model.hidden_size, model.seq_length,
                tensor_parallel);
  const double h = model.hidden_size, s = model.seq_length, tp = tensor_parallel;
  const double f = model.ffn_hidden_size > 0 ? model.ffn_hidden_size : 4 * h;
  const double replicated_divisor = (sequence_parallel && tensor_parallel > 1) ? tp : 1;
  const double scores_per_token = materialized_attention ? model.num_attention_heads * s : 0.0;
  BlockElementwiseBytes bytes;
  bytes.attention_forward = s * 14 * scores_per_token / tp;
  bytes.forward =
      s * (38 * h / replicated_divisor + (4 * h + 8 * f) / tp) + bytes.attention_forward;
  bytes.backward =
      s * (38 * h / replicated_divisor + (10 * h + 8 * f) / tp + 16 * scores_per_token / tp);
  return bytes;
}

double FlashAttentionComputedShare(const ModelSpec& model) {
  if (model.family == "bert" || model.seq_length <= 0) return 1.0;
  const double s = model.seq_length;
  return (s + 1) / (2 * s);
}

LayerCompute LayerComputeSeconds(const ModelSpec& model, int layer_index,
                                 const DeviceSpec& device, const TrainingSpec& training,
                                 double samples, int tensor_parallel, Recompute recompute,
                                 bool use_layer_curve) {
  const LayerSpec& layer = model.layers.at(layer_index);
  const double b = samples;
  const int tp = tensor_parallel;
  const double ratio = model.backward_to_forward_ratio;
  LayerCompute out;
  // GEMM FLOPs at the device's achievable matmul rate (Megatron SC'21 appendix: a block's
  // forward is 24bsh^2 + 4bs^2h, backward twice that, full recomputation one forward more,
  // selective recomputation the attention scores; Korthikanti et al. 2022 §5), plus a roofline
  // term for memory-bound ops: every stored activation byte is written in forward and read and
  // written (as its gradient) in backward. On a device with a GEMM curve a whole block's GEMMs
  // are priced one by one, each at its own shape, and its attention core by its roofline
  // (matmul_efficiency.h TransformerBlockGemms, AttentionCoreSeconds); otherwise every GEMM of
  // the layer runs at the efficiency of the layer's largest GEMM (LayerGemmShape).
  out.forward_flops = layer.forward_flops * b / tp;
  const bool recomputes = Recomputes(layer);
  double gemm_seconds = 0, gemm_backward_seconds = 0, attention_seconds = 0;
  if (device.matmul_curve && layer.kind == LayerKind::kTransformer && !layer.block_operator &&
      model.hidden_size > 0) {
    for (const GemmShape& shape : TransformerBlockGemms(model, b, tp).dense)
      gemm_seconds += MatmulSeconds(*device.matmul_curve, device.peak_flops, shape);
    attention_seconds =
        AttentionCoreSeconds(device, model, b, tp, layer.activation_attention_bytes > 0);
    gemm_seconds += attention_seconds;
    gemm_backward_seconds = ratio * gemm_seconds;
  } else {
    const double flops_per_second =
        device.peak_flops * MatmulEfficiency(device, LayerGemmShape(model, layer, b, tp));
    gemm_seconds = out.forward_flops / flops_per_second;
    gemm_backward_seconds = ratio * out.forward_flops / flops_per_second;
    attention_seconds = layer.attention_flops * b / tp / flops_per_second;
  }
  // FlashAttention: the scores a causal mask hides are not computed, and the backward recomputes
  // the ones that are (FlashAttentionComputedShare, kFlashAttentionBackwardToForward).
  if (layer.kind == LayerKind::kTransformer && layer.attention_flops > 0 &&
      layer.activation_attention_bytes == 0) {
    const double dense_forward = gemm_seconds - attention_seconds;
    const double dense_backward = gemm_backward_seconds - ratio * attention_seconds;
    attention_seconds *= FlashAttentionComputedShare(model);
    gemm_seconds = dense_forward + attention_seconds;
    gemm_backward_seconds = dense_backward + kFlashAttentionBackwardToForward * attention_seconds;
  }
  // What the forward writes: its stored activations, read and written again in backward. A
  // head's logits instead: the half-precision logits written, their fp32 cast and the cross
  // entropy's passes (the softmax it stores among them), and in backward the gradient's passes.
  const double logits = b * layer.logits_per_sample / tp;
  const double stored_softmax_bytes = kStoredSoftmaxBytesPerLogit * logits;
  const double full_activation_bytes =
      b * ActivationBytesPerSample(layer, tp, training.sequence_parallel, Recompute::kNone) -
      stored_softmax_bytes;
  const double hbm = device.hbm_bytes_per_second;
  // The block's memory-bound kernels, fused (each stored byte written forward, read and written
  // backward) or one PyTorch kernel per op (UnfusedBlockElementwiseBytes).
  double forward_bytes = full_activation_bytes, backward_bytes = 2.0 * full_activation_bytes;
  double recompute_attention_bytes = b * layer.activation_attention_bytes / tp;
  if (!training.fused_elementwise_kernels && layer.kind == LayerKind::kTransformer &&
      !layer.block_operator) {
    const BlockElementwiseBytes unfused = UnfusedBlockElementwiseBytes(
        model, tp, training.sequence_parallel, layer.activation_attention_bytes > 0);
    forward_bytes = b * unfused.forward;
    backward_bytes = b * unfused.backward;
    recompute_attention_bytes = b * unfused.attention_forward;
  }
  out.loss_forward_seconds = logits * kCrossEntropyForwardBytesPerLogit / hbm;
  out.forward_seconds = gemm_seconds + forward_bytes / hbm +
                        logits * (kHalfLogitBytes + kLogitCastForwardBytes) / hbm +
                        out.loss_forward_seconds;
  out.backward_seconds = gemm_backward_seconds + backward_bytes / hbm +
                         logits * kCrossEntropyBackwardBytesPerLogit / hbm;
  if (recomputes && recompute == Recompute::kFull) {
    out.recompute_flops = out.forward_flops;
    out.recompute_seconds = out.forward_seconds;
  }
  if (recomputes && recompute == Recompute::kSelective) {
    out.recompute_flops = layer.attention_flops * b / tp;
    out.recompute_seconds = attention_seconds + recompute_attention_bytes / hbm;
  }
  // A whole transformer block (not one of its operators) on a device with a calibrated block
  // curve (cluster.h LayerCurve): each pass through it; a full recomputation is one more forward
  // pass, a selective one runs inside the backward pass (scaled, no floor of its own).
  if (use_layer_curve && device.layer_curve && layer.kind == LayerKind::kTransformer &&
      !layer.block_operator) {
    const LayerCurve& curve = *device.layer_curve;
    const double forward = curve.Forward(out.forward_seconds);
    out.backward_seconds = curve.Backward(out.backward_seconds);
    if (recomputes && recompute == Recompute::kFull) out.recompute_seconds = forward;
    if (recomputes && recompute == Recompute::kSelective)
      out.recompute_seconds *= curve.backward_scale;
    out.forward_seconds = forward;
  }
  return out;
}

StageTerms CostModel::LayerTerms(int layer_index, const StageConfig& c, int m) const {
  const LayerSpec& layer = problem_.model.layers.at(layer_index);
  const TrainingSpec& training = problem_.training;
  const ClusterSpec& cluster = GroupCluster(c.node_group);
  const DeviceSpec& device = cluster.Device();
  const int tp = c.tensor_parallel;
  const int dp = c.data_parallel;
  const double b = ReplicaMicrobatchSize(c, m);
  const double ratio = problem_.model.backward_to_forward_ratio;
  StageTerms terms;

  const LayerCompute compute =
      LayerComputeSeconds(problem_.model, layer_index, device, training, b, tp, c.recompute);
  const double forward_flops = compute.forward_flops;
  const bool recomputes = Recomputes(layer);
  const double flops_per_second =
      device.peak_flops * MatmulEfficiency(device, LayerGemmShape(problem_.model, layer, b, tp));
  terms.compute_seconds = compute.TotalSeconds();
  terms.forward_seconds = compute.forward_seconds;
  terms.model_flops = (1.0 + ratio) * forward_flops;
  terms.hardware_flops = terms.model_flops + compute.recompute_flops;

  // Tensor parallelism (Narayanan et al. SC'21 §3.2): tp_allreduces_per_forward all-reduces of
  // the layer's activations in forward, as many in backward, and again in a full recompute. With
  // sequence parallelism each becomes an all-gather + reduce-scatter of the same volume. The
  // share tp_comm_overlap_fraction runs under the GEMMs (Megatron-Core --tp-comm-overlap) and
  // leaves the critical path.
  if (tp > 1 && layer.tp_allreduces_per_forward > 0) {
    const double message_bytes = b * std::max(layer.input_bytes, layer.output_bytes);
    const GroupLayout group = TensorParallelLayout(c);
    const double one = RingCollectiveSeconds(cluster, message_bytes, 2.0, group.nodes,
                                             group.gpus_per_node, group.concurrent_groups, true);
    const int passes = 2 + ((recomputes && c.recompute == Recompute::kFull) ? 1 : 0);
    const double exposed = 1.0 - training.tp_comm_overlap_fraction;
    terms.tp_comm_seconds = exposed * (passes * layer.tp_allreduces_per_forward * one);
    terms.forward_seconds += exposed * (layer.tp_allreduces_per_forward * one);
  }

  // Model states (Rajbhandari et al. SC'20 §3, §5.1): (2 + 2 + K) bytes per parameter, with
  // ZeRO-1 sharding K, ZeRO-2 also the gradients, ZeRO-3 also the parameters over the DP group.
  const double params = layer.stored_param_count / tp;
  const double pb = training.param_dtype_bytes;
  const double gb = training.grad_dtype_bytes;
  const double kb = training.optimizer_state_bytes_per_param;
  switch (c.zero_stage) {
    case 0: terms.state_bytes = params * (pb + gb + kb); break;
    case 1: terms.state_bytes = params * (pb + gb + kb / dp); break;
    case 2: terms.state_bytes = params * (pb + (gb + kb) / dp); break;
    default: terms.state_bytes = params * (pb + gb + kb) / dp; break;
  }
  terms.state_bytes += params * training.buffer_bytes_per_param;
  // ZeRO-2/3 reducing each microbatch's gradients keep no flat gradient buffer, only their shard.
  const bool reduces_into_shard =
      c.zero_stage >= 2 && dp > 1 && training.zero_reduce_every_microbatch;
  if (!reduces_into_shard) terms.state_bytes += params * training.grad_buffer_bytes_per_param;
  // Gradient accumulation: each microbatch's backward adds the weight gradients it computes
  // (param dtype) into the gradient buffer (grad dtype), or into the shard, a memory-bound add
  // that reads both and writes the buffer (GradientAccumulationBytesPerParam).
  const double accumulated_params = reduces_into_shard ? params / dp : params;
  terms.compute_seconds += accumulated_params * GradientAccumulationBytesPerParam(training) /
                           device.hbm_bytes_per_second;
  terms.activation_bytes = ActivationMemoryScale(training) * b *
                           ActivationBytesPerSample(layer, tp, training.sequence_parallel,
                                                    c.recompute);
  // The cross entropy's forward transient beside the softmax it keeps (a head's logits).
  terms.working_bytes = training.loss_transient_bytes_per_logit * b * layer.logits_per_sample / tp;

  // Data parallelism. Gradient sync once per iteration (bandwidth part here, latency once per
  // stage in StageOverhead; DpReduceSeconds + DpGatherSeconds; a calibrated pipelining term
  // (collective.h) per layer, as if each layer's gradients were one bucket; with
  // TrainingSpec::dp_bucket_bytes the reduction in buckets under the backward pass, SetDpSync):
  // all-reduce for ZeRO 0; reduce-scatter of the gradients + all-gather of the updated
  // parameters for ZeRO 1-2; reduce-scatter only for
  // ZeRO-3, which instead all-gathers the parameters in every forward and backward pass (1.5x
  // volume; Rajbhandari et al. SC'20 §7), a layer or a tensor at a time (Zero3GatherSeconds).
  // With gradient compression (ZeRO 0-1 only, costmodel/compression.h) each of the layer's
  // gradient tensors is exchanged in its compressed form: ring all-reduce of its MessageBytes,
  // or an all-gather of n messages; ZeRO-1 then
  // all-gathers the updated parameters, and its half-precision casts, being linear,
  // reduce-scatter instead of all-reducing.
  // Compressing and decompressing run on the device's cores after the last backward, so their
  // time (CompressionWorkOf) is exposed in full, not hidden behind the backward pass.
  if (dp > 1 && params > 0 && c.grad_compression.kind != GradCompression::kNone) {
    const GroupLayout g = DataParallelLayout(c);
    double all_reduce_bytes = 0, all_gather_bytes = 0, work_seconds = 0;
    for (const GradientTensorShape& shape : LayerGradientShapes(problem_.model, layer, tp)) {
      const CompressedMessage message = MessageBytes(c.grad_compression, shape, gb);
      all_reduce_bytes += message.all_reduce_bytes;
      all_gather_bytes += message.all_gather_bytes;
      const CompressionWork work = CompressionWorkOf(c.grad_compression, shape, gb, dp);
      work_seconds +=
          work.flops / flops_per_second + work.memory_bytes / device.hbm_bytes_per_second;
    }
    const bool cast = c.grad_compression.kind == GradCompression::kBf16 ||
                      c.grad_compression.kind == GradCompression::kFp16;
    const double reduce_factor = c.zero_stage == 1 && cast ? 1.0 : 2.0;
    const double sync_seconds =
        RingCollectiveSeconds(cluster, all_reduce_bytes, reduce_factor, g.nodes, g.gpus_per_node,
                              g.concurrent_groups, false) +
        RingCollectiveSeconds(cluster, dp * all_gather_bytes, 1.0, g.nodes, g.gpus_per_node,
                              g.concurrent_groups, false) +
        (c.zero_stage == 1 ? RingCollectiveSeconds(cluster, params * pb, 1.0, g.nodes,
                                                   g.gpus_per_node, g.concurrent_groups, false)
                           : 0.0);
    terms.dp_sync_seconds = sync_seconds + work_seconds;
    terms.dp_sync_exposed_seconds =
        (1.0 - training.dp_overlap_fraction) * sync_seconds + work_seconds;
  } else if (dp > 1 && params > 0) {
    const GroupLayout g = DataParallelLayout(c);
    const double grad_bytes = params * gb;
    SetDpSync(training, training.dp_bucket_bytes > 0,
              DpReduceSeconds(cluster, c.zero_stage, grad_bytes, g, false),
              DpGatherSeconds(cluster, c.zero_stage, params * pb, g, false), &terms);
    // ZeRO-2/3's reduce-scatters before the last microbatch's (ZeroReduceScatterShare).
    if (const double share = ZeroReduceScatterShare(c, m, training); share > 0)
      terms.zero_reduce_scatter_seconds =
          share * ReduceScatterSeconds(cluster, grad_bytes, g, false);
    if (c.zero_stage == 3) {
      const double gather =
          Zero3GatherSeconds(cluster, problem_.model, layer, tp, pb, training.zero3_gather, g);
      // Each pass's gather, or with prefetch what the pass's compute leaves of it.
      const bool prefetch = training.zero3_gather == Zero3Gather::kLayerPrefetch;
      const auto exposed = [&](double compute_seconds) {
        return prefetch ? std::max(0.0, gather - compute_seconds) : gather;
      };
      const double forward = exposed(compute.forward_seconds);
      terms.zero3_gather_seconds = forward + exposed(compute.backward_seconds);
      if (recomputes && c.recompute == Recompute::kFull)
        terms.zero3_gather_seconds += exposed(compute.recompute_seconds);
      terms.forward_seconds += forward;
    }
  }
  // Buckets hide the reduction behind the last microbatch's backward pass, recomputation
  // included (StageTerms::BucketedDpExposedSeconds), every layer's, with parameters or not.
  if (training.dp_bucket_bytes > 0 && dp > 1 && c.grad_compression.kind == GradCompression::kNone)
    terms.dp_backward_window_seconds = compute.backward_seconds + compute.recompute_seconds;
  // Optimizer step: memory bound, over the parameters this device updates.
  const double updated_params = c.zero_stage >= 1 ? params / dp : params;
  terms.optimizer_seconds =
      updated_params * training.optimizer_step_bytes_per_param / device.hbm_bytes_per_second;
  return terms;
}

StageTerms CostModel::StageOverhead(const StageConfig& c, int m, bool first_stage,
                                    bool last_stage, int previous_group, int next_group) const {
  const ClusterSpec& cluster = GroupCluster(c.node_group);
  const ModelSpec& model = problem_.model;
  const TrainingSpec& training = problem_.training;
  const double b = ReplicaMicrobatchSize(c, m);
  const int tp = c.tensor_parallel;
  StageTerms terms;

  // Pipeline point-to-point (Narayanan et al. SC'21 §4.1, scatter/gather): each TP rank sends
  // 1/tp of the boundary activations of its replica's microbatch forward (unless last stage) and
  // receives their gradients backward (unless first); the whole activation without
  // training.pp_scatter_gather. Across nodes when the mesh fills whole nodes of a multi-node
  // cluster (its neighbour then sits on another node); then each node's GPUs share its NICs. A
  // neighbour in another node group sits on another node: the send crosses the level between the
  // two groups (ClusterSpec::LinkBetween). With v virtual stages (interleaved 1F1B, SC'21
  // §2.2.2) every one of the device's v chunks sends, except the model's last chunk forward and
  // its first backward; a single-stage pipeline sends nothing. The share pp_comm_overlap_fraction runs under compute.
  double boundary_bytes_per_sample = 0.0;
  for (const LayerSpec& layer : model.layers)
    boundary_bytes_per_sample = std::max(boundary_bytes_per_sample, layer.output_bytes);
  const double per_gpu_bytes =
      b * boundary_bytes_per_sample / (training.pp_scatter_gather ? tp : 1);
  const bool crosses_nodes =
      cluster.NumNodes() > 1 && c.mesh_gpus_per_node == cluster.GpusPerNode();
  // One send to a stage in node group `to`: the group's own levels, or the link between groups
  // (each node's GPUs of the mesh share its NICs, as across nodes).
  const auto send_seconds = [&](int to) {
    if (per_gpu_bytes <= 0) return 0.0;
    if (to >= 0 && to != c.node_group) {
      const NetworkLevel& level = problem_.cluster.LinkBetween(c.node_group, to);
      return per_gpu_bytes * c.mesh_gpus_per_node / level.EffectiveBandwidth() +
             level.latency_seconds;
    }
    if (crosses_nodes) {
      const NetworkLevel& level = cluster.InterNode();
      return per_gpu_bytes * c.mesh_gpus_per_node / level.EffectiveBandwidth() +
             level.latency_seconds;
    }
    const NetworkLevel& level = cluster.IntraNode();
    return per_gpu_bytes / level.EffectiveBandwidth() + level.latency_seconds;
  };
  const int v = training.virtual_pipeline_stages;
  const bool single_stage = first_stage && last_stage;
  const int forward_sends = single_stage ? 0 : v - (last_stage ? 1 : 0);
  const int backward_sends = single_stage ? 0 : v - (first_stage ? 1 : 0);
  const double exposed = 1.0 - training.pp_comm_overlap_fraction;
  const double forward_send = forward_sends > 0 ? send_seconds(next_group) : 0.0;
  const double backward_send = backward_sends > 0 ? send_seconds(previous_group) : 0.0;
  terms.p2p_seconds =  // one product when both directions cost the same, as before groups
      forward_send == backward_send
          ? exposed * ((forward_sends + backward_sends) * forward_send)
          : exposed * (forward_sends * forward_send + backward_sends * backward_send);
  terms.forward_seconds = exposed * (forward_sends * forward_send);
  // Scatter/gather without sequence parallelism: after each receive (a forward receive for every
  // backward send, and the converse) the stage's TP ranks all-gather the boundary activation
  // (Megatron-LM's gather_split_1d_tensor; with sequence parallelism the layers take it split).
  if (training.pp_scatter_gather && !training.sequence_parallel && tp > 1 &&
      boundary_bytes_per_sample > 0) {
    const GroupLayout group = TensorParallelLayout(c);
    const double gather =
        RingCollectiveSeconds(cluster, b * boundary_bytes_per_sample, 1.0, group.nodes,
                              group.gpus_per_node, group.concurrent_groups, true);
    terms.tp_comm_seconds += (forward_sends + backward_sends) * gather;
    terms.forward_seconds += backward_sends * gather;
  }

  // Latency of the bucketed DP gradient synchronization, once per iteration; with buckets
  // (TrainingSpec::dp_bucket_bytes, uncompressed gradients) the reduction of the last one.
  if (c.data_parallel > 1) {
    const GroupLayout g = DataParallelLayout(c);
    const bool bucketed =
        training.dp_bucket_bytes > 0 && c.grad_compression.kind == GradCompression::kNone;
    SetDpSync(training, bucketed, DpReduceSeconds(cluster, c.zero_stage, 0.0, g, true),
              DpGatherSeconds(cluster, c.zero_stage, 0.0, g, true), &terms);
    if (bucketed)
      terms.dp_last_bucket_seconds =
          DpReduceSeconds(cluster, c.zero_stage, training.dp_bucket_bytes, g, true);
    // ... and of ZeRO-2/3's reduce-scatters in the m - 1 microbatches before the last (LayerTerms).
    if (const double share = ZeroReduceScatterShare(c, m, training); share > 0)
      terms.zero_reduce_scatter_seconds = share * ReduceScatterSeconds(cluster, 0.0, g, true);
  }

  // ZeRO-3's parameters in flight (Rajbhandari et al. SC'20 §5.3; PyTorch FSDP's per-block
  // units): the layer being computed holds its gathered parameters and, in backward, its full
  // gradient until the reduce-scatter, while the next layer's parameters are gathered ahead
  // (FSDP's default backward prefetch, at most two all-gathers in flight; DeepSpeed's
  // prefetch). At its peak: 2 layers of parameters and 1 of gradients, of the model's largest
  // layer (on this TP rank), not the stage's: a per-stage constant keeps the stage terms
  // additive. It contains ZeRO-Infinity's model-state working memory (SC'21 §3, one operator).
  if (c.zero_stage == 3 && c.data_parallel > 1)
    terms.working_bytes += largest_layer_params_ / tp *
                           (2.0 * training.param_dtype_bytes + training.grad_dtype_bytes);

  // Full recomputation re-materializes one layer's activations at a time: the largest one.
  if (c.recompute == Recompute::kFull) {
    double largest = 0.0;
    for (const LayerSpec& layer : model.layers)
      if (Recomputes(layer))
        largest = std::max(largest, ActivationBytesPerSample(layer, tp, training.sequence_parallel,
                                                             Recompute::kNone));
    terms.working_bytes += ActivationMemoryScale(training) * b * largest;
  }
  // Tied word embeddings split over the pipeline (Megatron-LM's _allreduce_word_embedding_grads,
  // DeepSpeed's allreduce_tied_weight_gradients, the runtime's embedding group): after the DP
  // sync, each rank of the first stage and its counterpart on the last stage all-reduce their
  // copies' gradient (vocabulary x hidden / tp elements of TrainingSpec's
  // tied_embedding_grad_bytes), unhidden. On a cluster of several nodes the two ends sit on
  // different nodes (a pipeline is laid out stage after stage), every rank of the stage's mesh
  // in a node sharing its NICs; on one node over its links. The partner's node group is not
  // known here: the link is this stage's group's inter-node level (exact on a homogeneous
  // cluster, split into groups or not).
  if (model.tie_word_embeddings && first_stage != last_stage && !model.layers.empty()) {
    const LayerSpec& head = model.layers.back();
    const double tied_params = head.kind == LayerKind::kHead
                                   ? (head.stored_param_count - head.param_count) / tp
                                   : 0.0;
    if (tied_params > 0) {
      const GroupLayout pair = problem_.cluster.NumNodes() > 1
                                   ? GroupLayout{2, 1, c.mesh_gpus_per_node}
                                   : GroupLayout{1, 2, 1};
      terms.embedding_sync_seconds =
          CollectiveSeconds(cluster, Collective::kAllReduce,
                            tied_params * TiedEmbeddingGradBytes(training), pair, true);
    }
  }
  if (!last_stage) terms.cut_cost_seconds = model.cut_cost_seconds;
  return terms;
}

}  // namespace stratos
