#include "runtime/profiler.h"

#include <fmt/format.h>

#include <algorithm>
#include <chrono>

#include "costmodel/error.h"
#include "costmodel/model.h"
#include "runtime/device.h"
#include "runtime/gpt.h"

namespace stratos {

namespace {

using Clock = std::chrono::steady_clock;

bool IsCuda(const ProfileOptions& options) { return options.device == "cuda"; }

void Synchronize(const ProfileOptions& options) {
  // A host-side read of a device value waits for the queued work (the C++ API of this LibTorch
  // has no public device-synchronize call).
  if (IsCuda(options)) torch::zeros({1}, torch::Device(torch::kCUDA)).cpu();
}

// Median wall seconds of options.repeats runs of `run` after one untimed warm-up run; `prepare`
// runs untimed before each (e.g. a barrier).
template <typename Run, typename Prepare>
double MedianSeconds(const ProfileOptions& options, Run run, Prepare prepare) {
  prepare();
  run();
  Synchronize(options);
  std::vector<double> seconds;
  for (int i = 0; i < options.repeats; ++i) {
    prepare();
    const auto start = Clock::now();
    run();
    Synchronize(options);
    seconds.push_back(std::chrono::duration<double>(Clock::now() - start).count());
  }
  std::nth_element(seconds.begin(), seconds.begin() + seconds.size() / 2, seconds.end());
  return seconds[seconds.size() / 2];
}

template <typename Run>
double MedianSeconds(const ProfileOptions& options, Run run) {
  return MedianSeconds(options, run, [] {});
}

torch::ScalarType ScalarTypeOf(const std::string& dtype) {
  if (dtype == "f32") return torch::kFloat32;
  if (dtype == "bf16") return torch::kBFloat16;
  return torch::kFloat16;
}

// A TP group that is only a shape: Size() ranks for sharding a block, Rank() 0, collectives that
// do nothing (all-gather replicates this rank's input). Profiles one TP rank's compute alone.
class ShardShapeCommunicator : public Communicator {
 public:
  explicit ShardShapeCommunicator(int size) : size_(size), name_(fmt::format("tp shape {}", size)) {}
  int Rank() const override { return 0; }
  int Size() const override { return size_; }
  const std::string& Name() const override { return name_; }
  std::shared_ptr<CommWork> AllReduceSumAsync(torch::Tensor) override {
    return std::make_shared<DoneWork>();
  }
  std::shared_ptr<CommWork> AllGatherAsync(std::vector<torch::Tensor> outputs,
                                           torch::Tensor input) override {
    for (torch::Tensor& output : outputs) output.copy_(input);
    return std::make_shared<DoneWork>();
  }
  std::shared_ptr<CommWork> ReduceScatterAsync(torch::Tensor, torch::Tensor, std::vector<int64_t>) override {
    throw CommError(name_ + ": no reduce-scatter in a profile");
  }
  std::shared_ptr<CommWork> AllGatherUnevenAsync(torch::Tensor, torch::Tensor,
                                                 std::vector<int64_t>) override {
    throw CommError(name_ + ": no uneven all-gather in a profile");
  }
  std::shared_ptr<CommWork> SendAsync(torch::Tensor, int, int) override {
    throw CommError(name_ + ": no point-to-point in a profile");
  }
  std::shared_ptr<CommWork> RecvAsync(torch::Tensor, int, int) override {
    throw CommError(name_ + ": no point-to-point in a profile");
  }
  void Barrier() override {}

 private:
  class DoneWork : public CommWork {
   public:
    void Wait() override {}
  };
  int size_;
  std::string name_;
};

}  // namespace

void ProfileOptions::Validate() const {
  const std::string where = "profile options";
  if (device != "cpu" && device != "cuda")
    ThrowInputError(where, "device", device, "must be cpu or cuda");
  if (dtype != "f32" && dtype != "bf16" && dtype != "f16")
    ThrowInputError(where, "dtype", dtype, "must be f32, bf16 or f16");
  if (device == "cpu" && dtype != "f32")
    ThrowInputError(where, "dtype", dtype, "the CPU profile is f32 only");
  if (device == "cuda" && !torch::cuda::is_available())
    ThrowInputError(where, "device", device, NoCudaRule());
  if (repeats < 1) ThrowInputError(where, "repeats", repeats, "must be >= 1");
  if (layer_stack < 1) ThrowInputError(where, "layer_stack", layer_stack, "must be >= 1");
  for (int head_dim : layer_head_dims)
    if (head_dim < 1) ThrowInputError(where, "layer_head_dims", head_dim, "every one must be >= 1");
  for (int64_t size : gemm_sizes)
    if (size < 1) ThrowInputError(where, "gemm_sizes", size, "every size must be >= 1");
  for (int64_t bytes : collective_bytes)
    if (bytes < 4 || bytes % 4 != 0)
      ThrowInputError(where, "collective_bytes", bytes, "must be a positive multiple of 4");
}

std::vector<MatmulRow> ProfileMatmuls(const ProfileOptions& options) {
  options.Validate();
  torch::NoGradGuard no_grad;
  const auto tensor_options =
      torch::TensorOptions().dtype(ScalarTypeOf(options.dtype)).device(options.device);
  std::vector<MatmulRow> rows;
  for (int64_t m : options.gemm_sizes)
    for (int64_t n : options.gemm_sizes)
      for (int64_t k : options.gemm_sizes) {
        const torch::Tensor a = torch::randn({m, k}, tensor_options);
        const torch::Tensor b = torch::randn({k, n}, tensor_options);
        torch::Tensor c = torch::empty({m, n}, tensor_options);
        MatmulRow row;
        row.m = m;
        row.n = n;
        row.k = k;
        row.dtype = options.dtype;
        row.flops = 2.0 * m * n * k;
        row.seconds = MedianSeconds(options, [&] { torch::mm_out(c, a, b); });
        rows.push_back(row);
      }
  return rows;
}

std::vector<LayerRow> ProfileLayers(const ProfileOptions& options) {
  options.Validate();
  if (options.dtype == "f16")
    ThrowInputError("profile options", "dtype", options.dtype,
                    "the block profile runs the runtime's GPT (runtime/gpt.h): f32, or bf16 "
                    "autocast on CUDA");
  const torch::Device device = options.device == "cuda" ? RankDevice("cuda", 0) : torch::kCPU;
  const bool bf16 = options.dtype == "bf16";
  std::vector<LayerRow> rows;
  for (int hidden : options.layer_hiddens)
   for (size_t d = 0; d < options.layer_head_dims.size(); ++d)
    for (int seq : options.layer_seq_lens)
      for (int micro_batch : options.layer_micro_batches)
        for (int tp : options.layer_tensor_parallel) {
          ModelSpec model;
          model.name = fmt::format("profile block h{} s{}", hidden, seq);
          model.family = "gpt";
          model.source = "runtime/profiler.cc";
          model.hidden_size = hidden;
          model.num_layers = 1;
          model.num_attention_heads = std::max(2, hidden / options.layer_head_dims[d]);
          bool repeated = false;  // two head dimensions giving the same head count
          for (size_t e = 0; e < d; ++e)
            repeated |= std::max(2, hidden / options.layer_head_dims[e]) == model.num_attention_heads;
          if (repeated) continue;
          model.vocab_size = 64;
          model.seq_length = seq;
          BuildTransformerLayers(model);
          if (model.num_attention_heads % tp != 0) continue;
          ShardShapeCommunicator shape(tp);
          GptStage block(model, 1, 2, Recompute::kNone, &shape, /*seed=*/1, device, bf16);
          const torch::Tensor input = torch::randn(
              {micro_batch, seq, hidden},
              torch::TensorOptions().device(device).dtype(block.ActivationDtype()));
          const torch::Tensor no_targets;
          LayerRow row;
          row.hidden = hidden;
          row.heads = model.num_attention_heads;
          row.seq_len = seq;
          row.micro_batch = micro_batch;
          row.tensor_parallel = tp;
          row.dtype = options.dtype;
          row.forward_flops = model.layers[1].forward_flops * micro_batch / tp;
          // As in training: the forward builds the autograd graph (saving activations), the
          // backward follows it, blocks follow each other without synchronization. Both medians
          // over the repeats after one warm-up run.
          const int stack = options.layer_stack;
          std::vector<double> forward, backward;
          DeviceTimer timer(device);
          for (int i = 0; i <= options.repeats; ++i) {
            const torch::Tensor x = input.clone().requires_grad_(true);
            Synchronize(options);
            timer.Clear();
            const int start = timer.Mark();
            torch::Tensor y = x;
            for (int k = 0; k < stack; ++k) y = block.Forward(y, no_targets);
            const int middle = timer.Mark();
            const torch::Tensor loss = y.sum();
            const int backward_start = timer.Mark();
            loss.backward();
            const int end = timer.Mark();
            timer.Synchronize();
            if (i > 0) {  // the first is a warm-up
              forward.push_back(timer.Seconds(start, middle) / stack);
              backward.push_back(timer.Seconds(backward_start, end) / stack);
            }
          }
          std::nth_element(forward.begin(), forward.begin() + forward.size() / 2, forward.end());
          row.forward_seconds = forward[forward.size() / 2];
          std::nth_element(backward.begin(), backward.begin() + backward.size() / 2,
                           backward.end());
          row.backward_seconds = backward[backward.size() / 2];
          rows.push_back(row);
        }
  return rows;
}

std::vector<CollectiveRow> ProfileCollectives(const ProfileOptions& options,
                                                 ProcessGroups& groups) {
  options.Validate();
  const int world = groups.WorldSize();
  const int rank = groups.Rank();
  const auto tensor_options = torch::TensorOptions().dtype(torch::kFloat32).device(options.device);
  std::vector<CollectiveRow> rows;
  for (int g = 2; g <= world; ++g) {
    if (world % g != 0) continue;
    std::vector<int> members;
    const int first = rank / g * g;
    for (int r = first; r < first + g; ++r) members.push_back(r);
    std::unique_ptr<Communicator> group =
        groups.NewGroup(fmt::format("profile g{} first{}", g, first), members);
    const int local = group->Rank();
    for (int64_t bytes : options.collective_bytes) {
      const int64_t elements = bytes / 4;
      torch::Tensor buffer = torch::ones({elements}, tensor_options);
      std::vector<torch::Tensor> gathered;
      for (int r = 0; r < g; ++r) gathered.push_back(torch::empty({elements}, tensor_options));
      auto time = [&](const std::string& op, auto run) {
        groups.World().Barrier();
        const double seconds = MedianSeconds(options, run, [&] { group->Barrier(); });
        CollectiveRow row;
        row.op = op;
        row.dtype = "f32";
        row.gpus_per_node = world;
        row.group_size = g;
        row.num_groups = world / g;
        row.bytes = static_cast<double>(op == "all_gather" ? bytes * g : bytes);
        row.seconds = seconds;
        if (rank == 0) rows.push_back(row);
      };
      time("all_reduce", [&] { group->AllReduceSum(buffer); });
      time("all_gather", [&] { group->AllGather(gathered, buffer); });
      // Pairs (0,1), (2,3), ... of the group exchange one message each way.
      time("send_recv", [&] {
        const int peer = local ^ 1;
        if (peer >= g) return;
        auto send = group->SendAsync(buffer, peer, 7);
        auto recv = group->RecvAsync(gathered[0], peer, 7);
        send->Wait();
        recv->Wait();
      });
    }
  }
  return rows;
}

}  // namespace stratos
