#include "runtime/pipeline_step.h"

#include <fmt/format.h>

namespace stratos {

using torch::Tensor;

PipelineStep::PipelineStep(const Plan& plan, const PipelineLayout& layout, const ModelSpec& model,
                           const CharDataset& data, uint64_t seed, GptStage& stage,
                           Communicator& world, Communicator& tp, GradientSynchronizer& sync,
                           torch::Device device)
    : layout_(layout),
      data_(data),
      seed_(seed),
      stage_(stage),
      world_(world),
      tp_(tp),
      sync_(sync),
      device_(device),
      v_(plan.virtual_stages),
      num_virtual_(plan.NumStages()),
      m_(plan.num_microbatches),
      global_batch_(plan.global_batch_size),
      b_(plan.global_batch_size / (plan.num_microbatches * layout.dp)),
      seq_(model.seq_length),
      hidden_(model.hidden_size),
      schedule_(RankSchedule(plan.schedule, layout.pp, plan.virtual_stages, layout.stage,
                             plan.num_microbatches)) {
  // Virtual stage k - 1 runs on the previous pipeline rank and k + 1 on the next (wrapping
  // around between a rank's chunks with virtual stages).
  const int prev = (layout.stage + layout.pp - 1) % layout.pp;
  const int next = (layout.stage + 1) % layout.pp;
  const int samples = global_batch_ / m_;
  with_prev_ = ReshardPieces(layout, prev, samples, seq_ * hidden_);
  with_next_ = ReshardPieces(layout, next, samples, seq_ * hidden_);
  tp_parts_ = ScatterGatherCounts(layout.tp, b_ * seq_ * hidden_);
  for (int u = 0; u < layout.tp_rank; ++u) my_part_ += tp_parts_[u];
}

void PipelineStep::Receive(const std::vector<Piece>& pieces, Tensor& into, int tag) {
  Tensor whole = into.view({-1});
  Tensor part =
      layout_.tp == 1 ? whole : torch::empty({tp_parts_[layout_.tp_rank]}, into.options());
  std::vector<std::shared_ptr<CommWork>> works;
  for (const Piece& piece : pieces)
    works.push_back(
        world_.RecvAsync(part.narrow(0, piece.offset - my_part_, piece.count), piece.peer, tag));
  for (auto& work : works) work->Wait();
  if (layout_.tp > 1) tp_.AllGatherUnevenAsync(whole, part, tp_parts_)->Wait();
}

void PipelineStep::Send(const std::vector<Piece>& pieces, const Tensor& from, int tag) {
  const Tensor whole = from.contiguous().view({-1});
  for (const Piece& piece : pieces) {
    Tensor buffer = whole.narrow(0, piece.offset, piece.count);
    sends_.push_back(world_.SendAsync(buffer, piece.peer, tag));
    send_buffers_.push_back(buffer);
  }
}

std::string PipelineStep::PassName(const char* kind, int microbatch, int chunk) const {
  return v_ == 1 ? fmt::format("{}{}", kind, microbatch)
                 : fmt::format("{}{}c{}", kind, microbatch, chunk);
}

std::vector<Tensor> PipelineStep::Run(int step, const StepObserver& observer) {
  // Point-to-point tags: the activations of virtual stage k's microbatch i, and their gradient.
  const auto activation_tag = [&](int k, int i) { return 2 * (k * m_ + i); };
  const auto gradient_tag = [&](int k, int i) { return 2 * (k * m_ + i) + 1; };
  const auto activation_options =
      torch::TensorOptions().dtype(stage_.ActivationDtype()).device(device_);
  std::vector<std::vector<Tensor>> inputs(v_, std::vector<Tensor>(m_)), outputs = inputs;
  std::vector<Tensor> losses;  // per microbatch, on the device (read once, after the step)
  for (const StageAction& action : schedule_) {
    const PipelineOp& op = action.op;
    const int i = op.microbatch;
    const int k = action.stage;     // virtual stage
    const int c = k / layout_.pp;   // the rank's chunk
    const bool first = k == 0, last = k == num_virtual_ - 1;
    const int first_sample = i * (global_batch_ / m_) + layout_.dp_rank * b_;
    if (op.kind == PipelineOp::kForward) {
      Tensor input;
      CharDataset::Batch batch;
      if (first || last) {
        batch = data_.TrainBatch(seed_, step, global_batch_, first_sample, b_);
        batch.inputs = batch.inputs.to(device_);
        batch.targets = batch.targets.to(device_);
      }
      if (first) {
        input = batch.inputs;
      } else {
        observer.doing("receiving activations", true, i, with_prev_.front().peer);
        const int a = observer.mark();
        input = torch::empty({b_, seq_, hidden_}, activation_options);
        Receive(with_prev_, input, activation_tag(k - 1, i));
        observer.region("recv " + PassName("F", i, c), "p2p_wait", a, observer.mark());
        input.requires_grad_(true);
      }
      observer.doing("running the forward pass", false, i, -1);
      const int a = observer.mark();
      Tensor out = stage_.Forward(input, last ? batch.targets : Tensor(), c);
      observer.region(PassName("F", i, c), "forward", a, observer.mark());
      if (last) {
        losses.push_back(out.detach());
      } else {
        observer.doing("sending activations", false, i, with_next_.front().peer);
        Send(with_next_, out.detach(), activation_tag(k, i));
      }
      inputs[c][i] = input;
      outputs[c][i] = out;
    } else {
      Tensor grad;
      if (!last) {
        observer.doing("receiving gradients", true, i, with_next_.front().peer);
        const int a = observer.mark();
        grad = torch::empty({b_, seq_, hidden_}, activation_options);
        Receive(with_next_, grad, gradient_tag(k, i));
        observer.region("recv " + PassName("B", i, c), "p2p_wait", a, observer.mark());
      }
      // Overlap of the DP gradient sync with the last backward (ZeRO-2/3: with every backward):
      // with several chunks their last backwards interleave with earlier microbatches' (the sync
      // then follows them all; ZeRO-2/3 reduce each pass's gradients after it).
      if ((i == m_ - 1 || sync_.ReducesEveryMicrobatch()) && v_ == 1) sync_.Arm();
      observer.doing("running the backward pass", false, i, -1);
      const int a = observer.mark();
      if (last) {
        torch::autograd::backward({outputs[c][i] / static_cast<double>(m_)});
      } else {
        torch::autograd::backward({outputs[c][i]}, {grad});
      }
      if (gatherer_) gatherer_->ReleaseAll();
      sync_.EndBackward();
      observer.region(PassName("B", i, c), "backward", a, observer.mark());
      if (!first) {
        observer.doing("sending gradients", false, i, with_prev_.front().peer);
        Send(with_prev_, inputs[c][i].grad(), gradient_tag(k - 1, i));
      }
      inputs[c][i] = Tensor();
      outputs[c][i] = Tensor();
    }
  }
  observer.doing("completing sends", true, -1, -1);
  const int a = observer.mark();
  for (auto& work : sends_) work->Wait();
  observer.region("complete sends", "p2p_wait", a, observer.mark());
  sends_.clear();
  send_buffers_.clear();
  return losses;
}

}  // namespace stratos
