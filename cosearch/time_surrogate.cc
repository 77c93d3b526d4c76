#include "cosearch/time_surrogate.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <limits>

#include "costmodel/error.h"

namespace stratos {

namespace {

// tau log sum exp(x / tau) and its gradient softmax(x / tau); the exact max (gradient one-hot on
// the first maximum) at tau = 0.
double SmoothMax(const std::vector<double>& x, double tau, std::vector<double>* weights) {
  const double top = *std::max_element(x.begin(), x.end());
  weights->assign(x.size(), 0.0);
  if (tau <= 0) {
    (*weights)[std::max_element(x.begin(), x.end()) - x.begin()] = 1.0;
    return top;
  }
  double sum = 0;
  for (size_t i = 0; i < x.size(); ++i) sum += ((*weights)[i] = std::exp((x[i] - top) / tau));
  for (double& w : *weights) w /= sum;
  return top + tau * std::log(sum);
}

}  // namespace

CompressionTimeSurrogate::CompressionTimeSurrogate(const Problem& problem, const Plan& base_plan,
                                                   std::vector<CompressionSpec> options)
    : problem_(problem), base_(base_plan), options_(std::move(options)) {
  if (options_.empty() || options_.front().kind != GradCompression::kNone)
    throw InputError("co-search: the compression options must start with none");
  ValidatePlan(problem_, base_, "co-search base plan");
  for (StagePlan& stage : base_.stages) stage.config.grad_compression = CompressionSpec{};
  const int S = base_.NumStages(), K = NumOptions();
  num_microbatches_ = base_.num_microbatches;
  t_.assign(S, std::vector<double>(K, 0.0));
  e_ = t_;
  wire_bytes_ = t_;
  allowed_.assign(S, std::vector<bool>(K, false));
  one_time_.assign(S, 0.0);
  const CostModel cost_model(problem_);
  for (int k = 0; k < K; ++k) {
    Plan plan = base_;
    std::vector<bool> ok(S);
    for (int s = 0; s < S; ++s) {
      const StageConfig& c = base_.stages[s].config;
      ok[s] = CheckStageCompression(options_[k], c.zero_stage).empty() &&
              (k == 0 || c.data_parallel > 1);
      if (ok[s]) plan.stages[s].config.grad_compression = options_[k];
    }
    const Estimate estimate = Evaluate(cost_model, plan);
    for (int s = 0; s < S; ++s) {
      allowed_[s][k] = ok[s];
      t_[s][k] = estimate.stages[s].microbatch_seconds;
      e_[s][k] = estimate.stages[s].tail_seconds;
      if (k == 0) one_time_[s] = estimate.stages[s].one_time_seconds;
      const StagePlan& stage = base_.stages[s];
      double bytes = 0;
      for (int l = stage.first_layer; l < stage.last_layer; ++l)
        for (const GradientTensorShape& shape :
             LayerGradientShapes(problem_.model, problem_.model.layers[l],
                                 stage.config.tensor_parallel))
          bytes += WireBytes(options_[k], shape, problem_.training.grad_dtype_bytes,
                             stage.config.data_parallel);
      wire_bytes_[s][k] = bytes;
    }
    if (k == 0) base_seconds_ = estimate.iteration_seconds;
  }
}

double CompressionTimeSurrogate::Seconds(const std::vector<std::vector<double>>& p,
                                         double tau_seconds,
                                         std::vector<std::vector<double>>* gradient) const {
  const int S = NumStages(), K = NumOptions();
  STRATOS_CHECK(static_cast<int>(p.size()) == S, "{} stage rows, expected {}", p.size(), S);
  std::vector<double> t(S, 0.0), e(S, 0.0);
  double total = 0;
  for (int s = 0; s < S; ++s) {
    STRATOS_CHECK(static_cast<int>(p[s].size()) == K, "{} options, expected {}", p[s].size(), K);
    for (int k = 0; k < K; ++k) {
      if (!allowed_[s][k]) continue;
      t[s] += p[s][k] * t_[s][k];
      e[s] += p[s][k] * e_[s][k];
    }
    total += t[s] + one_time_[s];
  }
  std::vector<double> wt, we;
  total += (num_microbatches_ - 1) * SmoothMax(t, tau_seconds, &wt);
  total += SmoothMax(e, tau_seconds, &we);
  if (gradient) {
    gradient->assign(S, std::vector<double>(K, 0.0));
    for (int s = 0; s < S; ++s) {
      const double dt = 1.0 + (num_microbatches_ - 1) * wt[s];
      for (int k = 0; k < K; ++k)
        if (allowed_[s][k]) (*gradient)[s][k] = dt * t_[s][k] + we[s] * e_[s][k];
    }
  }
  return total;
}

Plan CompressionTimeSurrogate::PlanFor(const std::vector<int>& choice) const {
  STRATOS_CHECK(static_cast<int>(choice.size()) == NumStages(), "{} choices for {} stages",
                choice.size(), NumStages());
  Plan plan = base_;
  for (int s = 0; s < NumStages(); ++s) {
    STRATOS_CHECK(allowed_[s][choice[s]], "stage {} cannot use option {}", s, choice[s]);
    plan.stages[s].config.grad_compression = options_[choice[s]];
  }
  return plan;
}

double CompressionTimeSurrogate::DiscreteSeconds(const std::vector<int>& choice) const {
  return Evaluate(problem_, PlanFor(choice)).iteration_seconds;
}

std::vector<int> CompressionTimeSurrogate::FastestChoice() const {
  // Coordinate descent over stages on the exact tables (one-hot T at tau 0 is Evaluate), from
  // no compression, until no single-stage change helps: exact for one stage, and in practice
  // for the few stages of a pipeline (the max terms couple stages only weakly).
  const int S = NumStages(), K = NumOptions();
  std::vector<int> choice(S, 0);
  auto seconds_of = [&](const std::vector<int>& c) {
    std::vector<std::vector<double>> p(S, std::vector<double>(K, 0.0));
    for (int s = 0; s < S; ++s) p[s][c[s]] = 1.0;
    return Seconds(p, 0.0, nullptr);
  };
  double best = seconds_of(choice);
  for (bool improved = true; improved;) {
    improved = false;
    for (int s = 0; s < S; ++s)
      for (int k = 0; k < K; ++k) {
        if (!allowed_[s][k] || k == choice[s]) continue;
        std::vector<int> trial = choice;
        trial[s] = k;
        const double seconds = seconds_of(trial);
        if (seconds < best * (1 - 1e-12)) best = seconds, choice = trial, improved = true;
      }
  }
  return choice;
}

std::vector<int> CompressionTimeSurrogate::SmallestMessageChoice() const {
  std::vector<int> choice(NumStages(), 0);
  for (int s = 0; s < NumStages(); ++s)
    for (int k = 0; k < NumOptions(); ++k)
      if (allowed_[s][k] && wire_bytes_[s][k] < wire_bytes_[s][choice[s]]) choice[s] = k;
  return choice;
}

}  // namespace stratos
