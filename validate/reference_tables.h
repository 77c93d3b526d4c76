#pragma once
// Readers of the published tables in ../shared/data/reference (relative to the source tree).
// Each reader checks the header by column name (extra columns are ignored, a missing one is an
// error), converts every cell it uses and throws InputError naming the file, the line, the
// column, the cell and the rule for anything malformed.
#include <string>
#include <vector>

namespace stratos {

// <source>/../shared/data/reference/<file>.
std::string ReferenceDataPath(const std::string& file);

// megatron_h100_weak_scaling_2024.csv: Megatron-Core on H100, one GPT model per row.
struct MegatronScalingRow {
  int line = 0;            // line in the file, for messages
  std::string model;       // e.g. "1.7B"
  int attention_heads = 0;
  int hidden_size = 0;
  int num_layers = 0;
  int tensor_parallel = 0;
  int pipeline_parallel = 0;
  int data_parallel = 0;
  int num_gpus = 0;
  int global_batch_size = 0;
  int seq_length = 0;
  int vocab_size = 0;
  double tflops_per_gpu = 0;  // published, model FLOPs
  double mfu_pct = 0;
};
std::vector<MegatronScalingRow> ReadMegatronScaling(const std::string& path);

// vtrain_a100_single_node.csv: vTrain's measured Megatron-DeepSpeed GPT runs on one A100 node.
struct VtrainRow {
  int line = 0;
  int num_gpus = 0;
  int global_batch_size = 0;
  int micro_batch = 0;
  int hidden_size = 0;
  int attention_heads = 0;
  int num_layers = 0;
  int seq_length = 0;
  int tensor_parallel = 0;
  int data_parallel = 0;
  int pipeline_parallel = 0;
  double iteration_ms = 0;
};
std::vector<VtrainRow> ReadVtrain(const std::string& path);

// amp_trials_homogeneous.csv: AMP's trials of GPT-2 on 4 x 4 T4.
struct AmpTrialRow {
  int line = 0;
  int trial = 0;
  int micro_batch = 0;
  int tensor_parallel = 0;
  int data_parallel = 0;
  int pipeline_parallel = 0;
  std::vector<int> layer_partition;  // boundaries into AMP's layer list, "[0,15,30]"
  double amp_predicted_cost = 0;     // AMP's cost model, seconds
  double measured_seconds = 0;       // iteration time; +inf where the trial failed ("inf")
};
std::vector<AmpTrialRow> ReadAmpTrials(const std::string& path);

// korthikanti_activation_memory_formulas.csv: activation bytes per layer per setting.
struct ActivationFormulaRow {
  int line = 0;
  std::string configuration;  // e.g. "tensor + sequence parallel"
  std::string formula;        // e.g. "s*b*h*(34/t + 5*a*s/(h*t))"
  double coefficient_gpt3_175b = 0;  // the file's sbh coefficient for a=96, s=2048, h=12288, t=8
};
std::vector<ActivationFormulaRow> ReadActivationFormulas(const std::string& path);

// korthikanti_table4_layer_times_22B.csv: forward/backward ms of one 22B layer.
struct LayerTimeRow {
  int line = 0;
  std::string experiment;  // e.g. "selective recompute + sequence parallelism"
  double forward_ms = 0;
  double backward_ms = 0;
  double combined_ms = 0;
  bool has_overhead = false;
  double overhead_pct = 0;  // vs the baseline, as published
};
std::vector<LayerTimeRow> ReadLayerTimes(const std::string& path);

// zero_memory.csv: per-GPU model-state GB of ZeRO stages.
struct ZeroMemoryRow {
  int line = 0;
  std::string stage;     // "baseline DP", "ZeRO-1 (P_os)", ...
  int zero_stage = 0;    // 0 for the baseline
  double psi = 0;        // parameters
  int nd = 0;            // data-parallel degree
  double k = 0;          // optimizer bytes per parameter
  std::string gb_text;   // as printed, e.g. "31.4" (its decimals give the rounding)
  double gb = 0;         // 1e9 bytes
  std::string value_status;  // "published (paper Figure 1)" or "derived by us ..."
};
std::vector<ZeroMemoryRow> ReadZeroMemory(const std::string& path);

// alpa_measured_points.csv: Alpa's measured GPT iterations.
struct AlpaPointRow {
  int line = 0;
  std::string model;
  int seq_length = 0;
  int hidden_size = 0;
  int num_layers = 0;
  int num_heads = 0;
  int vocab_size = 0;
  int global_batch_size = 0;
  int num_microbatches = 0;
  int data_parallel = 0;
  int tensor_parallel = 0;
  int pipeline_parallel = 0;
  int num_gpus = 0;
  bool remat = false;
  double iteration_seconds = 0;
  bool has_model_tflops = false;
  double tflops_per_gpu_model = 0;
  double tflops_per_gpu_with_recompute = 0;
  double peak_memory_gb = 0;  // per GPU, 1e9 bytes
};
std::vector<AlpaPointRow> ReadAlpaPoints(const std::string& path);

// nccl_allreduce_sweeps.csv: one all-reduce per row, a sweep of message sizes per config.
struct NcclSweepRow {
  int line = 0;
  std::string config;     // e.g. "4 nodes x 8 B200 (AWS P6-B200, EFA v4)"
  int nodes = 0;          // from the config's leading "N node(s) x G <GPU>"
  int gpus_per_node = 0;
  std::string gpu;        // "<GPU>": sweeps of the same GPU share the intra-node hardware
  double size_bytes = 0;  // the buffer each rank all-reduces
  // Per call: time_us where the row has it, else from the bus bandwidth as nccl-tests defines
  // it (doc/PERFORMANCE.md): busbw = size / time * 2 (n - 1) / n over n = nodes x gpus_per_node.
  double seconds = 0;
  bool seconds_from_busbw = false;
};
std::vector<NcclSweepRow> ReadNcclSweeps(const std::string& path);

}  // namespace stratos
