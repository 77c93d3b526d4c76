#pragma once
// The co-search's throughput term (DESIGN.md §7): the predicted iteration time of a target plan
// whose per-stage gradient compression is a softmax mixture, and its gradient.
//
// For stage s and compression option k, t[s][k], e[s][k] and c[s] are costmodel::Evaluate's
// microbatch time, exposed tail and one-time cost of the base plan with stage s compressed by
// option k (stages are independent in the additive cost model, so one Evaluate per option
// fills a column). With probabilities p[s][k]:
//   t_s = sum_k p[s][k] t[s][k],   e_s = sum_k p[s][k] e[s][k],
//   T(p) = sum_s t_s + (m - 1) smax_tau(t) + smax_tau(e) + sum_s c_s,
// smax_tau(x) = tau log sum_s exp(x_s / tau) (the exact max at tau = 0). At one-hot p and
// tau = 0, T equals Evaluate of that discrete plan (the cost model's objective, cost_model.h).
#include <string>
#include <vector>

#include "costmodel/compression.h"
#include "costmodel/evaluate.h"

namespace stratos {

class CompressionTimeSurrogate {
 public:
  // Evaluates the base plan once per option. An option a stage cannot use (ZeRO-2/3, see
  // CheckStageCompression) is masked out for that stage (Allowed() false). Throws InputError if
  // the base plan is invalid for the problem or options is empty or lacks kind none.
  CompressionTimeSurrogate(const Problem& problem, const Plan& base_plan,
                           std::vector<CompressionSpec> options);

  int NumStages() const { return static_cast<int>(one_time_.size()); }
  int NumOptions() const { return static_cast<int>(options_.size()); }
  const std::vector<CompressionSpec>& Options() const { return options_; }
  bool Allowed(int stage, int option) const { return allowed_[stage][option]; }
  double MicrobatchSeconds(int stage, int option) const { return t_[stage][option]; }
  double TailSeconds(int stage, int option) const { return e_[stage][option]; }
  // Predicted seconds of the base plan (no compression).
  double BaseSeconds() const { return base_seconds_; }

  // T(p) in seconds; p is [stage][option] (rows sum to 1, masked entries 0). If `gradient` is
  // not null it receives dT/dp, same shape. tau_seconds >= 0.
  double Seconds(const std::vector<std::vector<double>>& p, double tau_seconds,
                 std::vector<std::vector<double>>* gradient) const;

  // The base plan with stage s compressed by options[choice[s]].
  Plan PlanFor(const std::vector<int>& choice) const;
  // Evaluate(problem, PlanFor(choice)).iteration_seconds.
  double DiscreteSeconds(const std::vector<int>& choice) const;
  // The throughput-only choice: fewest predicted seconds, by coordinate descent over stages
  // (a local optimum where no single stage's change helps; ties to the lower index).
  std::vector<int> FastestChoice() const;
  // Per stage, the allowed option whose messages are smallest (the most aggressive compression).
  std::vector<int> SmallestMessageChoice() const;

 private:
  Problem problem_;
  Plan base_;
  std::vector<CompressionSpec> options_;
  std::vector<std::vector<double>> t_, e_;
  std::vector<double> one_time_;
  std::vector<std::vector<bool>> allowed_;
  std::vector<std::vector<double>> wire_bytes_;  // [stage][option], per device per iteration
  int num_microbatches_ = 1;
  double base_seconds_ = 0;
};

}  // namespace stratos
