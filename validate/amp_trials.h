#pragma once
// `stratos validate amp`: does the cost model rank AMP's 52 GPT-2 strategies on 4 x 4 T4 (Li et
// al., "AMP: Automatically Finding Model Parallel Strategies with Heterogeneity Awareness",
// NeurIPS'22) the way their measured iteration times do, and as well as AMP's own cost model?
#include <optional>
#include <string>
#include <vector>

#include "costmodel/plan.h"
#include "costmodel/problem.h"
#include "validate/reference_tables.h"
#include "validate/report.h"

namespace stratos {

// The zoo's T4 cluster as shipped for AMP's runs, and its datasheet base.
inline constexpr const char* kAmpCluster = "g4dn.12xlarge";
inline constexpr const char* kAmpBaseCluster = "g4dn.12xlarge-datasheet";
// PCIe Gen3 peer-to-peer all-reduce bus bandwidth, bytes/s: half of PCIe Gen4's 24 GB/s
// (../shared/data/reference/nccl_collective_bandwidth.csv, NVIDIA GTC24 S62129 slide 12), Gen3
// having half Gen4's link rate. The report's variant of the intra-node link.
inline constexpr double kAmpPeerToPeerBytesPerSecond = 12e9;

struct AmpAssumptions {
  // Zoo cluster, 4 nodes. Its T4 constants are used as the file gives them unless fit_profile.
  std::string cluster = kAmpCluster;
  // true: fit the T4 constants below (efficiency, block curve, intra-node latency) on AMP's
  // profile and take the framework memory from framework_memory_cluster, on top of `cluster`
  // (then a base such as kAmpBaseCluster): what `stratos calibrate --amp-profile` writes into
  // kAmpCluster, and how the report's variants are priced.
  bool fit_profile = false;
  // true: PCIe Gen3 peer to peer inside a node (kAmpPeerToPeerBytesPerSecond), the upper bound
  // of the link; false keeps the zoo file's level (AMP's 50 Gb/s, collectives through host
  // memory).
  bool pcie_peer_to_peer = false;
  // T4 matmul efficiency: > 0 uses this value; otherwise with fit_profile it is derived from
  // AMP's profile as below, without it the cluster file's.
  double matmul_efficiency = -1;
  // With fit_profile and matmul_efficiency < 0: true takes the efficiency from AMP's profiled LM head (one large
  // GEMM and the loss: AmpProfiledHeadMatmulEfficiency) and the block's slowness beyond its
  // GEMMs from its profiled block, as a block-curve scale (AmpProfiledBlockCurve); false prices
  // every GEMM at the one efficiency that matches the profiled block (AmpProfiledMatmulEfficiency).
  bool head_and_block_profile = true;
  // Intra-node latency per ring step, seconds: >= 0 uses this value; otherwise with fit_profile
  // it is fitted to AMP's profiled tensor-parallel block times (AmpProfiledIntraNodeLatency),
  // without it the cluster file's.
  double intra_node_latency_seconds = -1;
  // With fit_profile: the framework's memory (what a PyTorch process holds outside its caching
  // allocator, and the allocator's overhead over the tensors' peak: cluster.h
  // reserved_memory_bytes, memory_fragmentation) taken from this zoo cluster's device, where
  // they were measured; "": none (every byte of the T4 for tensors).
  std::string framework_memory_cluster = "h200-node";
};

// The T4 constants fitted on AMP's profile (AmpProblem with fit_profile, no framework memory)
// on `base_cluster` (one node): the device's matmul efficiency and block curve and the
// intra-node level's latency set. What `stratos calibrate --amp-profile` writes.
ClusterSpec AmpCalibratedCluster(const std::string& base_cluster = kAmpBaseCluster);

// "" when `cluster`'s T4 constants (matmul efficiency, block curve, intra-node latency) are
// those of AmpCalibratedCluster(base_cluster) up to a relative 1e-9, else what differs.
std::string AmpCalibrationDifference(const ClusterSpec& cluster,
                                     const std::string& base_cluster = kAmpBaseCluster);

// Maps a boundary of AMP's GPT-2 layer list to ours. AMP lists 30 entries for 24 blocks
// (DachengLi1/AMP src/cost_homo.py, get_cost_e): [embed2h, noop, 24 x transformer_layer, noop,
// noop, embed2v, noop]; ours are [embedding, block 0..23, head]. A stage starting at AMP entry
// b starts at our layer 0 for b = 0, 1 + (b - 2) for a block entry (b in 2..25), the head for
// b in 26..29, and "past the end" (26) for b = 30. Entry 1 (the no-op after the embedding)
// maps to layer 1: a stage of AMP entry 1 alone becomes empty. Throws InputError for b outside
// [0, 30].
int AmpBoundaryToLayer(int amp_boundary);

// The GPT-2 problem of AMP's homogeneous experiment (h 1024, s 1024, 24 layers, 16 heads,
// vocabulary 52256, global batch 32, fp16 with DeepSpeed's FP16 optimizer, fp32 gradient
// all-reduce, the block's elementwise kernels unfused as the example's script runs them:
// TrainingSpec::fused_elementwise_kernels = false) on 4 nodes of `how.cluster`.
Problem AmpProblem(const AmpAssumptions& how);

// The T4 matmul efficiency at which our forward time of one GPT-2 block at micro-batch 1
// (GEMM FLOPs at efficiency x peak + the roofline memory term) equals AMP's profiled 5.470 ms,
// the mean over the 24 transformer_layer entries of DachengLi1/AMP src/known_cost/gpt2_G4_1.npy
// (1 GPU, model parallel 1, micro-batch 1; the profile AMP's own cost model uses).
double AmpProfiledMatmulEfficiency(const Problem& problem);

// The T4 matmul efficiency at which our forward of the LM head at micro-batch 1 (the logits GEMM
// at efficiency x peak + the roofline memory term of the logits and the loss) equals AMP's
// profiled 4.650 ms: the four entries after the blocks of gpt2_G4_1.npy ([noop, noop, embed2v,
// noop], the entries AmpBoundaryToLayer maps to our head).
double AmpProfiledHeadMatmulEfficiency(const Problem& problem);

// The block curve (power 1, no floors, forward and backward scale equal) at which our forward of
// one GPT-2 block at micro-batch 1 on `problem`'s device equals AMP's profiled 5.470 ms: what the
// block's attention, softmax and elementwise kernels cost beyond its GEMMs at the head's
// efficiency. Backward is scaled as forward (AMP profiles forward passes only).
LayerCurve AmpProfiledBlockCurve(const Problem& problem);

// The intra-node latency per ring step (alpha) at which our forward of one GPT-2 block at
// micro-batch 1 with tensor parallelism 2 and 4 (compute + 2 TP all-reduces) best matches, in
// least squares, AMP's profiled 5.962 ms and 5.577 ms (means over the block entries of
// src/known_cost/gpt2_G4_2.npy and gpt2_G4_4.npy, which include the all-reduces); the
// bandwidth of the level is kept. >= 0.
double AmpProfiledIntraNodeLatency(const Problem& problem);

// AMP's runner (DachengLi1/AMP @72eeea4) records a trial's time only if the run reaches its
// 41st iteration: the vendored megatron/training.py runs `while iteration < 41` and writes the
// mean of iterations 20-39, and the vendored DeepSpeed launcher (deepspeed/launcher/launch.py,
// `time_out = 200`) terminates every process of a run after 200 s. A run that crashes (out of
// memory) or is still running then records no time: the trial's `inf`.
inline constexpr int kAmpRunIterations = 41;
inline constexpr double kAmpLauncherTimeoutSeconds = 200;

// Seconds a run of AMP's runner spends in its iterations at `iteration_seconds` each
// (kAmpRunIterations of them): a lower bound on the launcher's clock, which also counts the
// processes' start-up (not known; excluded). Throws InputError if iteration_seconds < 0.
double AmpRunSeconds(double iteration_seconds);

// Whether AMP's runner records a time for a plan: it fits in memory and its iterations end
// within the launcher's kAmpLauncherTimeoutSeconds (AmpRunSeconds).
bool AmpRunRecordsTime(bool fits_memory, double iteration_seconds);

// The plan of one trial, or nullopt with the reason in `why` if our layer list cannot express
// it (a stage of AMP no-op entries only).
std::optional<Plan> AmpTrialPlan(const Problem& problem, const AmpTrialRow& trial,
                                 std::string* why);

ValidationReport ValidateAmpTrials(const std::string& reference_path,
                                   const AmpAssumptions& how = {});

}  // namespace stratos
