#pragma once
// One interface for every searcher, Ceres style (DESIGN.md §7):
//   SearchResult result = searcher.Search(problem, options);
// Infeasibility is a value (TerminationType::kInfeasible with a message), not an exception; so
// is a searcher declining a problem it does not take (TerminationType::kDeclined).
// No LibTorch in this header: baselines include it without paying for LibTorch headers.
#include <chrono>
#include <functional>
#include <limits>
#include <optional>
#include <string>
#include <vector>

#include "costmodel/evaluate.h"
#include "costmodel/plan.h"
#include "costmodel/search_space.h"

namespace stratos {

struct SearchOptions {
  // Wall-clock budget, seconds; > 0. Searchers check it between units of work and stop with
  // TerminationType::kTimeLimit, returning the best plan found so far.
  double time_limit_seconds = 60.0;
  // Budget of plan (or surrogate batch) evaluations; 0 = unbounded.
  long max_evaluations = 0;
  // Memory budget of the searcher's tables, bytes; 0 = half of this machine's physical memory
  // (MemoryLimitBytes). A searcher whose tables would exceed it declines the problem ("problem
  // too large: ...") instead of failing to allocate.
  double memory_limit_bytes = 0;
  int seed = 0;
  int threads = 1;
  // Print progress lines to stderr on long work.
  bool progress = false;
  SpaceOptions space;
  // Called with (wall seconds, best predicted iteration seconds) whenever the best improves.
  std::function<void(double, double)> on_improvement;

  // Throws InputError naming the field, its value and the rule (Ceres' Options::IsValid).
  void Validate() const;
};

// How a search ended. kInfeasible: the searcher looked and no plan fits (the message says why).
// kDeclined: the searcher did not search, because it does not take this problem (exhaustive
// search over its plan limit, the ILP in a build without CBC); it says nothing about whether
// a plan exists.
enum class TerminationType {
  kOptimal,
  kConverged,
  kTimeLimit,
  kEvaluationLimit,
  kInfeasible,
  kDeclined
};
// "optimal", "converged", "time_limit", "evaluation_limit", "infeasible", "declined".
const char* TerminationTypeName(TerminationType type);

struct AnytimePoint {
  double wall_seconds = 0;
  double best_iteration_seconds = 0;
};

struct SearchSummary {
  static constexpr double kNoPlanSeconds = std::numeric_limits<double>::infinity();

  std::string algorithm;
  TerminationType termination = TerminationType::kConverged;
  std::string message;
  double best_iteration_seconds = kNoPlanSeconds;     // of the returned plan (Evaluate)
  double initial_iteration_seconds = kNoPlanSeconds;  // first feasible plan found
  std::optional<double> lower_bound_seconds;  // proven bound (DP/exhaustive: = best when optimal)
  long evaluations = 0;
  long iterations = 0;
  double wall_seconds = 0;
  double time_limit_seconds_given = 0;
  std::vector<AnytimePoint> anytime;

  // Whether a plan was found (a search stopped by its time limit may have none yet).
  bool HasPlan() const {
    return termination != TerminationType::kInfeasible &&
           termination != TerminationType::kDeclined && best_iteration_seconds < kNoPlanSeconds;
  }
  std::string BriefReport() const;  // one line
  std::string FullReport() const;   // multi-line
};

struct SearchResult {
  std::optional<Plan> plan;
  SearchSummary summary;
};

using SearchClock = std::chrono::steady_clock;

// Seconds elapsed since `start` (wall clock, steady).
double SecondsSince(SearchClock::time_point start);

// options.memory_limit_bytes, or half of the physical memory when it is 0.
double MemoryLimitBytes(const SearchOptions& options);

// The time limit as a point to poll from inside long loops (table builds, DP sweeps): Check()
// throws Deadline::Expired once it has passed, for the searcher to catch and stop with its best
// plan so far. Cheap enough to call once per row of an O(L^2) loop.
class Deadline {
 public:
  struct Expired {};
  Deadline(SearchClock::time_point start, double seconds)
      : end_(start + std::chrono::duration_cast<SearchClock::duration>(
                         std::chrono::duration<double>(seconds))) {}
  bool Passed() const { return SearchClock::now() >= end_; }
  void Check() const {
    if (Passed()) throw Expired{};
  }

 private:
  SearchClock::time_point end_;
};



// The run of one search, shared by every searcher: its clock and budget (time limit and
// evaluation budget, and the termination they give), its result and the summary's bookkeeping
// -- the first and the best fitting plan's seconds, the anytime trace and the on_improvement
// callback, the least memory-hungry plan that did not fit (for the "no plan fits" message) --
// and the end (termination, message, wall seconds). Times are seconds since construction.
class SearchRun {
 public:
  // Starts the clock; the result's summary names `algorithm` and the time limit given.
  SearchRun(const std::string& algorithm, const SearchOptions& options);
  SearchRun(const SearchRun&) = delete;
  SearchRun& operator=(const SearchRun&) = delete;

  SearchClock::time_point Start() const { return start_; }
  // The time limit as a point in time, and as a Deadline for long loops.
  SearchClock::time_point End() const { return end_; }
  Deadline MakeDeadline() const { return Deadline(start_, options_.time_limit_seconds); }
  double Elapsed() const { return SecondsSince(start_); }
  bool OutOfTime() const { return SearchClock::now() >= end_; }
  // Whether `evaluations` reach options.max_evaluations (never when it is 0, unbounded).
  bool OutOfEvaluations(long evaluations) const {
    return options_.max_evaluations > 0 && evaluations >= options_.max_evaluations;
  }
  // The budget that is spent, time first: kTimeLimit, kEvaluationLimit (by the summary's
  // evaluations), or none.
  std::optional<TerminationType> BudgetSpent() const;

  // A fitting plan of predicted `seconds` was found. The first sets the summary's initial
  // seconds; one better than every earlier is appended to the anytime trace and passed to
  // on_improvement. Returns whether it was better. The summary's best seconds and the result's
  // plan stay the searcher's to set (from Evaluate), except through Offer.
  bool NoteImprovement(double seconds);
  // A complete plan priced by Evaluate (grid, exhaustive): when it fits and beats the summary's
  // best, it becomes the result's plan and best seconds (NoteImprovement); when it does not
  // fit, it is remembered if it overflows memory least. Returns whether it became the best.
  bool Offer(const Plan& plan, const Estimate& estimate);
  // "<plan summary>: <memory violation>" of the least overflowing plan offered; "" if none.
  const std::string& LeastOverflowText() const { return least_overflow_text_; }

  SearchResult& Result() { return result_; }
  SearchSummary& Summary() { return result_.summary; }
  // Ends the run: sets the termination, the message and the wall seconds; returns the result.
  SearchResult Finish(TerminationType termination, std::string message);
  // Ends the run with the summary's termination and message as the searcher left them.
  SearchResult Finish();

 private:
  const SearchOptions& options_;
  SearchClock::time_point start_, end_;
  SearchResult result_;
  double best_noted_ = std::numeric_limits<double>::infinity();
  double least_overflow_bytes_ = std::numeric_limits<double>::infinity();
  std::string least_overflow_text_;
};

class Searcher {
 public:
  virtual ~Searcher() = default;
  virtual std::string Name() const = 0;
  virtual SearchResult Search(const Problem& problem, const SearchOptions& options) = 0;
};

}  // namespace stratos
