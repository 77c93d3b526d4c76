#pragma once
// Successive halving over training runs that differ only in how they start (the seed's parallel
// random initialization, issue "training-side search"): K runs train side by side; once the
// initial steep drop of the validation loss is over, the better 1/eta of the runs go on at each
// rung and the others stop, until one survivor trains to the step budget (Jamieson & Talwalkar,
// "Non-stochastic Best Arm Identification and Hyperparameter Optimization", AISTATS 2016; the
// rung budgets double, as in Li et al., "Hyperband", JMLR 2018).
//
// The first rung is not a fixed step: it is placed where the runs' mean validation loss stops
// falling steeply (PlateauIndex), since before that every initialization looks alike. The policy
// is plain C++ (no LibTorch): the caller trains, this decides which runs go on.
#include <functional>
#include <vector>

namespace stratos {

struct HalvingOptions {
  int eta = 2;                   // keep ceil(n / eta) of n runs at each rung; >= 2
  int evaluation_steps = 10;     // steps between two validation losses; >= 1
  // The steep drop is over at the first evaluation t >= plateau_window where the mean loss fell
  // by less than plateau_drop of its value per evaluation over the last plateau_window ones.
  int plateau_window = 3;        // >= 1
  double plateau_drop = 0.02;    // in (0, 1)
  int max_first_rung_steps = 200;  // the first rung at the latest here; >= evaluation_steps
  int step_budget = 1000;          // steps the survivor trains in all; >= max_first_rung_steps

  // Throws InputError naming the field ("halving.eta", ...), its value and the rule.
  void Validate() const;
};

// The index of the first evaluation at which `losses` (one per evaluation, in order) has left its
// steep initial drop: the least t >= window with (losses[t - window] - losses[t]) /
// losses[t - window] < drop * window; -1 if there is none yet. Losses must be > 0.
int PlateauIndex(const std::vector<double>& losses, int window, double drop);

struct HalvingResult {
  int survivor = -1;
  // Validation loss of every run at each of its evaluations (steps evaluation_steps, 2 x, ...).
  std::vector<std::vector<double>> curves;
  std::vector<int> stopped_at_step;  // per run: the step it stopped at (the survivor: the budget)
  std::vector<int> rung_steps;       // the step of each rung, ascending
  long total_steps = 0;              // steps trained over all runs (the compute spent)
};

// Runs successive halving over `num_runs` runs. `advance(run, steps)` trains run `run` for `steps`
// more steps and returns its validation loss after them; it is called in rounds of
// evaluation_steps, every live run once per round, runs in ascending order. After each round,
// `after_round(step, live, so_far)` (if set) sees the step every live run has reached, the live
// runs (ascending) and the result so far (for progress and checkpoints). Ties in loss keep the
// lower run index. The decisions depend only on the losses, so a caller that resumes can replay
// the recorded losses of the rounds before its checkpoint. Throws InputError for invalid options
// or num_runs < 1.
using HalvingRoundCallback =
    std::function<void(int step, const std::vector<int>& live, const HalvingResult& so_far)>;
HalvingResult SuccessiveHalving(int num_runs, const HalvingOptions& options,
                                const std::function<double(int run, int steps)>& advance,
                                const HalvingRoundCallback& after_round = nullptr);

// Interpolated step at which `curve` (losses after evaluation_steps, 2 x evaluation_steps, ...)
// first reaches `target` (<=), linear between the evaluation before and the one that reaches it
// (the first evaluation counts as reached at its step); -1 if it never does.
double StepsToTarget(const std::vector<double>& curve, int evaluation_steps, double target);

// Steps trained over all runs by the time the survivor has trained `step` steps: the runs train
// side by side, so each run counts min(its stopped_at_step, step). In units of steps.
double ComputeSteps(const HalvingResult& result, double step);

// The same in time when a step costs seconds_per_step(n) while n runs are live (n runs sharing a
// cluster, each on 1/n of it): the integral over [0, step] of seconds_per_step(live runs).
double PricedSeconds(const HalvingResult& result, double step,
                     const std::function<double(int live_runs)>& seconds_per_step);

}  // namespace stratos
