#include "search/searcher.h"

#include <fmt/format.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <limits>

#include "costmodel/error.h"

namespace stratos {

void SearchOptions::Validate() const {
  // Named as in specs and --option (experiments/searchers.h).
  if (!(time_limit_seconds > 0) || !std::isfinite(time_limit_seconds)) {
    ThrowOptionError("search.time_limit_seconds", time_limit_seconds, "must be > 0 and finite");
  }
  if (max_evaluations < 0) {
    ThrowOptionError("search.max_evaluations", max_evaluations, "must be >= 0 (0 = unbounded)");
  }
  if (threads < 1) {
    ThrowOptionError("search.threads", threads, "must be >= 1");
  }
  if (!(memory_limit_bytes >= 0) || !std::isfinite(memory_limit_bytes)) {
    ThrowOptionError("search.memory_limit_bytes", memory_limit_bytes,
                     "must be >= 0 and finite (0 = half of the physical memory)");
  }
  space.Validate();
}

double MemoryLimitBytes(const SearchOptions& options) {
  if (options.memory_limit_bytes > 0) return options.memory_limit_bytes;
  const long pages = sysconf(_SC_PHYS_PAGES), page = sysconf(_SC_PAGE_SIZE);
  if (pages <= 0 || page <= 0) return 4.0 * (1ull << 30);  // unknown: 4 GiB
  return 0.5 * static_cast<double>(pages) * static_cast<double>(page);
}

const char* TerminationTypeName(TerminationType type) {
  switch (type) {
    case TerminationType::kOptimal:
      return "optimal";
    case TerminationType::kConverged:
      return "converged";
    case TerminationType::kTimeLimit:
      return "time_limit";
    case TerminationType::kEvaluationLimit:
      return "evaluation_limit";
    case TerminationType::kInfeasible:
      return "infeasible";
    case TerminationType::kDeclined:
      return "declined";
  }
  return "unknown";
}

namespace {

std::string Seconds(double seconds) {
  if (!std::isfinite(seconds)) return "inf";
  return fmt::format("{:.6g}", seconds);
}

}  // namespace

std::string SearchSummary::BriefReport() const {
  std::string best = HasPlan() ? Seconds(best_iteration_seconds) + " s" : "none";
  return fmt::format("{}: {}, best {}, {} evaluations, {:.3f} s wall", algorithm,
                     TerminationTypeName(termination), best, evaluations, wall_seconds);
}

std::string SearchSummary::FullReport() const {
  std::string out;
  auto row = [&out](const std::string& name, const std::string& value) {
    out += fmt::format("{:<34}{}\n", name, value);
  };
  out += "\nSearch Report\n-------------\n";
  row("Algorithm", algorithm);
  row("Termination", TerminationTypeName(termination));
  if (!message.empty()) row("Message", message);
  out += "\nCost (predicted iteration seconds)\n";
  row("  Best", HasPlan() ? Seconds(best_iteration_seconds) : std::string("none"));
  row("  Initial", Seconds(initial_iteration_seconds));
  if (lower_bound_seconds) {
    row("  Lower bound", Seconds(*lower_bound_seconds));
    if (HasPlan() && std::isfinite(best_iteration_seconds) && best_iteration_seconds > 0) {
      double gap = (best_iteration_seconds - *lower_bound_seconds) / best_iteration_seconds;
      row("  Gap", fmt::format("{:.4f} %", 100.0 * std::max(0.0, gap)));
    }
  } else {
    row("  Lower bound", "none");
  }
  out += "\nWork\n";
  row("  Evaluations", fmt::format("{}", evaluations));
  row("  Iterations", fmt::format("{}", iterations));
  row("  Improvements", fmt::format("{}", anytime.size()));
  out += "\nTime (in seconds)\n";
  row("  Wall", fmt::format("{:.6f}", wall_seconds));
  row("  Time limit given", Seconds(time_limit_seconds_given));
  if (!anytime.empty()) {
    out += "\nAnytime trace (wall s, best s)\n";
    for (const AnytimePoint& p : anytime) {
      out += fmt::format("  {:>12.6f}  {}\n", p.wall_seconds, Seconds(p.best_iteration_seconds));
    }
  }
  return out;
}

double SecondsSince(SearchClock::time_point start) {
  return std::chrono::duration<double>(SearchClock::now() - start).count();
}


SearchRun::SearchRun(const std::string& algorithm, const SearchOptions& options)
    : options_(options),
      start_(SearchClock::now()),
      end_(start_ + std::chrono::duration_cast<SearchClock::duration>(
                        std::chrono::duration<double>(options.time_limit_seconds))),
      result_() {
  result_.summary.algorithm = algorithm;
  result_.summary.time_limit_seconds_given = options.time_limit_seconds;
}

std::optional<TerminationType> SearchRun::BudgetSpent() const {
  if (OutOfTime()) return TerminationType::kTimeLimit;
  if (OutOfEvaluations(result_.summary.evaluations)) return TerminationType::kEvaluationLimit;
  return std::nullopt;
}

bool SearchRun::NoteImprovement(double seconds) {
  SearchSummary& summary = result_.summary;
  if (!std::isfinite(summary.initial_iteration_seconds))
    summary.initial_iteration_seconds = seconds;
  if (!(seconds < best_noted_)) return false;
  best_noted_ = seconds;
  const double wall = Elapsed();
  summary.anytime.push_back({wall, seconds});
  if (options_.on_improvement) options_.on_improvement(wall, seconds);
  return true;
}

bool SearchRun::Offer(const Plan& plan, const Estimate& estimate) {
  SearchSummary& summary = result_.summary;
  if (!estimate.Fits()) {
    double overflow = 0;
    for (const StageEstimate& stage : estimate.stages)
      overflow = std::max(overflow, -stage.MemoryHeadroomBytes());
    if (overflow < least_overflow_bytes_) {
      least_overflow_bytes_ = overflow;
      least_overflow_text_ = fmt::format("{}: {}", plan.Summary(), estimate.MemoryViolation());
    }
    return false;
  }
  if (!(estimate.iteration_seconds < summary.best_iteration_seconds)) {
    if (!std::isfinite(summary.initial_iteration_seconds))
      summary.initial_iteration_seconds = estimate.iteration_seconds;
    return false;
  }
  summary.best_iteration_seconds = estimate.iteration_seconds;
  result_.plan = plan;
  NoteImprovement(estimate.iteration_seconds);
  return true;
}

SearchResult SearchRun::Finish(TerminationType termination, std::string message) {
  result_.summary.termination = termination;
  result_.summary.message = std::move(message);
  return Finish();
}

SearchResult SearchRun::Finish() {
  result_.summary.wall_seconds = Elapsed();
  return result_;
}

}  // namespace stratos
