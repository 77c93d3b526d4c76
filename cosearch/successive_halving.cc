#include "cosearch/successive_halving.h"

#include <algorithm>
#include <numeric>

#include "costmodel/error.h"

namespace stratos {

void HalvingOptions::Validate() const {
  if (eta < 2) ThrowOptionError("halving.eta", eta, "must be >= 2");
  if (evaluation_steps < 1)
    ThrowOptionError("halving.evaluation_steps", evaluation_steps, "must be >= 1");
  if (plateau_window < 1) ThrowOptionError("halving.plateau_window", plateau_window, "must be >= 1");
  if (!(plateau_drop > 0 && plateau_drop < 1))
    ThrowOptionError("halving.plateau_drop", plateau_drop, "must be in (0, 1)");
  if (max_first_rung_steps < evaluation_steps)
    ThrowOptionError("halving.max_first_rung_steps", max_first_rung_steps,
                     fmt::format("must be >= halving.evaluation_steps = {}", evaluation_steps));
  if (step_budget < max_first_rung_steps)
    ThrowOptionError("halving.step_budget", step_budget,
                     fmt::format("must be >= halving.max_first_rung_steps = {}",
                                 max_first_rung_steps));
}

int PlateauIndex(const std::vector<double>& losses, int window, double drop) {
  for (int t = window; t < static_cast<int>(losses.size()); ++t) {
    const double before = losses[t - window];
    if ((before - losses[t]) / before < drop * window) return t;
  }
  return -1;
}

HalvingResult SuccessiveHalving(int num_runs, const HalvingOptions& options,
                                const std::function<double(int run, int steps)>& advance,
                                const HalvingRoundCallback& after_round) {
  options.Validate();
  if (num_runs < 1) ThrowOptionError("halving.runs", num_runs, "must be >= 1");
  HalvingResult result;
  result.curves.assign(num_runs, {});
  result.stopped_at_step.assign(num_runs, 0);
  std::vector<int> live(num_runs);
  std::iota(live.begin(), live.end(), 0);
  int step = 0;
  const auto round = [&] {
    step += options.evaluation_steps;
    for (int run : live) {
      result.curves[run].push_back(advance(run, options.evaluation_steps));
      result.total_steps += options.evaluation_steps;
    }
    if (after_round) after_round(step, live, result);
  };
  // The first rung: where the live runs' mean loss has left its steep drop.
  std::vector<double> mean;
  while (step + options.evaluation_steps <= options.max_first_rung_steps) {
    round();
    double sum = 0;
    for (int run : live) sum += result.curves[run].back();
    mean.push_back(sum / static_cast<double>(live.size()));
    if (PlateauIndex(mean, options.plateau_window, options.plateau_drop) >= 0) break;
  }
  // Rungs: keep the better ceil(n / eta); the next rung at twice the step.
  while (live.size() > 1) {
    result.rung_steps.push_back(step);
    std::vector<int> ranked = live;
    std::stable_sort(ranked.begin(), ranked.end(), [&](int a, int b) {
      return result.curves[a].back() < result.curves[b].back();
    });
    const size_t keep = (live.size() + options.eta - 1) / options.eta;
    for (size_t k = keep; k < ranked.size(); ++k) result.stopped_at_step[ranked[k]] = step;
    ranked.resize(keep);
    std::sort(ranked.begin(), ranked.end());
    live = ranked;
    if (live.size() == 1) break;
    const int next = std::min(2 * step, options.step_budget);
    while (step < next) round();
    if (step >= options.step_budget) {
      // The budget ends before the runs are told apart: the best one now survives.
      result.rung_steps.push_back(step);
      std::stable_sort(live.begin(), live.end(), [&](int a, int b) {
        return result.curves[a].back() < result.curves[b].back();
      });
      for (size_t k = 1; k < live.size(); ++k) result.stopped_at_step[live[k]] = step;
      live.resize(1);
    }
  }
  result.survivor = live.front();
  while (step + options.evaluation_steps <= options.step_budget) round();
  result.stopped_at_step[result.survivor] = step;
  return result;
}

double StepsToTarget(const std::vector<double>& curve, int evaluation_steps, double target) {
  for (size_t k = 0; k < curve.size(); ++k) {
    if (curve[k] > target) continue;
    const double at = static_cast<double>(k + 1) * evaluation_steps;
    if (k == 0 || !(curve[k - 1] > curve[k])) return at;
    return at - evaluation_steps * (target - curve[k]) / (curve[k - 1] - curve[k]);
  }
  return -1;
}

double ComputeSteps(const HalvingResult& result, double step) {
  double total = 0;
  for (int stopped : result.stopped_at_step) total += std::min<double>(stopped, step);
  return total;
}

double PricedSeconds(const HalvingResult& result, double step,
                     const std::function<double(int live_runs)>& seconds_per_step) {
  std::vector<int> ends = result.stopped_at_step;
  std::sort(ends.begin(), ends.end());
  double seconds = 0, from = 0;
  for (size_t k = 0; k < ends.size() && from < step; ++k) {
    const double to = std::min<double>(ends[k], step);
    if (to > from) {
      seconds += (to - from) * seconds_per_step(static_cast<int>(ends.size() - k));
      from = to;
    }
  }
  return seconds;
}

}  // namespace stratos
