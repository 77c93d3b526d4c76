#include "cosearch/cosearcher.h"

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include <cmath>
#include <cstdio>
#include <exception>
#include <filesystem>
#include <fstream>
#include <functional>
#include <thread>

#include "costmodel/error.h"
#include "runtime/communicator.h"
#include "runtime/compression.h"
#include "runtime/data.h"
#include "runtime/gpt.h"
#include "runtime/launcher.h"
#include "runtime/trainer.h"

namespace stratos {

using torch::Tensor;

void CoSearchOptions::Validate() const {
  const std::string where = "co-search options";
  if (batch_size < 1) ThrowInputError(where, "batch_size", batch_size, "must be >= 1");
  if (dp_replicas < 1 || dp_replicas > 8)
    ThrowInputError(where, "dp_replicas", dp_replicas, "must be in [1, 8]");
  if (batch_size % dp_replicas != 0)
    ThrowInputError(where, "batch_size", batch_size,
                    fmt::format("must be divisible by dp_replicas = {}", dp_replicas));
  if (!(learning_rate > 0)) ThrowInputError(where, "learning_rate", learning_rate, "must be > 0");
  if (search_steps < 1) ThrowInputError(where, "search_steps", search_steps, "must be >= 1");
  if (warmup_steps < 1 || warmup_steps >= search_steps)
    ThrowInputError(where, "warmup_steps", warmup_steps,
                    fmt::format("must be in [1, search_steps = {})", search_steps));
  if (!(alpha_learning_rate > 0))
    ThrowInputError(where, "alpha_learning_rate", alpha_learning_rate, "must be > 0");
  if (!(initial_temperature > 0) || !(final_temperature > 0) ||
      final_temperature > initial_temperature)
    ThrowInputError(where, "final_temperature", final_temperature,
                    fmt::format("temperatures must be > 0 with final <= initial = {}",
                                initial_temperature));
  if (validation_windows < 1 || validation_batch < 1 || validation_batch > validation_windows)
    ThrowInputError(where, "validation_batch", validation_batch,
                    fmt::format("must be in [1, validation_windows = {}]", validation_windows));
  if (smoothmax_tau < 0) ThrowInputError(where, "smoothmax_tau", smoothmax_tau, "must be >= 0");
  if (checkpoint_every < 0)
    ThrowInputError(where, "checkpoint_every", checkpoint_every, "must be >= 0");
  if (resume && checkpoint_dir.empty())
    ThrowInputError(where, "resume", "true", "needs a checkpoint_dir");
}

std::vector<int> ProxyStageOfLayer(int proxy_layers, const Plan& target_plan,
                                   int target_layers) {
  std::vector<int> stage_of(proxy_layers, 0);
  for (int l = 0; l < proxy_layers; ++l) {
    const int target = std::min(target_layers - 1,
                                static_cast<int>((l + 0.5) / proxy_layers * target_layers));
    for (int s = 0; s < target_plan.NumStages(); ++s)
      if (target >= target_plan.stages[s].first_layer && target < target_plan.stages[s].last_layer)
        stage_of[l] = s;
  }
  return stage_of;
}

namespace {

// Adam (Kingma & Ba 2015) on one flat tensor, exposing its preconditioner for the look-ahead.
struct FlatAdam {
  double learning_rate, beta1, beta2, epsilon = 1e-8;
  Tensor m, v;
  int64_t steps = 0;

  FlatAdam(const Tensor& like, double lr, double b1, double b2)
      : learning_rate(lr), beta1(b1), beta2(b2), m(torch::zeros_like(like)),
        v(torch::zeros_like(like)) {}
  // The change of the parameters that the next Step(grad) would make (state unchanged).
  Tensor Update(const Tensor& grad) const {
    torch::NoGradGuard no_grad;
    const int64_t t = steps + 1;
    const Tensor m_next = m * beta1 + grad * (1 - beta1);
    const Tensor v_next = v * beta2 + grad * grad * (1 - beta2);
    return m_next * (-learning_rate / (1 - std::pow(beta1, t))) /
           ((v_next / (1 - std::pow(beta2, t))).sqrt_().add_(epsilon));
  }
  void Step(Tensor params, const Tensor& grad) {
    torch::NoGradGuard no_grad;
    const Tensor update = Update(grad);
    ++steps;
    m.mul_(beta1).add_(grad, 1 - beta1);
    v.mul_(beta2).addcmul_(grad, grad, 1 - beta2);
    params.add_(update);
  }
};

// The proxy model, its data and the compressors of each option.
struct Proxy {
  ModelSpec model;
  std::unique_ptr<CharDataset> data;
  std::unique_ptr<Communicator> self;
  std::unique_ptr<GptStage> stage;
  Tensor element_stage;  // (num_parameters,) int64: target stage of each element of theta
  // [replica][batch option][compression option], null for none: each replica's own compressor
  // state for each batch option's gradient stream.
  std::vector<std::vector<std::vector<std::unique_ptr<GradientCompressor>>>> compressors;
  // With several replicas: replica r's rank r of one Gloo group in this process.
  std::vector<std::unique_ptr<ProcessGroups>> groups;
  FlatAdam adam;

  Proxy(const CoSearchOptions& options, const CompressionTimeSurrogate& surrogate,
        int num_batch_options, const Plan& target_plan, int target_layers)
      : model(LoadRuntimeModel(options.model, options.seq_length)),
        adam(torch::zeros({1}), options.learning_rate, 0.9, 0.95) {
    data = std::make_unique<CharDataset>(
        options.data_path.empty() ? DefaultDataPath() : options.data_path, model.seq_length);
    if (data->VocabSize() > model.vocab_size)
      ThrowInputError("co-search", "model", options.model,
                      fmt::format("vocabulary {} is smaller than the data's {} characters",
                                  model.vocab_size, data->VocabSize()));
    self = MakeSelfCommunicator("co-search proxy");
    stage = std::make_unique<GptStage>(model, 0, model.NumLayers(), Recompute::kNone, self.get(),
                                       options.seed);
    adam = FlatAdam(stage->FlatParameters(), options.learning_rate, 0.9, 0.95);
    const std::vector<int> stage_of =
        ProxyStageOfLayer(model.NumLayers(), target_plan, target_layers);
    element_stage = torch::zeros({stage->NumLocalParameters()}, torch::kInt64);
    std::vector<std::vector<int64_t>> shapes;
    for (size_t p = 0; p < stage->Parameters().size(); ++p) {
      const ParameterInfo& info = stage->ParameterInfos()[p];
      element_stage.narrow(0, info.offset, info.numel).fill_(stage_of[info.layer]);
      shapes.push_back(stage->Parameters()[p].sizes().vec());
    }
    CompressorOptions compressor_options;
    compressor_options.seed = options.seed;
    const int replicas = options.dp_replicas;
    compressors.resize(replicas);
    for (auto& replica : compressors) {
      replica.resize(num_batch_options);
      for (auto& batch : replica)
        for (const CompressionSpec& spec : surrogate.Options())
          batch.push_back(spec.kind == GradCompression::kNone
                              ? nullptr
                              : GradientCompressor::Create(spec, shapes, compressor_options));
    }
    if (replicas > 1) {
      // The ranks rendezvous together: one thread per rank.
      groups.resize(replicas);
      const int port = FreeTcpPort();
      OnReplicas(replicas, [&](int r) {
        RendezvousOptions rendezvous;
        rendezvous.rank = r;
        rendezvous.world_size = replicas;
        rendezvous.local_rank = r;
        rendezvous.master_port = port;
        rendezvous.backend = "gloo";
        groups[r] = std::make_unique<ProcessGroups>(rendezvous);
      });
    }
  }

  int Replicas() const { return static_cast<int>(compressors.size()); }

  // Runs body(r) for r = 0 .. n - 1 on a thread each; rethrows the first exception.
  static void OnReplicas(int n, const std::function<void(int)>& body) {
    std::vector<std::exception_ptr> errors(n);
    std::vector<std::thread> threads;
    for (int r = 0; r < n; ++r)
      threads.emplace_back([&, r] {
        try {
          body(r);
        } catch (...) {
          errors[r] = std::current_exception();
        }
      });
    for (std::thread& t : threads) t.join();
    for (const std::exception_ptr& e : errors)
      if (e) std::rethrow_exception(e);
  }

  // grads[b][r]: replica r's gradient at theta on its share of batch option b, and in *loss the
  // mean loss over the largest batch. The step draws the largest batch B (the samples of DP rank
  // r are [r B / R, (r + 1) B / R)); batch b takes the first b / R of each replica's samples.
  // Nested batches cost one forward and backward per chunk between consecutive sizes, and
  // g_b = sum of the chunks' mean gradients weighted by their share of b / R (one chunk: weight 1,
  // exact in floating point, so one batch option is the runtime's DP step exactly).
  std::vector<std::vector<Tensor>> ReplicaGradients(uint64_t seed, int64_t step,
                                                    const std::vector<int>& batch_sizes,
                                                    double* loss) {
    const int R = Replicas(), B = static_cast<int>(batch_sizes.size());
    const int largest = *std::max_element(batch_sizes.begin(), batch_sizes.end());
    std::vector<int> ends;  // chunk ends per replica, ascending
    for (int b : batch_sizes) ends.push_back(b / R);
    std::sort(ends.begin(), ends.end());
    ends.erase(std::unique(ends.begin(), ends.end()), ends.end());
    std::vector<std::vector<Tensor>> grads(B, std::vector<Tensor>(R));
    *loss = 0;
    for (int r = 0; r < R; ++r) {
      const int first = r * (largest / R);
      std::vector<Tensor> chunk_grads;
      std::vector<double> chunk_losses;
      for (size_t c = 0; c < ends.size(); ++c) {
        const int begin = c ? ends[c - 1] : 0;
        double chunk_loss = 0;
        chunk_grads.push_back(Gradient(
            data->TrainBatch(seed, step, largest, first + begin, ends[c] - begin), &chunk_loss));
        chunk_losses.push_back(chunk_loss);
      }
      for (int b = 0; b < B; ++b) {
        const int count = batch_sizes[b] / R;
        for (size_t c = 0; c < ends.size() && ends[c] <= count; ++c) {
          const double weight = static_cast<double>(ends[c] - (c ? ends[c - 1] : 0)) / count;
          grads[b][r] = c == 0 ? chunk_grads[0] * weight : grads[b][r] + chunk_grads[c] * weight;
        }
      }
      double replica_loss = 0;
      for (size_t c = 0; c < ends.size(); ++c)
        replica_loss += chunk_losses[c] * (ends[c] - (c ? ends[c - 1] : 0)) / ends.back();
      *loss += replica_loss / R;
    }
    return grads;
  }

  // V_k for each option k with needed[k]: the mean over the replicas of their gradients on
  // batch option b after option k's compression and exchange (undefined where not needed). One
  // replica: the round trip of a group of one.
  std::vector<Tensor> Variants(int b, const std::vector<Tensor>& grads,
                               const std::vector<bool>& needed) {
    const int R = Replicas(), K = static_cast<int>(needed.size());
    std::vector<Tensor> variants(K);
    if (R == 1) {
      for (int k = 0; k < K; ++k)
        if (needed[k]) variants[k] = RoundTrip(b, k, grads[0]);
      return variants;
    }
    const int num_params = static_cast<int>(stage->Parameters().size());
    std::vector<int> params(num_params);
    for (int p = 0; p < num_params; ++p) params[p] = p;
    OnReplicas(R, [&](int r) {
      for (int k = 0; k < K; ++k) {
        if (!needed[k]) continue;
        if (!compressors[r][b][k]) {  // none: the plain mean (an all-reduce's)
          if (r == 0) {
            variants[k] = grads[0].clone();
            for (int q = 1; q < R; ++q) variants[k].add_(grads[q]);
            variants[k].div_(R);
          }
          continue;
        }
        Tensor buffer = grads[r].clone();
        std::vector<Tensor> views;
        for (int p = 0; p < num_params; ++p) {
          const ParameterInfo& info = stage->ParameterInfos()[p];
          views.push_back(buffer.narrow(0, info.offset, info.numel).view(
              stage->Parameters()[p].sizes()));
        }
        compressors[r][b][k]->Reduce(params, views, groups[r]->World());
        if (r == 0) variants[k] = buffer;
      }
    });
    return variants;
  }

  Tensor Theta() const { return stage->FlatParameters(); }

  // grad of the mean loss on `batch` at the current theta, flattened like theta.
  Tensor Gradient(const CharDataset::Batch& batch, double* loss) {
    for (const Tensor& p : stage->Parameters())
      if (p.grad().defined()) const_cast<Tensor&>(p).mutable_grad() = Tensor();
    Tensor value = stage->Forward(batch.inputs, batch.targets);
    value.backward();
    *loss = value.item<double>();
    Tensor flat = torch::zeros({stage->NumLocalParameters()});
    for (size_t p = 0; p < stage->Parameters().size(); ++p) {
      const Tensor& grad = stage->Parameters()[p].grad();
      const ParameterInfo& info = stage->ParameterInfos()[p];
      if (grad.defined()) flat.narrow(0, info.offset, info.numel).copy_(grad.reshape(-1));
    }
    return flat;
  }

  // The same at theta = `at` (theta is restored afterwards).
  Tensor GradientAt(const Tensor& at, const CharDataset::Batch& batch, double* loss) {
    Tensor saved = Theta().clone();
    {
      torch::NoGradGuard no_grad;
      Theta().copy_(at);
    }
    Tensor grad = Gradient(batch, loss);
    torch::NoGradGuard no_grad;
    Theta().copy_(saved);
    return grad;
  }

  double LossAt(const Tensor& at, const CharDataset::Batch& batch) {
    torch::NoGradGuard no_grad;
    Tensor saved = Theta().clone();
    Theta().copy_(at);
    const double loss = stage->Forward(batch.inputs, batch.targets).item<double>();
    Theta().copy_(saved);
    return loss;
  }

  // Round trip of g through batch option b's compressor of option k, parameter by parameter.
  Tensor RoundTrip(int b, int k, const Tensor& g) {
    if (!compressors[0][b][k]) return g;
    Tensor out = torch::empty_like(g);
    for (size_t p = 0; p < stage->Parameters().size(); ++p) {
      const ParameterInfo& info = stage->ParameterInfos()[p];
      const Tensor grad = g.narrow(0, info.offset, info.numel).view(stage->Parameters()[p].sizes());
      out.narrow(0, info.offset, info.numel)
          .copy_(compressors[0][b][k]->RoundTrip(static_cast<int>(p), grad).reshape(-1));
    }
    return out;
  }

  // (S, K) probabilities -> per-element weight of option k.
  Tensor ElementWeights(const Tensor& probabilities, int k) const {
    return probabilities.select(1, k).to(torch::kFloat32).index_select(0, element_stage);
  }

  // Per-stage sums of x (num_parameters,) -> (S,) float64.
  Tensor StageSums(const Tensor& x, int num_stages) const {
    return torch::zeros({num_stages}, torch::kFloat64)
        .index_add_(0, element_stage, x.to(torch::kFloat64));
  }
};

Tensor ProbabilitiesTensor(const std::vector<std::vector<double>>& p) {
  const int S = static_cast<int>(p.size()), K = static_cast<int>(p[0].size());
  Tensor t = torch::zeros({S, K}, torch::kFloat64);
  for (int s = 0; s < S; ++s)
    for (int k = 0; k < K; ++k) t[s][k] = p[s][k];
  return t;
}

}  // namespace

struct CoSearcher::Impl {
  CoSearchOptions options;
  std::vector<BatchOption> batches;
  std::vector<int> batch_sizes;  // proxy batch size of each option
  const CompressionTimeSurrogate& surrogate;  // the first option's: stages, options, masks
  Proxy proxy;
  CharDataset::Batch validation;  // validation_windows fixed windows
  Tensor alpha_m, alpha_v, beta_m, beta_v;
  int64_t alpha_steps = 0;  // Adam steps on (alpha, beta)
  // The last outer update, frozen for the tests.
  struct Frozen {
    std::vector<std::vector<Tensor>> updates;  // [b][k]: the one-step inner update
    Tensor theta;
    CharDataset::Batch batch;
    double lambda = 0, temperature = 1, time_scale = 1;
    Tensor gradient, batch_gradient;  // dJ/dalpha, dJ/dbeta
    Tensor alpha, beta;
    bool valid = false;
  } frozen;

  Impl(const CoSearchOptions& o, std::vector<BatchOption> b, const Plan& base)
      : options(o), batches(std::move(b)), surrogate(*batches.front().surrogate),
        proxy(o, surrogate, static_cast<int>(batches.size()), base,
              base.stages.back().last_layer) {
    for (const BatchOption& option : batches) batch_sizes.push_back(option.proxy_batch_size);
  }

  // T(p, q) = sum_b q_b T_b(p) with the smooth maxima; dT/dp into *dp, dT/dq_b = T_b into *dq.
  double Seconds(const std::vector<std::vector<double>>& p, const std::vector<double>& q,
                 std::vector<std::vector<double>>* dp, std::vector<double>* dq) const {
    const double tau = options.smoothmax_tau * surrogate.BaseSeconds();
    double total = 0;
    if (dp) dp->assign(p.size(), std::vector<double>(p[0].size(), 0.0));
    if (dq) dq->assign(q.size(), 0.0);
    for (size_t b = 0; b < batches.size(); ++b) {
      std::vector<std::vector<double>> gradient;
      const double seconds = batches[b].surrogate->Seconds(p, tau, dp ? &gradient : nullptr);
      total += q[b] * seconds;
      if (dq) (*dq)[b] = seconds;
      if (dp)
        for (size_t s = 0; s < p.size(); ++s)
          for (size_t k = 0; k < p[s].size(); ++k) (*dp)[s][k] += q[b] * gradient[s][k];
    }
    return total;
  }
};

namespace {

// softmax(alpha_s / temperature) over the allowed options of each stage.
std::vector<std::vector<double>> SoftmaxRows(const Tensor& alpha, double temperature,
                                             const CompressionTimeSurrogate& surrogate) {
  const int S = surrogate.NumStages(), K = surrogate.NumOptions();
  std::vector<std::vector<double>> p(S, std::vector<double>(K, 0.0));
  auto a = alpha.accessor<double, 2>();
  for (int s = 0; s < S; ++s) {
    double top = -1e300, sum = 0;
    for (int k = 0; k < K; ++k)
      if (surrogate.Allowed(s, k)) top = std::max(top, a[s][k] / temperature);
    for (int k = 0; k < K; ++k)
      if (surrogate.Allowed(s, k)) sum += (p[s][k] = std::exp(a[s][k] / temperature - top));
    for (int k = 0; k < K; ++k) p[s][k] /= sum;
  }
  return p;
}

// softmax(beta / temperature).
std::vector<double> SoftmaxVector(const Tensor& beta, double temperature) {
  const Tensor q = torch::softmax(beta / temperature, 0);
  return std::vector<double>(q.data_ptr<double>(), q.data_ptr<double>() + q.numel());
}

// Throws InputError unless the batch options are usable together.
void CheckBatchOptions(const CoSearchOptions& options, const std::vector<BatchOption>& batches) {
  const std::string where = "co-search options";
  if (batches.empty()) throw InputError("co-search: no batch options");
  const CompressionTimeSurrogate& first = *batches.front().surrogate;
  for (const BatchOption& b : batches) {
    if (b.proxy_batch_size < 1 || b.proxy_batch_size % options.dp_replicas != 0)
      ThrowInputError(where, "batch size", b.proxy_batch_size,
                      fmt::format("must be >= 1 and divisible by dp_replicas = {}",
                                  options.dp_replicas));
    const CompressionTimeSurrogate& s = *b.surrogate;
    bool same = s.NumStages() == first.NumStages() && s.NumOptions() == first.NumOptions();
    for (int st = 0; same && st < s.NumStages(); ++st)
      for (int k = 0; same && k < s.NumOptions(); ++k)
        same = s.Allowed(st, k) == first.Allowed(st, k) &&
               s.Options()[k].Label() == first.Options()[k].Label();
    if (!same)
      ThrowInputError(where, "batch size", b.proxy_batch_size,
                      "its target plan must have the first batch option's stages and options");
  }
}

}  // namespace

CoSearcher::CoSearcher(const CoSearchOptions& options, const CompressionTimeSurrogate& surrogate)
    : CoSearcher(options, std::vector<BatchOption>{{options.batch_size, &surrogate}}) {}

CoSearcher::CoSearcher(const CoSearchOptions& options, std::vector<BatchOption> batches) {
  options.Validate();
  CheckBatchOptions(options, batches);
  // The proxy maps its layers by relative depth onto the base plan's stages; the plan's layer
  // count is its last stage's end.
  const CompressionTimeSurrogate& surrogate = *batches.front().surrogate;
  const Plan base = surrogate.PlanFor(std::vector<int>(surrogate.NumStages(), 0));
  const int B = static_cast<int>(batches.size());
  impl_ = std::make_unique<Impl>(options, std::move(batches), base);
  impl_->validation = impl_->proxy.data->ValidationBatch(options.validation_windows);
  alpha_ = torch::zeros({surrogate.NumStages(), surrogate.NumOptions()}, torch::kFloat64);
  beta_ = torch::zeros({B}, torch::kFloat64);
  impl_->alpha_m = torch::zeros_like(alpha_);
  impl_->alpha_v = torch::zeros_like(alpha_);
  impl_->beta_m = torch::zeros_like(beta_);
  impl_->beta_v = torch::zeros_like(beta_);
  if (options.resume) LoadCheckpoint();
}

CoSearcher::~CoSearcher() = default;

double CoSearcher::Temperature() const {
  const CoSearchOptions& o = impl_->options;
  const double progress =
      o.search_steps > 1 ? std::min(1.0, static_cast<double>(step_) / (o.search_steps - 1)) : 1.0;
  return o.initial_temperature * std::pow(o.final_temperature / o.initial_temperature, progress);
}

std::vector<std::vector<double>> CoSearcher::Probabilities() const {
  return SoftmaxRows(alpha_, Temperature(), impl_->surrogate);
}

std::vector<int> CoSearcher::Discretize() const {
  const auto p = Probabilities();
  std::vector<int> choice(p.size(), 0);
  for (size_t s = 0; s < p.size(); ++s)
    choice[s] = static_cast<int>(std::max_element(p[s].begin(), p[s].end()) - p[s].begin());
  return choice;
}

int CoSearcher::NumBatchOptions() const { return static_cast<int>(impl_->batches.size()); }

std::vector<double> CoSearcher::BatchProbabilities() const {
  return SoftmaxVector(beta_, Temperature());
}

int CoSearcher::DiscretizeBatch() const {
  const std::vector<double> q = BatchProbabilities();
  return static_cast<int>(std::max_element(q.begin(), q.end()) - q.begin());
}

Tensor CoSearcher::FlatParameters() const { return impl_->proxy.Theta(); }

void CoSearcher::Step() {
  Impl& x = *impl_;
  const CoSearchOptions& o = x.options;
  const int S = x.surrogate.NumStages(), K = x.surrogate.NumOptions(), B = NumBatchOptions();
  Proxy& proxy = x.proxy;

  const std::vector<std::vector<Tensor>> grads =
      proxy.ReplicaGradients(o.seed, step_, x.batch_sizes, &last_train_loss_);
  std::vector<std::vector<Tensor>> variants;  // [b][k]
  for (int b = 0; b < B; ++b)
    variants.push_back(proxy.Variants(b, grads[b], std::vector<bool>(K, true)));

  if (step_ >= o.warmup_steps) {
    const double temperature = Temperature();
    const auto p = Probabilities();
    const std::vector<double> q = BatchProbabilities();
    const Tensor pt = ProbabilitiesTensor(p);
    // The one-step inner update of each (batch, compression) pair alone, and their mixture.
    std::vector<std::vector<Tensor>> updates(B);
    Tensor mixed_update = torch::zeros_like(grads[0][0]);
    for (int b = 0; b < B; ++b)
      for (int k = 0; k < K; ++k) {
        updates[b].push_back(proxy.adam.Update(variants[b][k]));
        mixed_update.add_(proxy.ElementWeights(pt, k) * updates[b][k] * q[b]);
      }
    const Tensor theta = proxy.Theta().clone();
    const Tensor look_ahead = o.second_order ? theta + mixed_update : theta;
    // Validation windows cycle through the fixed set.
    const int first = static_cast<int>((static_cast<int64_t>(step_) * o.validation_batch) %
                                       (o.validation_windows - o.validation_batch + 1));
    CharDataset::Batch vb{x.validation.inputs.narrow(0, first, o.validation_batch),
                          x.validation.targets.narrow(0, first, o.validation_batch)};
    const Tensor val_grad = proxy.GradientAt(look_ahead, vb, &last_validation_loss_);
    // a[b][s][k] = <grad L_val, u_{b,k}> over stage s's elements: dL_val(theta')/dp[s][k] is
    // sum_b q_b a[b][s][k], dL_val(theta')/dq_b is sum_{s,k} p[s][k] a[b][s][k].
    Tensor dp = torch::zeros({S, K}, torch::kFloat64);
    Tensor dq = torch::zeros({B}, torch::kFloat64);
    for (int b = 0; b < B; ++b) {
      Tensor a = torch::zeros({S, K}, torch::kFloat64);
      for (int k = 0; k < K; ++k)
        a.select(1, k).copy_(proxy.StageSums(val_grad * updates[b][k], S));
      dp.add_(a * q[b]);
      dq[b] = (a * pt).sum();
    }
    const Tensor qt = torch::tensor(q, torch::kFloat64);
    const double progress = -(dq * qt).sum().item<double>();
    if (o.lambda >= 0) {
      lambda_ = o.lambda;
    } else {
      const double sample = std::max(0.0, progress);
      lambda_ = step_ == o.warmup_steps ? sample : 0.9 * lambda_ + 0.1 * sample;
    }
    std::vector<std::vector<double>> dt_dp;
    std::vector<double> dt_dq;
    const double time_scale = x.Seconds(p, q, &dt_dp, &dt_dq);  // T_now
    dp.add_(ProbabilitiesTensor(dt_dp) * (lambda_ / time_scale));
    dq.add_(torch::tensor(dt_dq, torch::kFloat64) * (lambda_ / time_scale));
    // Softmax with temperature: dalpha_sk = p_sk (dp_sk - sum_j p_sj dp_sj) / temperature.
    const Tensor dalpha = pt * (dp - (pt * dp).sum(1, true)) / temperature;
    const Tensor dbeta = qt * (dq - (qt * dq).sum()) / temperature;
    x.frozen = {updates, theta, vb,     lambda_, temperature,   time_scale,
                dalpha,  dbeta, alpha_.clone(), beta_.clone(), o.second_order};
    // Adam on (alpha, beta).
    ++x.alpha_steps;
    const double bias1 = 1 - std::pow(0.9, x.alpha_steps);
    const double bias2 = 1 - std::pow(0.999, x.alpha_steps);
    auto adam = [&](Tensor& logits, Tensor& m, Tensor& v, const Tensor& grad) {
      m.mul_(0.9).add_(grad, 0.1);
      v.mul_(0.999).addcmul_(grad, grad, 0.001);
      logits.addcdiv_(m, (v / bias2).sqrt_().add_(1e-12), -o.alpha_learning_rate / bias1);
    };
    adam(alpha_, x.alpha_m, x.alpha_v, dalpha);
    adam(beta_, x.beta_m, x.beta_v, dbeta);
  }

  // Inner: Adam on theta with the mixed gradient.
  const Tensor pt = ProbabilitiesTensor(Probabilities());
  const std::vector<double> q = BatchProbabilities();
  Tensor mixed = torch::zeros_like(grads[0][0]);
  for (int b = 0; b < B; ++b)
    for (int k = 0; k < K; ++k) mixed.add_(proxy.ElementWeights(pt, k) * variants[b][k] * q[b]);
  proxy.adam.Step(proxy.Theta(), mixed);
  ++step_;
  if (!o.checkpoint_dir.empty() && o.checkpoint_every > 0 && step_ % o.checkpoint_every == 0)
    SaveCheckpoint();
}

double CoSearcher::FrozenOuterObjective(const Tensor& alpha, const Tensor& beta) const {
  const Impl& x = *impl_;
  STRATOS_CHECK(x.frozen.valid, "no second-order outer step has run yet");
  const auto p = SoftmaxRows(alpha, x.frozen.temperature, x.surrogate);
  const std::vector<double> q = SoftmaxVector(beta, x.frozen.temperature);
  const Tensor pt = ProbabilitiesTensor(p);
  Tensor look_ahead = x.frozen.theta.clone();
  for (int b = 0; b < NumBatchOptions(); ++b)
    for (int k = 0; k < x.surrogate.NumOptions(); ++k)
      look_ahead.add_(x.proxy.ElementWeights(pt, k) * x.frozen.updates[b][k] * q[b]);
  const double loss = const_cast<Proxy&>(x.proxy).LossAt(look_ahead, x.frozen.batch);
  return loss + x.frozen.lambda * x.Seconds(p, q, nullptr, nullptr) / x.frozen.time_scale;
}

Tensor CoSearcher::FrozenAlpha() const {
  STRATOS_CHECK(impl_->frozen.valid, "no second-order outer step has run yet");
  return impl_->frozen.alpha;
}

Tensor CoSearcher::FrozenBatchLogits() const {
  STRATOS_CHECK(impl_->frozen.valid, "no second-order outer step has run yet");
  return impl_->frozen.beta;
}

Tensor CoSearcher::FrozenOuterGradient() const {
  STRATOS_CHECK(impl_->frozen.valid, "no second-order outer step has run yet");
  return impl_->frozen.gradient;
}

Tensor CoSearcher::FrozenBatchGradient() const {
  STRATOS_CHECK(impl_->frozen.valid, "no second-order outer step has run yet");
  return impl_->frozen.batch_gradient;
}

void CoSearcher::SaveCheckpoint() const {
  const Impl& x = *impl_;
  const std::string dir = x.options.checkpoint_dir;
  std::filesystem::create_directories(dir);
  std::vector<Tensor> tensors = {alpha_,         x.alpha_m,      x.alpha_v, beta_, x.beta_m,
                                 x.beta_v,       x.proxy.Theta(), x.proxy.adam.m, x.proxy.adam.v};
  for (const auto& replica : x.proxy.compressors)
    for (const auto& batch : replica)
      for (const auto& compressor : batch)
        if (compressor)
          for (const Tensor& t : compressor->State()) tensors.push_back(t);
  torch::save(tensors, dir + "/cosearch.pt.tmp");
  nlohmann::json meta = {{"schema", "stratos.cosearch_checkpoint/2"},
                         {"batch_options", NumBatchOptions()},
                         {"step", step_},
                         {"lambda", lambda_},
                         {"alpha_steps", x.alpha_steps},
                         {"theta_adam_steps", x.proxy.adam.steps},
                         {"tensors", tensors.size()},
                         {"stages", x.surrogate.NumStages()},
                         {"options", x.surrogate.NumOptions()},
                         {"parameters", x.proxy.Theta().numel()}};
  {
    std::ofstream out(dir + "/cosearch.json.tmp");
    out << meta.dump(2) << "\n";
    if (!out) throw std::runtime_error(fmt::format("{}/cosearch.json.tmp: write failed", dir));
  }
  std::filesystem::rename(dir + "/cosearch.pt.tmp", dir + "/cosearch.pt");
  std::filesystem::rename(dir + "/cosearch.json.tmp", dir + "/cosearch.json");
}

void CoSearcher::LoadCheckpoint() {
  Impl& x = *impl_;
  const std::string dir = x.options.checkpoint_dir;
  const std::string json_path = dir + "/cosearch.json";
  std::ifstream in(json_path);
  if (!in) throw InputError(fmt::format("{}: cannot open the co-search checkpoint", json_path));
  nlohmann::json meta;
  try {
    meta = nlohmann::json::parse(in);
  } catch (const nlohmann::json::exception& e) {
    throw InputError(fmt::format("{}: {}", json_path, e.what()));
  }
  auto expect = [&](const char* key, int64_t value) {
    if (meta.value(key, int64_t{-1}) != value)
      ThrowInputError(json_path, key, meta.value(key, nlohmann::json()).dump(),
                      fmt::format("this co-search has {}", value));
  };
  expect("batch_options", NumBatchOptions());
  expect("stages", x.surrogate.NumStages());
  expect("options", x.surrogate.NumOptions());
  expect("parameters", x.proxy.Theta().numel());
  std::vector<Tensor> tensors;
  torch::load(tensors, dir + "/cosearch.pt");
  expect("tensors", static_cast<int64_t>(tensors.size()));
  torch::NoGradGuard no_grad;
  size_t next = 0;
  for (Tensor* t : {&alpha_, &x.alpha_m, &x.alpha_v, &beta_, &x.beta_m, &x.beta_v})
    t->copy_(tensors[next++]);
  x.proxy.Theta().copy_(tensors[next++]);
  x.proxy.adam.m.copy_(tensors[next++]);
  x.proxy.adam.v.copy_(tensors[next++]);
  for (const auto& replica : x.proxy.compressors)
    for (const auto& batch : replica)
      for (const auto& compressor : batch) {
        if (!compressor) continue;
        const size_t count = compressor->State().size();
        compressor->LoadState(std::vector<Tensor>(tensors.begin() + next,
                                                  tensors.begin() + next + count));
        next += count;
      }
  step_ = meta.at("step").get<int>();
  lambda_ = meta.at("lambda").get<double>();
  x.alpha_steps = meta.at("alpha_steps").get<int64_t>();
  x.proxy.adam.steps = meta.at("theta_adam_steps").get<int64_t>();
}

std::vector<CurvePoint> TrainFixedPlan(const CoSearchOptions& options,
                                       const CompressionTimeSurrogate& surrogate,
                                       const std::vector<int>& choice, int steps, int eval_every,
                                       int eval_windows) {
  options.Validate();
  const Plan plan = surrogate.PlanFor(choice);
  Proxy proxy(options, surrogate, 1, plan, plan.stages.back().last_layer);
  const CharDataset::Batch validation = proxy.data->ValidationBatch(eval_windows);
  std::vector<CurvePoint> curve;
  const int S = surrogate.NumStages(), K = surrogate.NumOptions();
  Tensor pt = torch::zeros({S, K}, torch::kFloat64);
  for (int s = 0; s < S; ++s) pt[s][choice[s]] = 1.0;
  for (int step = 0; step <= steps; ++step) {
    if (step % eval_every == 0 || step == steps)
      curve.push_back({step, proxy.LossAt(proxy.Theta(), validation)});
    if (step == steps) break;
    double loss = 0;
    const std::vector<Tensor> grads =
        proxy.ReplicaGradients(options.seed, step, {options.batch_size}, &loss)[0];
    std::vector<bool> needed(K);
    for (int k = 0; k < K; ++k)  // options no stage uses are not computed
      needed[k] = proxy.ElementWeights(pt, k).sum().item<double>() > 0;
    const std::vector<Tensor> variants = proxy.Variants(0, grads, needed);
    Tensor update = torch::zeros_like(grads[0]);
    for (int k = 0; k < K; ++k)
      if (needed[k]) update.add_(proxy.ElementWeights(pt, k) * variants[k]);
    proxy.adam.Step(proxy.Theta(), update);
  }
  return curve;
}

}  // namespace stratos
