#pragma once
// Data parallelism inside a stage: the DP gradient synchronization (bucketed all-reduce or,
// for ZeRO, reduce-scatter into each rank's shard, overlapped with the last microbatch's
// backward -- ZeRO-2 and 3 with every microbatch's; or a gradient compressor's exchange) and
// Adam over the flat parameter vector,
// sharded over DP for ZeRO-1, 2 and 3. Split from runtime/trainer.cc; internal to the
// runtime (tested through the trainer's multi-process runs).
#include <torch/csrc/autograd/function_hook.h>
#include <torch/torch.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <memory>
#include <utility>
#include <vector>

#include "costmodel/error.h"
#include "runtime/communicator.h"
#include "runtime/compression.h"
#include "runtime/device.h"
#include "runtime/gpt.h"
#include "runtime/trainer.h"

// at::_fused_adam_ (LibTorch >= 2.1); -DSTRATOS_NO_FUSED_ADAM builds without it.
#if STRATOS_TORCH_AT_LEAST(2, 1) && !defined(STRATOS_NO_FUSED_ADAM)
#define STRATOS_FUSED_ADAM 1
#else
#define STRATOS_FUSED_ADAM 0
#endif

namespace stratos {

// Rank r's shard [lo, hi) of a flat vector of n elements split over D ranks for ZeRO: ceil(n / D)
// elements each, the last ones shorter or empty.
inline std::pair<int64_t, int64_t> ZeroShard(int64_t n, int D, int r) {
  const int64_t shard = (n + D - 1) / D;
  const int64_t lo = std::min(n, r * shard);
  return {lo, std::min(n, lo + shard)};
}

// A stage's flat gradient after the DP reduction (num_local_parameters elements): whole, or
// under ZeRO-2/3's per-microbatch reduction only what this rank keeps: its ZeroShard [lo, hi)
// and the buckets all-reduced whole (a tied word embedding split over stages), each a tensor of
// its own. The whole buckets hold their elements' current values; Narrow() copies them into the
// shard where the two overlap before it returns a view of the shard.
class ReducedGradient {
 public:
  explicit ReducedGradient(torch::Tensor whole) : shard_(std::move(whole)) {}
  ReducedGradient(torch::Tensor shard, int64_t shard_offset,
                  std::vector<std::pair<int64_t, torch::Tensor>> whole_buckets)
      : shard_(std::move(shard)),
        shard_offset_(shard_offset),
        whole_buckets_(std::move(whole_buckets)) {}

  // A view of elements [offset, offset + numel): of the whole bucket that holds them all, else
  // of the shard. Throws std::logic_error (STRATOS_CHECK) when neither holds them all.
  torch::Tensor Narrow(int64_t offset, int64_t numel) const {
    for (const auto& [at, bucket] : whole_buckets_)
      if (offset >= at && offset + numel <= at + bucket.numel())
        return bucket.narrow(0, offset - at, numel);
    const int64_t lo = shard_offset_, hi = shard_offset_ + shard_.numel();
    STRATOS_CHECK(numel == 0 || (offset >= lo && offset + numel <= hi),
                  "gradient elements [{}, {}) are not kept by this rank (its shard [{}, {}))",
                  offset, offset + numel, lo, hi);
    if (numel == 0) return shard_.narrow(0, 0, 0);
    torch::NoGradGuard no_grad;
    for (const auto& [at, bucket] : whole_buckets_) {
      const int64_t a = std::max(lo, at), b = std::min(hi, at + bucket.numel());
      if (a < b) shard_.narrow(0, a - lo, b - a).copy_(bucket.narrow(0, a - at, b - a));
    }
    return shard_.narrow(0, offset - lo, numel);
  }
  // Every element kept, divided / multiplied in place.
  void Divide(double divisor) {
    torch::NoGradGuard no_grad;
    shard_.div_(divisor);
    for (auto& [at, bucket] : whole_buckets_) bucket.div_(divisor);
  }
  void Multiply(double factor) {
    torch::NoGradGuard no_grad;
    shard_.mul_(factor);
    for (auto& [at, bucket] : whole_buckets_) bucket.mul_(factor);
  }

 private:
  torch::Tensor shard_;
  int64_t shard_offset_ = 0;
  std::vector<std::pair<int64_t, torch::Tensor>> whole_buckets_;  // (offset, bucket)
};

class GradientSynchronizer {
 public:
  // reduce_scatter (ZeRO-1, 2 and 3): each bucket reduce-scattered so that a DP rank gets the
  // summed gradient of its ShardedAdam shard only (ZeroShard); buckets holding a tied word
  // embedding split across stages (tied_split) are all-reduced whole, since the embedding group
  // then adds the other stage's copy element by element.
  //
  // every_microbatch (ZeRO-2 and 3, with reduce_scatter; DP > 1, no compressor): each backward
  // pass's gradients are reduced, not the iteration's sum once (Rajbhandari et al. SC'20 §5.2:
  // P_os+g keeps only the shard of the gradients; DeepSpeed's stage 2 reduces at every
  // microbatch, as the cost model prices it, TrainingSpec::zero_reduce_every_microbatch). A
  // bucket is copied into a buffer of its own, the parameters' gradients are released (so
  // autograd does not hold them from one microbatch to the next), and EndBackward() waits for
  // the pass's collectives and adds their results into this rank's shard of the flat gradient
  // (and whole all-reduced buckets into theirs): only those are allocated (ReducedGradient),
  // where the other modes keep the flat fp32 gradient of every parameter (RuntimeTraining's
  // grad_buffer_bytes_per_param).
  GradientSynchronizer(GptStage& stage, Communicator* dp, int64_t bucket_bytes, bool overlap,
                       GradientCompressor* compressor, bool reduce_scatter = false,
                       bool tied_split = false, bool every_microbatch = false)
      : stage_(stage),
        dp_(dp),
        overlap_(overlap && dp->Size() > 1),
        compressor_(compressor),
        reduce_scatter_(reduce_scatter && dp->Size() > 1),
        every_microbatch_(every_microbatch && reduce_scatter_ && compressor == nullptr) {
    const auto options = stage.FlatParameters().options();
    num_elements_ = stage.NumLocalParameters();
    if (every_microbatch_) {
      std::tie(shard_lo_, shard_hi_) = ZeroShard(num_elements_, dp_->Size(), dp_->Rank());
      flat_grads_ = torch::zeros({shard_hi_ - shard_lo_}, options);
    } else {
      flat_grads_ = torch::zeros({num_elements_}, options);
    }
    const auto& infos = stage.ParameterInfos();
    // Buckets over parameters in reverse order (the order backward produces their gradients).
    int64_t bucket_elements = 0;
    for (int p = static_cast<int>(infos.size()) - 1; p >= 0; --p) {
      if (buckets_.empty() || bucket_elements * 4 >= bucket_bytes) {
        buckets_.push_back({});
        bucket_elements = 0;
      }
      buckets_.back().params.push_back(p);
      bucket_elements += infos[p].numel;
      bucket_of_.resize(infos.size());
      bucket_of_[p] = static_cast<int>(buckets_.size()) - 1;
    }
    for (Bucket& b : buckets_) {
      b.offset = infos[b.params.back()].offset;
      const ParameterInfo& last = infos[b.params.front()];
      b.numel = last.offset + last.numel - b.offset;
      for (int p : b.params) b.all_reduce = b.all_reduce || (tied_split && infos[p].word_embedding);
      if (every_microbatch_ && b.all_reduce) b.whole = torch::zeros({b.numel}, options);
    }
    if (overlap_) {
      for (size_t p = 0; p < infos.size(); ++p) {
        auto accumulator = torch::autograd::impl::grad_accumulator(stage.Parameters()[p]);
        accumulator->add_post_hook(std::make_unique<Hook>(this, static_cast<int>(p)));
        accumulators_.push_back(std::move(accumulator));
      }
    }
  }

  void BeginStep() {
    armed_ = false;
    for (Bucket& b : buckets_) ResetBucket(b);
    next_launch_ = 0;
    collectives_ = 0;
    for (const torch::Tensor& p : stage_.Parameters()) ReleaseGradient(p);
    if (every_microbatch_) {
      flat_grads_.zero_();
      for (Bucket& b : buckets_)
        if (b.whole.defined()) b.whole.zero_();
    }
  }
  // Whether every backward pass's gradients are reduced (every_microbatch): arm before each
  // backward then, and call EndBackward() after it.
  bool ReducesEveryMicrobatch() const { return every_microbatch_; }
  // Call before the backward of the last microbatch (of every microbatch, ReducesEveryMicrobatch):
  // from then on, buckets whose parameters all have their gradient of the pass are reduced while
  // the backward continues.
  void Arm() { armed_ = overlap_; }
  // After each backward pass; nothing unless ReducesEveryMicrobatch(). Then launches the
  // buckets the pass left that hold a gradient (in bucket order: every DP rank's passes produce
  // the same ones), waits for the pass's collectives, adds their results into the flat gradient
  // and disarms.
  void EndBackward() {
    if (!every_microbatch_) return;
    for (size_t k = next_launch_; k < buckets_.size(); ++k)
      if (AnyGradient(buckets_[k])) Launch(k);
    torch::NoGradGuard no_grad;
    for (Bucket& b : buckets_) {
      if (b.work) {
        b.work->Wait();
        if (b.all_reduce)
          b.whole.add_(b.result);
        else if (b.result.numel() > 0)
          flat_grads_.narrow(0, b.result_offset - shard_lo_, b.result.numel()).add_(b.result);
      }
      ResetBucket(b);
    }
    next_launch_ = 0;
    armed_ = false;
  }

  // Launches what is left, waits for all buckets and returns the flat gradient summed over DP
  // (the DP mean with a compressor) (num_local_parameters elements; under ZeRO-2/3 reducing
  // every microbatch, this rank's shard and the whole all-reduced buckets only). Its tensors
  // are the synchronizer's own, overwritten by the next step.
  ReducedGradient Finish() {
    if (every_microbatch_) {
      EndBackward();
      std::vector<std::pair<int64_t, torch::Tensor>> whole;
      for (const Bucket& b : buckets_)
        if (b.whole.defined()) whole.emplace_back(b.offset, b.whole);
      return ReducedGradient(flat_grads_, shard_lo_, std::move(whole));
    }
    for (size_t k = next_launch_; k < buckets_.size(); ++k) Launch(k);
    next_launch_ = buckets_.size();
    for (Bucket& b : buckets_) {
      if (b.work) b.work->Wait();
      if (b.pending) b.pending->Finish();  // in bucket order on every rank (PowerSGD's Q)
      b.pending.reset();
    }
    armed_ = false;
    return ReducedGradient(flat_grads_);
  }
  // Bytes of the reduced gradient's buffers (the flat gradient, or the shard and whole buckets).
  int64_t GradientBufferBytes() const {
    int64_t bytes = flat_grads_.numel() * flat_grads_.element_size();
    for (const Bucket& b : buckets_)
      if (b.whole.defined()) bytes += b.whole.numel() * b.whole.element_size();
    return bytes;
  }
  // DP collectives (one per bucket launch) issued since BeginStep().
  int64_t CollectivesThisStep() const { return collectives_; }
  // Bytes of the stage's parameters' gradients that autograd holds now.
  int64_t ParameterGradientBytes() const {
    int64_t bytes = 0;
    for (const torch::Tensor& p : stage_.Parameters())
      if (p.grad().defined()) bytes += p.grad().numel() * p.grad().element_size();
    return bytes;
  }

 private:
  struct Bucket {
    std::vector<int> params;  // in launch order (reverse parameter order)
    int64_t offset = 0, numel = 0;
    bool all_reduce = false;  // ZeRO: all-reduced whole (a tied embedding split over stages)
    int ready = 0;
    std::shared_ptr<CommWork> work;
    std::unique_ptr<PendingReduce> pending;  // compressed exchange
    // every_microbatch: the pass's gradients of the bucket (sent), what this rank receives
    // (the bucket's piece of its shard, or the whole bucket all-reduced in place) and where
    // that lies in the flat gradient.
    torch::Tensor staging, result;
    int64_t result_offset = 0;
    torch::Tensor whole;  // every_microbatch and all_reduce: the bucket's summed gradient
  };
  static void ResetBucket(Bucket& b) {
    b.ready = 0;
    b.work.reset();
    b.pending.reset();
    b.staging = torch::Tensor();
    b.result = torch::Tensor();
  }
  static void ReleaseGradient(const torch::Tensor& p) {
    if (p.grad().defined()) const_cast<torch::Tensor&>(p).mutable_grad() = torch::Tensor();
  }
  bool AnyGradient(const Bucket& b) const {
    for (int p : b.params)
      if (stage_.Parameters()[p].grad().defined()) return true;
    return false;
  }
  // This rank's piece of bucket b under reduce-scatter: counts[r] = the bucket's elements in rank
  // r's shard; returns where this rank's piece starts in the flat gradient.
  int64_t ShardPieces(const Bucket& b, std::vector<int64_t>* counts) const {
    const int D = dp_->Size();
    const int64_t n = num_elements_, end = b.offset + b.numel;
    counts->assign(D, 0);
    int64_t mine = b.offset;
    for (int r = 0; r < D; ++r) {
      const auto [lo, hi] = ZeroShard(n, D, r);
      (*counts)[r] = std::max<int64_t>(0, std::min(end, hi) - std::max(b.offset, lo));
      if (r == dp_->Rank() && (*counts)[r] > 0) mine = std::max(b.offset, lo);
    }
    return mine;
  }
  struct Hook : torch::autograd::FunctionPostHook {
    Hook(GradientSynchronizer* owner, int param) : owner_(owner), param_(param) {}
    torch::autograd::variable_list operator()(const torch::autograd::variable_list& outputs,
                                              const torch::autograd::variable_list&) override {
      owner_->OnGradientReady(param_);
      return outputs;
    }
    GradientSynchronizer* owner_;
    int param_;
  };

  void OnGradientReady(int p) {
    if (!armed_) return;
    Bucket& b = buckets_[bucket_of_[p]];
    ++b.ready;
    // Launch in bucket order so every DP rank issues the same collective sequence.
    while (next_launch_ < buckets_.size() &&
           buckets_[next_launch_].ready >= static_cast<int>(buckets_[next_launch_].params.size())) {
      Launch(next_launch_++);
    }
  }

  void Launch(size_t k) {
    Bucket& b = buckets_[k];
    torch::NoGradGuard no_grad;
    const auto& infos = stage_.ParameterInfos();
    if (every_microbatch_) {
      b.staging = torch::empty({b.numel}, flat_grads_.options());
      for (int p : b.params) {
        const torch::Tensor& param = stage_.Parameters()[p];
        torch::Tensor slice = b.staging.narrow(0, infos[p].offset - b.offset, infos[p].numel);
        if (param.grad().defined()) slice.copy_(param.grad().reshape({-1}));
        else slice.zero_();
        ReleaseGradient(param);
      }
      if (b.all_reduce) {
        b.result = b.staging;
        b.result_offset = b.offset;
        b.work = dp_->AllReduceSumAsync(b.staging);
      } else {
        std::vector<int64_t> counts;
        b.result_offset = ShardPieces(b, &counts);
        b.result = torch::empty({counts[dp_->Rank()]}, flat_grads_.options());
        b.work = dp_->ReduceScatterAsync(b.result, b.staging, counts);
      }
      ++collectives_;
      return;
    }
    for (int p : b.params) {
      torch::Tensor slice = flat_grads_.narrow(0, infos[p].offset, infos[p].numel);
      const torch::Tensor& grad = stage_.Parameters()[p].grad();
      if (grad.defined()) slice.copy_(grad.reshape({-1}));
      else slice.zero_();
    }
    if (compressor_) {
      std::vector<torch::Tensor> grads;
      for (int p : b.params) grads.push_back(flat_grads_.narrow(0, infos[p].offset, infos[p].numel));
      b.pending = compressor_->ReduceAsync(b.params, grads, *dp_);
    } else if (reduce_scatter_ && !b.all_reduce) {
      // Piece r: the bucket's elements in rank r's shard.
      std::vector<int64_t> counts;
      const int64_t mine = ShardPieces(b, &counts);
      b.work = dp_->ReduceScatterAsync(flat_grads_.narrow(0, mine, counts[dp_->Rank()]),
                                       flat_grads_.narrow(0, b.offset, b.numel), counts);
    } else if (dp_->Size() > 1) {
      b.work = dp_->AllReduceSumAsync(flat_grads_.narrow(0, b.offset, b.numel));
    }
    if (b.work || b.pending) ++collectives_;
  }

  GptStage& stage_;
  Communicator* dp_;
  bool overlap_;
  GradientCompressor* compressor_;  // nullptr: plain all-reduce
  bool reduce_scatter_;
  bool every_microbatch_;
  bool armed_ = false;
  int64_t collectives_ = 0;
  int64_t num_elements_ = 0;  // num_local_parameters
  // (num_local_parameters,), or under every_microbatch this rank's shard [shard_lo_, shard_hi_).
  torch::Tensor flat_grads_;
  int64_t shard_lo_ = 0, shard_hi_ = 0;
  std::vector<Bucket> buckets_;
  std::vector<int> bucket_of_;
  size_t next_launch_ = 0;
  std::vector<std::shared_ptr<torch::autograd::Node>> accumulators_;
};

// Adam over the flat parameter vector, sharded over DP (ZeroShard) for ZeRO-1, 2 and 3 (whose
// reduced gradients are those of the shard only); for ZeRO-1 and 2 the updated shards are
// all-gathered, for ZeRO-3 (gather_updated false) each rank keeps its own shard only and the
// layers gather their parameters when they run (ParameterGatherer).
class ShardedAdam {
 public:
  ShardedAdam(const TrainOptions& options, torch::Tensor flat_params, Communicator* dp, bool zero1,
              bool gather_updated = true)
      : options_(options),
        params_(std::move(flat_params)),
        dp_(dp),
        zero1_(zero1 && dp->Size() > 1),
        gather_updated_(gather_updated) {
    const int64_t n = params_.numel();
    const int D = zero1_ ? dp->Size() : 1;
    shard_ = (n + D - 1) / D;
    std::tie(begin_, end_) = ZeroShard(n, D, zero1_ ? dp->Rank() : 0);
    m_ = torch::zeros({end_ - begin_}, params_.options());
    v_ = torch::zeros({end_ - begin_}, params_.options());
  }

  // grads: (n,) averaged over DP.
  void Step(const torch::Tensor& grads) { StepShard(grads.narrow(0, begin_, end_ - begin_)); }
  // grads: holds at least this rank's shard (GradientSynchronizer::Finish).
  void Step(const ReducedGradient& grads) { StepShard(grads.Narrow(begin_, end_ - begin_)); }

  int64_t StepCount() const { return step_; }
  // Whether Step() updates with the fused CUDA kernel (CUDA parameters, STRATOS_FUSED_ADAM).
  bool Fused() const {
#if STRATOS_FUSED_ADAM
    return params_.is_cuda();
#else
    return false;
#endif
  }
  // On the CPU, so that a checkpoint loads on any device.
  std::vector<torch::Tensor> State() const { return {m_.cpu(), v_.cpu(), torch::tensor({step_})}; }
  void LoadState(const torch::Tensor& m, const torch::Tensor& v, int64_t step) {
    STRATOS_CHECK(m.numel() == m_.numel() && v.numel() == v_.numel(),
                  "checkpoint optimizer shard of {} elements, expected {}", m.numel(), m_.numel());
    m_.copy_(m);
    v_.copy_(v);
    step_ = step;
  }

 private:
  // One Adam step of this rank's shard with its gradient g ((end_ - begin_,), DP mean), then
  // (ZeRO-1/2) the all-gather of the updated shards.
  void StepShard(const torch::Tensor& g) {
    torch::NoGradGuard no_grad;
    ++step_;
    const double b1 = options_.adam_beta1, b2 = options_.adam_beta2;
    torch::Tensor p = params_.narrow(0, begin_, end_ - begin_);
    if (!FusedStep(p, g)) {
      m_.mul_(b1).add_(g, 1 - b1);
      v_.mul_(b2).addcmul_(g, g, 1 - b2);
      const double bias1 = 1 - std::pow(b1, step_), bias2 = 1 - std::pow(b2, step_);
      torch::Tensor denom = (v_.sqrt() / std::sqrt(bias2)).add_(options_.adam_epsilon);
      p.addcdiv_(m_, denom, -options_.learning_rate / bias1);
    }
    if (zero1_ && gather_updated_) {
      const int D = dp_->Size();
      torch::Tensor local = torch::zeros({shard_}, params_.options());
      local.narrow(0, 0, end_ - begin_).copy_(p);
      std::vector<torch::Tensor> parts;
      for (int r = 0; r < D; ++r) parts.push_back(torch::empty({shard_}, params_.options()));
      dp_->AllGather(parts, local);
      const int64_t n = params_.numel();
      for (int r = 0; r < D; ++r) {
        const int64_t b = std::min(n, r * shard_), e = std::min(n, b + shard_);
        if (e > b) params_.narrow(0, b, e - b).copy_(parts[r].narrow(0, 0, e - b));
      }
    }
  }

  const TrainOptions& options_;
  torch::Tensor params_;
  Communicator* dp_;
  bool zero1_;
  bool gather_updated_;
  // The update of Step() in one kernel over p, g, m and v: torch.optim.Adam(fused=True)'s
  // at::_fused_adam_, the same formula as the unfused ops (Kingma & Ba 2015, Algorithm 1 with
  // the bias corrections folded into the step size), reading and writing each element once
  // instead of once per op. Returns false where it does not apply (see Fused()).
  bool FusedStep(const torch::Tensor& p, const torch::Tensor& g) {
#if STRATOS_FUSED_ADAM
    if (!Fused()) return false;
    if (p.numel() == 0) return true;  // an empty ZeRO shard
    if (!step_tensor_.defined()) step_tensor_ = torch::zeros({}, m_.options());
    step_tensor_.fill_(static_cast<double>(step_));
    const std::vector<torch::Tensor> params{p}, grads{g}, exp_avgs{m_}, exp_avg_sqs{v_},
        max_exp_avg_sqs, steps{step_tensor_};
    at::_fused_adam_(params, grads, exp_avgs, exp_avg_sqs, max_exp_avg_sqs, steps,
                     options_.learning_rate, options_.adam_beta1, options_.adam_beta2,
                     /*weight_decay=*/0.0, options_.adam_epsilon, /*amsgrad=*/false,
                     /*maximize=*/false);
    return true;
#else
    (void)p;
    (void)g;
    return false;
#endif
  }

  int64_t shard_ = 0, begin_ = 0, end_ = 0;
  torch::Tensor m_, v_;
  torch::Tensor step_tensor_;  // fp32 scalar on the device: the fused kernel's step count
  int64_t step_ = 0;
};

// ZeRO-3's parameter partitioning (Rajbhandari et al. SC'20 §5.3, "P_os+g+p"): each DP rank
// keeps only its ZeroShard of the stage's flat parameters up to date (ShardedAdam with
// gather_updated false), and a layer's parameters are all-gathered over DP before its forward
// pass and again before its backward pass, then released: after the forward, and when the
// backward moves on to the layer below (ReleaseAll() after the pass). The gathers are blocking and
// run on their own DP group (`gather`, the same ranks as the stage's DP group), so that they never
// interleave with the gradient reduce-scatters that the backward launches on the DP group.
//
// Released elements are overwritten with NaN, not returned to the allocator: the stage's
// parameters are views into one flat buffer, so this runtime reproduces ZeRO-3's communication
// and numerics but not its memory saving, and a gather missing anywhere makes the loss NaN.
class ParameterGatherer {
 public:
  // Installs itself as `stage`'s layer hook and releases every layer (each rank then holds only
  // its shard). `gather` must outlive it.
  ParameterGatherer(GptStage& stage, Communicator* gather) : stage_(stage), gather_(gather) {
    const int64_t n = stage.NumLocalParameters();
    std::tie(begin_, end_) = ZeroShard(n, gather->Size(), gather->Rank());
    stage_.SetLayerHook([this](int layer, GptStage::LayerEvent event) { OnLayer(layer, event); });
    ReleaseAll();
  }
  ~ParameterGatherer() { stage_.SetLayerHook({}); }
  ParameterGatherer(const ParameterGatherer&) = delete;
  ParameterGatherer& operator=(const ParameterGatherer&) = delete;

  // Every layer's parameters gathered (before a checkpoint), or released.
  void GatherAll() {
    for (int layer : stage_.LayerIndices()) Gather(layer);
  }
  void ReleaseAll() {
    for (int layer : stage_.LayerIndices()) Release(layer);
    gathered_.clear();
  }
  // Uneven all-gathers issued so far (one per contiguous parameter range of a layer).
  int64_t NumGathers() const { return num_gathers_; }

 private:
  void OnLayer(int layer, GptStage::LayerEvent event) {
    switch (event) {
      case GptStage::LayerEvent::kForward: Gather(layer); break;
      case GptStage::LayerEvent::kForwardDone: Release(layer); break;
      case GptStage::LayerEvent::kBackward:
        // The layers above have finished their backward.
        for (int done : gathered_) Release(done);
        gathered_.clear();
        Gather(layer);
        gathered_.push_back(layer);
        break;
    }
  }

  // The parameters' storage without autograd's version counter: the gathers and releases write
  // into tensors that the autograd graph saved, as ZeRO-3 does, and refill them before use.
  torch::Tensor Storage() const { return stage_.FlatParameters().variable_data(); }

  void Gather(int layer) {
    torch::NoGradGuard no_grad;
    const int D = gather_->Size();
    const int64_t n = stage_.NumLocalParameters();
    torch::Tensor flat = Storage();
    for (const auto& [lo, hi] : stage_.LayerParameterRanges(layer)) {
      std::vector<int64_t> counts(D);
      for (int r = 0; r < D; ++r) {
        const auto [shard_lo, shard_hi] = ZeroShard(n, D, r);
        counts[r] = std::max<int64_t>(0, std::min(hi, shard_hi) - std::max(lo, shard_lo));
      }
      const int64_t mine_lo = std::clamp(begin_, lo, hi);
      const torch::Tensor mine = flat.narrow(0, mine_lo, counts[gather_->Rank()]).clone();
      gather_->AllGatherUnevenAsync(flat.narrow(0, lo, hi - lo), mine, counts)->Wait();
      ++num_gathers_;
    }
  }

  void Release(int layer) {
    torch::NoGradGuard no_grad;
    torch::Tensor flat = Storage();
    const double nan = std::numeric_limits<double>::quiet_NaN();
    for (const auto& [lo, hi] : stage_.LayerParameterRanges(layer)) {
      // Everything in [lo, hi) outside this rank's shard [begin_, end_).
      const int64_t a = std::min(hi, std::max(lo, begin_)), b = std::max(lo, std::min(hi, end_));
      if (a > lo) flat.narrow(0, lo, a - lo).fill_(nan);
      if (hi > b) flat.narrow(0, b, hi - b).fill_(nan);
    }
  }

  GptStage& stage_;
  Communicator* gather_;
  int64_t begin_ = 0, end_ = 0;  // this rank's shard of the flat parameters
  std::vector<int> gathered_;    // layers gathered for the backward pass
  int64_t num_gathers_ = 0;
};

}  // namespace stratos
