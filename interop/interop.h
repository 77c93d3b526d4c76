#pragma once
// Plans out of stratos and configurations into it: export of a plan to what the users of
// Megatron-LM, DeepSpeed, torchtitan and torch.distributed.pipelining launch with, and import of
// their configurations into a plan (README "Plans out and in"; the targets' syntax is shown in
// ../shared/formats/).
//
// Every target runs one parallel configuration in all pipeline ranks, so a plan travels as a
// ParallelLayout: Megatron-style degrees (TP innermost, then DP, then PP), the micro and global
// batch, ZeRO, recomputation, and the transformer blocks of each virtual stage in model order
// (the embedding with the first, the head with the last). What a target cannot express is
// refused with an InputError naming the plan, the stage, the value and the target's rule.
#include <string>
#include <vector>

#include "costmodel/plan.h"
#include "costmodel/problem.h"

namespace stratos {

enum class Target { kMegatron, kDeepSpeed, kTorchtitan, kTorchPipelining };

// "megatron" | "deepspeed" | "torchtitan" | "torch-pipelining"
const char* TargetName(Target target);
std::vector<std::string> TargetNames();
// Throws InputError naming `where` and the allowed names for anything else.
Target ParseTarget(const std::string& text, const std::string& where);

// The plan as every target describes it. Degrees multiply to the world size.
struct ParallelLayout {
  int tensor_parallel = 1;
  int pipeline_parallel = 1;  // pipeline ranks p
  int data_parallel = 1;
  int virtual_stages = 1;     // model chunks per rank v (interleaved 1F1B when > 1)
  int micro_batch_size = 1;   // sequences per DP replica per microbatch
  int global_batch_size = 1;  // sequences per optimizer step
  int zero_stage = 0;
  Recompute recompute = Recompute::kNone;
  Schedule schedule = Schedule::kOneFOneB;
  bool sequence_parallel = false;  // Megatron sequence parallelism (only with TP > 1)
  bool bf16 = true;
  // torchrun's world: nodes x gpus_per_node processes = TP x PP x DP.
  int nodes = 1;
  int gpus_per_node = 1;
  // Transformer blocks of each of the p v virtual stages, in model order (virtual stage i on
  // rank i % p); the first also holds the embedding, the last the final norm and head.
  std::vector<int> blocks;
  // For a plan over several node groups of a heterogeneous cluster: which pipeline ranks run on
  // which group, for the launch files' header (the nodes must start in that order); else "".
  std::string placement_note;

  long long WorldSize() const {
    return static_cast<long long>(tensor_parallel) * pipeline_parallel * data_parallel;
  }
  // Microbatches per DP replica per step: global / (micro x DP).
  int NumMicrobatches() const { return global_batch_size / (micro_batch_size * data_parallel); }
  // Whether `blocks` is Megatron's default placement: L / (p v) blocks in every virtual stage.
  bool EvenBlocks() const;
};

// The training as `target` runs a plan, from the one stratos priced it with (`training`; its
// default prices 2-byte gradients, the ZeRO paper's 2 + 2 + 12 bytes per parameter with Adam).
// Megatron-LM with bf16 parameters accumulates and all-reduces the gradients in fp32: --bf16 sets
// accumulate_allreduce_grads_in_fp32 unless --grad-reduce-in-bf16 is given
// (megatron/training/arguments.py; the gradient buffer is then fp32, param_and_grad_buffer.py),
// so its grad_dtype_bytes is 4: 2 + 4 + 12 = 18 bytes per parameter unsharded, and twice the
// bytes in the DP gradient reduction. The other targets keep `training`: DeepSpeed's ZeRO holds
// the gradients in the parameters' dtype; torchtitan's FSDP2 (fp32 sharded parameters and
// gradients, Adam's 8) and DDP also total 16 bytes per parameter (its fp32 reduce-scatter moves
// twice the bytes priced). Unchanged where the parameters are not 2-byte. ZeRO-3's gathers
// (TrainingSpec::zero3_gather): DeepSpeed's a parameter tensor at a time, torchtitan's FSDP2 a
// block at a time (one all-gather per wrapped transformer block), prefetched under the block
// before it.
TrainingSpec TrainingForTarget(Target target, const TrainingSpec& training);
// What TrainingForTarget changes, as one line for the user ("" when nothing).
std::string TargetTrainingChange(Target target, const TrainingSpec& training);

// The plan as `target` runs it. Requires a transformer model (gpt or llama family; torchtitan:
// llama only) and a plan valid for `problem`. Throws InputError "<where>: stages[s].<key> =
// <value>: <target> <rule>" for what the target cannot express: different DP, TP, ZeRO,
// recomputation or mesh between stages, gradient compression, GPipe where the target has only
// 1F1B, ZeRO stages the target lacks, virtual stages where it has no interleaved schedule,
// uneven stages where it partitions evenly, devices that are not whole nodes, node groups whose
// nodes differ in GPUs. A plan over several node groups gets a placement_note.
ParallelLayout LayoutForTarget(const Problem& problem, const Plan& plan, Target target,
                               const std::string& where);

// The plan `layout` describes, on `problem`'s cluster: each rank's mesh holds DP x TP devices
// (within a node, or whole nodes), stage i holds blocks[i] blocks after those before it.
// Throws InputError naming `where` if the layout does not fit the model (block counts that do
// not sum to its layers), the batch or the cluster (ValidatePlan's rules).
Plan PlanFromLayout(const Problem& problem, const ParallelLayout& layout, const std::string& where);

struct ExportFile {
  std::string name;  // file name inside the output directory
  std::string text;
  bool executable = false;
};

// The files `target`'s user launches with (LayoutForTarget's refusals apply):
//   megatron:          megatron_args.sh (torchrun + pretrain_gpt.py flags)
//   deepspeed:         ds_config.json, hostfile, deepspeed_launch.sh (Megatron-DeepSpeed flags
//                      where the plan has TP or PP)
//   torchtitan:        torchtitan_job.toml
//   torch-pipelining:  pipeline_schedule.csv (a row per PP rank, actions "<stage>F<mb>",
//                      "<stage>B<mb>") and stage_to_rank.json
std::vector<ExportFile> ExportPlan(const Problem& problem, const Plan& plan, Target target,
                                   const std::string& where);

// The plan closest to `plan` that `target` runs: the cuts kept (made even where the target
// partitions evenly, chunks merged where it has no interleaving), one configuration for every
// rank (of the stages' configurations once adapted, one that fits memory if any does, then the
// lowest predicted iteration time), 1F1B for GPipe where the target lacks it, the nearest ZeRO stage it has, no
// gradient compression. `changes` lists what was changed, one line each. Throws InputError if
// no such plan exists (e.g. a model the target does not know).
struct NearestPlan {
  Plan plan;
  std::vector<std::string> changes;
};
NearestPlan NearestPlanForTarget(const Problem& problem, const Plan& plan, Target target,
                                 const std::string& where);

// A configuration read back (import): the layout, and the model shape where the configuration
// carries one (Megatron flags, a torchtitan flavor); model.family is empty otherwise.
struct ImportedConfig {
  ParallelLayout layout;
  ModelSpec model;           // transformer shape fields only; BuildTransformerLayers not called
  bool world_known = false;  // whether nodes x gpus_per_node came from the configuration
  // Training options the configuration sets (0 / false where it does not): the DP gradient
  // bucket in parameters (TrainingSpec::dp_bucket_bytes over the gradients' bytes; Megatron's
  // --overlap-grad-reduce with --ddp-bucket-size, else Megatron-Core's default
  // max(40M, 1M x DP); DeepSpeed's ZeRO-1/2/3 with zero_optimization.overlap_comm, ZeRO-3's
  // default, and reduce_bucket_size, default 5e8), and whether the distributed optimizer's
  // parameter all-gather runs under the next forward pass (Megatron's --overlap-param-gather:
  // TrainingSpec::dp_overlap_fraction 1).
  double dp_bucket_params = 0;
  bool overlap_param_gather = false;
};

// Reads a configuration of `target` (not torch-pipelining): Megatron-LM arguments (a launch
// script or an argument list, with torchrun's --nnodes / --nproc_per_node when present),
// DeepSpeed (the engine JSON, or the launch script naming it with --deepspeed_config, whose
// Megatron-DeepSpeed flags give TP and PP), a torchtitan job TOML. `world_size` (> 0) stands in
// for the world size where the configuration does not give it. Throws InputError naming the
// file, the flag or key, the value and the rule (unknown values, what stratos plans cannot hold:
// context or expert parallelism, HSDP, inconsistent batch sizes).
ImportedConfig ImportConfig(Target target, const std::string& path, int world_size);

}  // namespace stratos
