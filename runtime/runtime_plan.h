#pragma once
// What the runtime runs and how the cost model sees it: its models (the zoo's, gpt-tiny
// included), this machine's CPU workers as a cluster description, the runtime's training as a
// TrainingSpec, the checks that refuse a plan before anything is launched, and Megatron-style
// uniform plans. Split from runtime/trainer.h (which includes it).
#include <torch/torch.h>

#include <cstdint>
#include <string>

#include "costmodel/cluster.h"
#include "costmodel/model.h"
#include "costmodel/plan.h"
#include "costmodel/problem.h"

namespace stratos {

// A zoo model (gpt-tiny included) or a model file, with seq_length > 0 overriding; throws
// InputError for an unknown name or a bad file.
ModelSpec LoadRuntimeModel(const std::string& name_or_path, int seq_length);

// This machine's CPU workers as a cluster description: one node of `num_workers` devices of
// `flops_per_worker` FLOP/s (measured), memory split evenly, and an assumed loopback network
// (1 GB/s, 30 us per step) that the predicted-vs-measured report calibrates.
ClusterSpec LocalCpuCluster(int num_workers, double flops_per_worker);
// How many times slower each of `num_workers` CPU worker processes computes than one alone (one
// intra-op thread each): num_workers / this machine's hardware threads, at least 1. Throws
// InputError if num_workers < 1.
double LocalWorkerSlowdown(int num_workers);
// FLOP/s of an n x n x n matmul on `device` in `dtype` (a short benchmark; on the CPU, one
// thread's with the default).
double MeasureMatmulFlops(int n = 256, torch::Device device = torch::Device(torch::kCPU),
                          torch::ScalarType dtype = torch::kFloat32);

// How the runtime's gradient synchronizer runs (TrainOptions::bucket_bytes and
// overlap_grad_sync; data_parallel.h GradientSynchronizer).
struct RuntimeGradSync {
  int64_t bucket_bytes = 1 << 20;  // fp32 gradient bytes per bucket, >= 1
  bool overlap = true;             // buckets launched from the last backward pass's hooks
};

// The runtime's training as the cost model prices it: fp32 weights and gradients, Adam moments
// 8 bytes/param, buffers 4 bytes/param (the gradient synchronizer's flat gradient; 6 with dtype
// "bf16": autocast's bf16 weight copies), activations 4 bytes (2 with "bf16"). The DP gradient
// reduction (all-reduce; ZeRO-1/2/3: reduce-scatter) as the synchronizer runs it: with
// `sync.overlap` bucket by bucket under the last microbatch's backward pass
// (TrainingSpec::dp_bucket_bytes = sync.bucket_bytes), else all of it after that pass; ZeRO-1/2's
// all-gather of the updated parameters after the optimizer step is never hidden
// (dp_overlap_fraction 0). ZeRO-2/3 reduce-scatter every microbatch's gradients
// (zero_reduce_every_microbatch; the m - 1 before the last priced exposed, though the
// synchronizer launches them bucket by bucket during each backward pass too), ZeRO-0/1 once per
// iteration.
TrainingSpec RuntimeTraining(int global_batch_size, Schedule schedule,
                             const std::string& dtype = "f32", const RuntimeGradSync& sync = {});

// The problem a runtime plan is checked against and predicted on: the model, the cluster
// description `cluster` (zoo name or file; "": LocalCpuCluster(num_workers, flops_per_worker),
// split into one node group of the workers per node group the plan's stages name, so that a
// plan searched on a heterogeneous cluster runs with its groups on worker subsets) and
// RuntimeTraining at the plan's batch and schedule and with `sync` (not overlapped for a plan with
// virtual stages, whose runs reduce after the last backward pass); with `flash_attention` (the
// run's attention kept no scores: RuntimeFlashAttention) the model's blocks store no attention
// scores (UseFlashAttention). Throws InputError for an unreadable cluster.
Problem RuntimeProblem(const ModelSpec& model, const Plan& plan, int num_workers,
                       double flops_per_worker = 1e10, const std::string& cluster = "",
                       const std::string& dtype = "f32", bool flash_attention = false,
                       const RuntimeGradSync& sync = {});

// Whether this build's runtime computes attention without storing its scores: LibTorch >= 2.0
// runs at::scaled_dot_product_attention (gpt.cc; FlashAttention or the memory-efficient kernel
// on CUDA, a fused kernel on the CPU); older ones materialize the softmax.
bool RuntimeFlashAttention();

// Refuses, before any process is launched, a plan this runtime cannot execute: ValidatePlan
// against RuntimeProblem (on `cluster`), plus the world size equal to the plan's devices, TP
// dividing heads, ffn and vocabulary, the vocabulary holding the data's characters, and a
// microbatch of at least one sample per replica.
// Throws InputError naming `where` (the plan file) and the field.
void CheckRuntimePlan(const ModelSpec& model, const Plan& plan, int world_size,
                      const std::string& where, int data_vocab_size = 0,
                      const std::string& cluster = "");

// A Megatron-style uniform plan: pp stages placed as Megatron-LM does (MegatronStageLayers),
// each dp x tp devices; with virtual_stages v > 1, pp x v virtual stages placed so (interleaved
// 1F1B, virtual stage k on pipeline rank k mod pp).
// Throws InputError if a degree is < 1, micro_batch * dp does not divide global_batch, or pp x v
// exceeds the model's transformer blocks.
Plan UniformRuntimePlan(const ModelSpec& model, int pipeline_parallel, int data_parallel,
                        int tensor_parallel, int micro_batch_size, int global_batch_size,
                        Schedule schedule, int zero_stage, Recompute recompute,
                        int virtual_stages = 1);

}  // namespace stratos
