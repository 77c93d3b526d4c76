#pragma once
// One optimizer step's pipeline passes on one rank: the forward and backward passes of the
// rank's schedule (GPipe, 1F1B or interleaved 1F1B; costmodel/schedule.h RankSchedule) over its
// microbatches, with the activations and their gradients exchanged at the stage boundaries by
// scatter/gather (runtime/pipeline_layout.h). Split from runtime/trainer.cc, which runs the
// gradient sync, the optimizer step and the checkpoints around it.
#include <torch/torch.h>

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "costmodel/model.h"
#include "costmodel/plan.h"
#include "costmodel/schedule.h"
#include "runtime/communicator.h"
#include "runtime/data.h"
#include "runtime/data_parallel.h"
#include "runtime/gpt.h"
#include "runtime/pipeline_layout.h"

namespace stratos {

// What a step reports as it goes (the trainer's heartbeat and device timer).
struct StepObserver {
  // The rank starts `what` on `microbatch` with `peer` (-1: none); `waiting`: on another rank.
  std::function<void(const char* what, bool waiting, int microbatch, int peer)> doing;
  // A mark on the device's timeline (DeviceTimer::Mark).
  std::function<int()> mark;
  // A timed region between two marks: its trace name ("F3", "recv B2c1", "complete sends") and
  // category ("forward", "backward", "p2p_wait").
  std::function<void(std::string name, const char* category, int from, int to)> region;
};

class PipelineStep {
 public:
  // The passes of `layout`'s rank of `plan` on `stage`, reading batches of `data` drawn with
  // `seed`, exchanging over `world` (point-to-point) and `tp` (the all-gathers after receives),
  // arming `sync` before the last microbatch's backward (before every backward where it
  // reduces every microbatch's gradients; without virtual stages) and ending each backward with
  // sync.EndBackward(). Everything
  // referenced must outlive the object.
  PipelineStep(const Plan& plan, const PipelineLayout& layout, const ModelSpec& model,
               const CharDataset& data, uint64_t seed, GptStage& stage, Communicator& world,
               Communicator& tp, GradientSynchronizer& sync, torch::Device device);
  // ZeRO-3: the gatherer whose layer parameters are released after each backward (nullptr:
  // none).
  void SetGatherer(ParameterGatherer* gatherer) { gatherer_ = gatherer; }
  // Runs step `step`'s passes and waits for every send it posted. Returns the losses of the
  // microbatches this rank ends (the last stage's: one per microbatch and chunk holding the
  // head, on the device, the mean token cross entropy of the replica's share); none elsewhere.
  // Throws what the communicators throw (CommError on a peer's failure or a timeout).
  std::vector<torch::Tensor> Run(int step, const StepObserver& observer);

 private:
  // Receives this rank's part of `into` (b, S, H) and all-gathers the parts over TP.
  void Receive(const std::vector<Piece>& pieces, torch::Tensor& into, int tag);
  // Posts the sends of this rank's part of `from` (b, S, H), keeping their buffers alive.
  void Send(const std::vector<Piece>& pieces, const torch::Tensor& from, int tag);
  // "F3" (one chunk per rank), "F3c1" (microbatch 3 of chunk 1).
  std::string PassName(const char* kind, int microbatch, int chunk) const;

  const PipelineLayout& layout_;
  const CharDataset& data_;
  const uint64_t seed_;
  GptStage& stage_;
  Communicator& world_;
  Communicator& tp_;
  GradientSynchronizer& sync_;
  ParameterGatherer* gatherer_ = nullptr;
  const torch::Device device_;
  const int v_, num_virtual_, m_, global_batch_, b_;  // b_: samples per replica per microbatch
  const int64_t seq_, hidden_;
  std::vector<StageAction> schedule_;
  std::vector<Piece> with_prev_, with_next_;  // the exchanges with the neighbouring ranks
  std::vector<int64_t> tp_parts_;             // ScatterGatherCounts of a replica's share
  int64_t my_part_ = 0;                       // where this TP rank's part starts in it
  std::vector<std::shared_ptr<CommWork>> sends_;
  std::vector<torch::Tensor> send_buffers_;
};

}  // namespace stratos
