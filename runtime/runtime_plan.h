#pragma once
// What the runtime runs and how the cost model sees it: its models (the zoo's, gpt-tiny
// included), this machine's CPU workers as a cluster description, the runtime's training as a
// TrainingSpec, the checks that refuse a plan before anything is launched, and Megatron-style
// uniform plans. Split from runtime/trainer.h (which includes it).
#include <torch/torch.h>

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

// The runtime's training as the cost model prices it: fp32 weights and gradients, Adam moments
// 8 bytes/param, buffers 4 bytes/param (the gradient synchronizer's flat gradient; 6 with dtype
// "bf16": autocast's bf16 weight copies), activations 4 bytes (2 with "bf16"), half the DP sync
// hidden behind backward (its bucketed overlap).
TrainingSpec RuntimeTraining(int global_batch_size, Schedule schedule,
                             const std::string& dtype = "f32");

// The problem a runtime plan is checked against and predicted on: the model, the cluster
// description `cluster` (zoo name or file; "": LocalCpuCluster(num_workers, flops_per_worker),
// split into one node group of the workers per node group the plan's stages name, so that a
// plan searched on a heterogeneous cluster runs with its groups on worker subsets) and
// RuntimeTraining at the plan's batch and schedule; with `flash_attention` (the run's attention
// kept no scores: RuntimeFlashAttention) the model's blocks store no attention scores
// (UseFlashAttention). Throws InputError for an unreadable cluster.
Problem RuntimeProblem(const ModelSpec& model, const Plan& plan, int num_workers,
                       double flops_per_worker = 1e10, const std::string& cluster = "",
                       const std::string& dtype = "f32", bool flash_attention = false);

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
