#include "baselines/dp_searcher.h"

#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <limits>
#include <memory>
#include <queue>

#include "baselines/explain.h"
#include "baselines/stage_table.h"
#include "costmodel/error.h"
#include "costmodel/evaluate.h"
#include "costmodel/min_plus.h"

namespace stratos {
namespace {

constexpr double kInf = std::numeric_limits<double>::infinity();

// A plan found by one G evaluation.
struct GResult {
  double sum_a = kInf;   // G(t_max, e_max)
  double max_t = -kInf;  // the plan's max_s t_s (a candidate <= t_max)
  double max_e = -kInf;  // the plan's max_s e_s (a candidate <= e_max)
  std::vector<StagePlan> stages;
};

// Solves G(t_max, e_max) = min sum_s (t_s + c_s) over plans with every t_s <= t_max and every
// e_s <= e_max.
class DpSolver {
 public:
  DpSolver(const SearchSpace& space, int num_layers, int max_stages)
      : space_(space),
        L_(num_layers),
        N_(static_cast<int>(space.mesh_sizes.size())),
        D_(space.num_devices),
        S_(max_stages) {
    f_.resize(static_cast<size_t>(S_) * (L_ + 1) * (D_ + 1), kInf);
    lo_.resize(static_cast<size_t>(S_) * (L_ + 1), D_ + 1);
  }

  // Solves for `tables` until the next Use(); the buffers are reused across microbatch counts.
  void Use(const StageFrontier& tables) {
    STRATOS_CHECK(tables.num_layers == L_ && tables.num_meshes == N_, "tables of another problem");
    tables_ = &tables;
    num_levels_ = static_cast<int>(tables.inflight.size());
    astar_.resize(static_cast<size_t>(num_levels_) * tables.NumGroups());
  }

  // Checked once per row of Solve (Deadline::Expired propagates); nullptr: never.
  void SetDeadline(const Deadline* deadline) { deadline_ = deadline; }

  GResult Solve(double t_max, double e_max) {
    FillAstar(t_max, e_max);
    const std::uint32_t* group = tables_->cell_group.data();
    // s = 0: only "all layers placed" is feasible, with any number of free devices.
    std::fill(f_.begin(), f_.begin() + static_cast<size_t>(L_ + 1) * (D_ + 1), kInf);
    std::fill(lo_.begin(), lo_.begin() + (L_ + 1), D_ + 1);
    std::fill(Row(0, L_), Row(0, L_) + D_ + 1, 0.0);
    Lo(0, L_) = 0;
    // Rows (s, i >= 1) are needed only for s <= S - 1 (some stage precedes them).
    for (int s = 1; s <= S_ - 1; ++s) {
      const double* astar = Astar(tables_->level_of_stages[s]);
      for (int i = 0; i <= L_; ++i) Lo(s, i) = D_ + 1;
      for (int i = L_ - s; i >= 1; --i) {
        if (deadline_ != nullptr) deadline_->Check();
        double* row = Row(s, i);
        std::fill(row, row + D_ + 1, kInf);
        int row_lo = D_ + 1;
        for (int j = i + 1; j <= L_ - (s - 1); ++j) {
          const int prev_lo = Lo(s - 1, j);
          if (prev_lo > D_) continue;
          const double* prev = Row(s - 1, j);
          // F is nonincreasing in the free devices d, so a mesh no cheaper than a smaller one
          // of the same cell never improves the minimum: only a strictly decreasing a counts.
          double least_a = kInf;
          for (int n = 0; n < N_; ++n) {
            const double a = astar[group[tables_->Cell(i, j, n)]];
            const int size = space_.mesh_sizes[n];
            const int start = prev_lo + size;
            if (start > D_) break;
            if (!(a < least_a)) continue;
            least_a = a;
            MinPlusInto(row + start, prev + prev_lo, a, D_ + 1 - start);
            row_lo = std::min(row_lo, start);
          }
        }
        Lo(s, i) = row_lo;
      }
    }
    // The first stage: i = 0, all devices free, s in [min_stages, S].
    GResult result;
    int best_s = 0, best_j = 0, best_n = 0;
    for (int s = std::max(1, space_.min_stages); s <= S_; ++s) {
      const double* astar = Astar(tables_->level_of_stages[s]);
      for (int j = 1; j <= L_ - (s - 1); ++j) {
        const int prev_lo = Lo(s - 1, j);
        if (prev_lo > D_) continue;
        for (int n = 0; n < N_; ++n) {
          const int size = space_.mesh_sizes[n];
          if (D_ - size < prev_lo) break;
          const double a = astar[group[tables_->Cell(0, j, n)]];
          if (a == kInf) continue;
          const double v = a + Row(s - 1, j)[D_ - size];
          if (v < result.sum_a) {
            result.sum_a = v;
            best_s = s;
            best_j = j;
            best_n = n;
          }
        }
      }
    }
    if (result.sum_a == kInf) return result;
    // Reconstruct: walk down the stages, re-finding each argmin by exact equality (the DP
    // computed every candidate with the same floating-point operations).
    int s = best_s, i = 0, d = D_, j = best_j, n = best_n;
    while (true) {
      const int level = tables_->level_of_stages[s];
      const double a = Astar(level)[group[tables_->Cell(i, j, n)]];
      const FrontierEntry& e = FindEntry(i, j, n, level, t_max, e_max, a);
      result.stages.push_back({i, j, space_.configs[e.config]});
      result.max_t = std::max(result.max_t, e.t);
      result.max_e = std::max(result.max_e, e.e);
      d -= space_.mesh_sizes[n];
      i = j;
      --s;
      if (s == 0) break;
      const double target = Row(s, i)[d];
      const double* astar = Astar(tables_->level_of_stages[s]);
      double best_gap = kInf;
      for (int jj = i + 1; jj <= L_ - (s - 1); ++jj) {
        const int prev_lo = Lo(s - 1, jj);
        if (prev_lo > D_) continue;
        for (int nn = 0; nn < N_; ++nn) {
          const int size = space_.mesh_sizes[nn];
          if (d - size < prev_lo) break;
          const double aa = astar[group[tables_->Cell(i, jj, nn)]];
          if (aa == kInf) continue;
          const double gap = std::abs(aa + Row(s - 1, jj)[d - size] - target);
          if (gap < best_gap) {
            best_gap = gap;
            j = jj;
            n = nn;
          }
        }
      }
      STRATOS_CHECK(best_gap <= 1e-9 * std::max(1.0, std::abs(target)),
                    "DP reconstruction lost the argmin at stage {} layer {} (gap {})", s, i,
                    best_gap);
    }
    STRATOS_CHECK(i == L_, "DP reconstruction ended at layer {} of {}", i, L_);
    return result;
  }

 private:
  void FillAstar(double t_max, double e_max) {
    std::vector<double> best(num_levels_ + 2);
    const size_t groups = tables_->NumGroups();
    for (size_t g = 0; g < groups; ++g) {
      const std::uint32_t begin = tables_->group_offsets[g], end = tables_->group_offsets[g + 1];
      std::fill(best.begin(), best.end(), kInf);
      for (std::uint32_t k = begin; k < end; ++k) {
        const FrontierEntry& e = tables_->entries[k];
        if (e.t > t_max) break;
        if (e.e <= e_max) best[e.level] = std::min(best[e.level], e.a);
      }
      for (int level = num_levels_ - 1; level >= 1; --level)
        best[level] = std::min(best[level], best[level + 1]);
      for (int level = 1; level <= num_levels_; ++level)
        astar_[static_cast<size_t>(level - 1) * groups + g] = best[level];
    }
  }

  const FrontierEntry& FindEntry(int i, int j, int n, int level, double t_max, double e_max,
                                 double a) const {
    const std::uint32_t g = tables_->cell_group[tables_->Cell(i, j, n)];
    for (std::uint32_t k = tables_->group_offsets[g]; k < tables_->group_offsets[g + 1]; ++k) {
      const FrontierEntry& e = tables_->entries[k];
      if (e.t > t_max) break;
      if (e.e <= e_max && e.level >= level && e.a == a) return e;
    }
    STRATOS_CHECK(false, "no configuration of cell ({}, {}, {}) has a = {}", i, j, n, a);
  }

  const double* Astar(int level) const {
    return astar_.data() + static_cast<size_t>(level - 1) * tables_->NumGroups();
  }
  double* Row(int s, int i) {
    return f_.data() + (static_cast<size_t>(s) * (L_ + 1) + i) * (D_ + 1);
  }
  int& Lo(int s, int i) { return lo_[static_cast<size_t>(s) * (L_ + 1) + i]; }

  const StageFrontier* tables_ = nullptr;
  const Deadline* deadline_ = nullptr;
  const SearchSpace& space_;
  const int L_, N_, D_, S_;
  int num_levels_ = 0;
  // (num_levels, groups): least a with t <= t_max and e <= e_max fitting the level
  std::vector<double> astar_;
  std::vector<double> f_;      // (S, L + 1, D + 1): F[s][i][d] for s < S
  std::vector<int> lo_;        // (S, L + 1): first d with F[s][i][d] finite (D + 1: none)
};


// A pending rectangle of (t_max, e_max) candidates of one microbatch count: indices
// [tl, th] x [el, eh] into StageFrontier::t_candidates x e_candidates, with a lower bound on G over
// it (G at its upper corner, or beyond it).
struct Rectangle {
  double bound;  // (m - 1) * t_candidates[tl] + e_candidates[el] + g_lower
  int tl, th, el, eh;
  double g_lower;
  bool corner;    // evaluate the upper corner (else bisect)
  bool operator>(const Rectangle& o) const { return bound > o.bound; }
};
using RectangleQueue =
    std::priority_queue<Rectangle, std::vector<Rectangle>, std::greater<Rectangle>>;

}  // namespace

SearchResult DpSearcher::Search(const Problem& problem, const SearchOptions& options) {
  const SearchClock::time_point start = SearchClock::now();
  options.Validate();
  const SearchSpace space = SearchSpace::Build(problem, options.space);
  const CostModel cost_model(problem);
  const int L = problem.NumLayers();
  const int max_stages = std::max(1, std::min({space.max_stages, L, space.num_devices}));

  SearchResult result = StartSearchResult(Name(), options);
  SearchSummary& summary = result.summary;

  double best = kInf;
  bool stopped = false;
  TerminationType stop_reason = TerminationType::kOptimal;
  SearchClock::time_point last_progress = start;

  auto out_of_budget = [&]() {
    if (SecondsSince(start) >= options.time_limit_seconds) {
      stop_reason = TerminationType::kTimeLimit;
      return true;
    }
    if (options.max_evaluations > 0 && summary.evaluations >= options.max_evaluations) {
      stop_reason = TerminationType::kEvaluationLimit;
      return true;
    }
    return false;
  };

  // Evaluates G(t_candidates[ti], e_candidates[ei]), offers its plan (Evaluate()d) as the best,
  // and returns G; *t_act, *e_act = indices of the plan's own max stage time and longest tail
  // (every candidate pair in [*t_act, ti] x [*e_act, ei] is then settled: G is constant there and
  // the objective no less than this plan's).
  auto evaluate_g = [&](DpSolver& solver, const StageFrontier& tables, int ti, int ei, int* t_act,
                        int* e_act) {
    const GResult g = solver.Solve(tables.t_candidates[ti], tables.e_candidates[ei]);
    ++summary.evaluations;
    if (g.sum_a == kInf) return kInf;
    *t_act = static_cast<int>(
        std::lower_bound(tables.t_candidates.begin(), tables.t_candidates.end(), g.max_t) -
        tables.t_candidates.begin());
    *e_act = static_cast<int>(
        std::lower_bound(tables.e_candidates.begin(), tables.e_candidates.end(), g.max_e) -
        tables.e_candidates.begin());
    Plan plan;
    plan.global_batch_size = problem.training.global_batch_size;
    plan.num_microbatches = tables.m;
    plan.schedule = problem.training.schedule;
    plan.stages = g.stages;
    const Estimate estimate = Evaluate(cost_model, plan);
    STRATOS_CHECK(estimate.Fits(), "DP plan does not fit: {} ({})", estimate.MemoryViolation(),
                  plan.Summary());
    if (summary.initial_iteration_seconds == kInf)
      summary.initial_iteration_seconds = estimate.iteration_seconds;
    if (estimate.iteration_seconds < best) {
      best = estimate.iteration_seconds;
      result.plan = plan;
      const double wall = SecondsSince(start);
      summary.anytime.push_back({wall, best});
      if (options.on_improvement) options.on_improvement(wall, best);
    }
    return g.sum_a;
  };

  auto progress = [&](const std::string& line, bool force) {
    if (!options.progress) return;
    if (!force && SecondsSince(last_progress) < 2.0) return;
    last_progress = SearchClock::now();
    std::fprintf(stderr, "[dp %8.2fs] %s\n", SecondsSince(start), line.c_str());
  };

  // Pass 1: per microbatch count, the unconstrained G (largest candidates) gives a plan and a
  // lower bound (m - 1) * t_lb + e_lb + G(inf, inf) on everything else of that m.
  struct Pending {
    int m;
    double bound;
    double g_top;  // G at the largest candidates
    int t_act;     // [t_act, top] x [e_act, top] is settled
    int e_act;
    std::shared_ptr<const StageFrontier> tables;  // kept for pass 2 while memory allows
  };
  // The tables every microbatch count needs whatever the model: decline rather than fail to
  // allocate them (or spend hours filling them).
  const int N = static_cast<int>(space.mesh_sizes.size());
  const double table_bytes =
      FrontierCellBytes(L, N) +
      (sizeof(double) * (space.num_devices + 1.0) + sizeof(int)) * max_stages * (L + 1.0);
  const double memory_limit = MemoryLimitBytes(options);
  auto decline = [&](std::string message) {
    summary.termination = TerminationType::kDeclined;
    summary.message = std::move(message);
    summary.wall_seconds = SecondsSince(start);
    return result;
  };
  if (table_bytes > memory_limit) {
    return decline(fmt::format(
        "problem too large for the DP: its tables for {} layers, {} mesh sizes, {} devices and "
        "{} stages need {:.1f} GiB, over the memory limit of {:.1f} GiB (--memory-limit)",
        L, N, space.num_devices, max_stages, table_bytes / (1u << 30), memory_limit / (1u << 30)));
  }
  // Allocating and zeroing them is work no deadline check can interrupt: at a conservative
  // 1 GiB/s (page faults included), tables that would overrun the time limit by more than a
  // second are declined.
  constexpr double kTableFillBytesPerSecond = 1024.0 * 1024.0 * 1024.0;
  const double fill_seconds = table_bytes / kTableFillBytesPerSecond;
  if (fill_seconds > options.time_limit_seconds && fill_seconds > 1.0) {
    return decline(fmt::format(
        "problem too large for the DP within the time limit: its tables for {} layers and {} "
        "mesh sizes ({:.1f} GiB) take about {:.0f} s to fill, over the {:.3g} s given "
        "(--time-limit)",
        L, N, table_bytes / (1u << 30), fill_seconds, options.time_limit_seconds));
  }
  const Deadline deadline(start, options.time_limit_seconds);

  std::vector<Pending> pending;
  bool pass1_complete = true;
  DpSolver solver(space, L, max_stages);
  solver.SetDeadline(&deadline);
  // Tables kept between the passes: a few MB per microbatch count on GPT ladders.
  constexpr double kKeptTablesBudgetBytes = 512.0 * 1024.0 * 1024.0;
  double kept_bytes = 0;
  try {
    for (int m : space.num_microbatches) {
      if (out_of_budget()) {
        stopped = true;
        pass1_complete = false;
        break;
      }
      auto shared = std::make_shared<const StageFrontier>(
          BuildStageFrontier(cost_model, space, max_stages, m, &deadline));
      const StageFrontier& tables = *shared;
      if (tables.t_candidates.empty()) continue;
      solver.Use(tables);
      const int t_top = static_cast<int>(tables.t_candidates.size()) - 1;
      const int e_top = static_cast<int>(tables.e_candidates.size()) - 1;
      int t_act = t_top, e_act = e_top;
      const double g = evaluate_g(solver, tables, t_top, e_top, &t_act, &e_act);
      if (g == kInf) continue;
      const double t_lb = std::max(tables.t_candidates.front(), tables.t_lower_bound);
      const double e_lb = std::max(tables.e_candidates.front(), tables.e_lower_bound);
      const double bound = (m - 1) * t_lb + e_lb + g;
      if (t_act > 0 || e_act > 0) {
        const double bytes = tables.Bytes();
        if (kept_bytes + bytes <= kKeptTablesBudgetBytes) {
          kept_bytes += bytes;
        } else {
          shared.reset();  // rebuilt in pass 2 if needed
        }
        pending.push_back({m, bound, g, t_act, e_act, shared});
      }
      progress(fmt::format("m={}: {} frontier entries, {} x {} candidate stage times x tails, "
                           "bound {:.6g} s, best {:.6g} s",
                           m, tables.entries.size(), tables.t_candidates.size(),
                           tables.e_candidates.size(), bound, best),
               false);
    }
  } catch (const Deadline::Expired&) {
    stopped = true;
    pass1_complete = false;
    stop_reason = TerminationType::kTimeLimit;
  }

  // Pass 2: microbatch counts by ascending bound; best-first bisection of the rectangles of
  // their (t_max, e_max) candidates.
  std::sort(pending.begin(), pending.end(),
            [](const Pending& x, const Pending& y) { return x.bound < y.bound; });
  double open_bound = kInf;  // least lower bound of the work left when stopped
  size_t current = 0;        // the pending count being searched
  try {
    for (size_t k = 0; k < pending.size() && !stopped; ++k) {
      current = k;
      const int m = pending[k].m;
      if (pending[k].bound >= best) break;  // sorted: every later m is pruned too
      if (out_of_budget()) {
        stopped = true;
        open_bound = pending[k].bound;  // the least of the remaining ones
        break;
      }
      ++summary.iterations;
      std::shared_ptr<const StageFrontier> shared = std::move(pending[k].tables);
      if (!shared)
        shared = std::make_shared<const StageFrontier>(
            BuildStageFrontier(cost_model, space, max_stages, m, &deadline));
      const StageFrontier& tables = *shared;
      const std::vector<double>& tc = tables.t_candidates;
      const std::vector<double>& ec = tables.e_candidates;
      solver.Use(tables);
      // No plan has its max below the lower bounds: candidates under them need no exploring.
      const int t_first = static_cast<int>(
          std::lower_bound(tc.begin(), tc.end(), tables.t_lower_bound) - tc.begin());
      const int e_first = static_cast<int>(
          std::lower_bound(ec.begin(), ec.end(), tables.e_lower_bound) - ec.begin());
      RectangleQueue queue;
      auto push = [&](int tl, int th, int el, int eh, double g_lower, bool corner) {
        tl = std::max(tl, t_first);
        el = std::max(el, e_first);
        if (tl > th || el > eh) return;
        queue.push({(m - 1) * tc[tl] + ec[el] + g_lower, tl, th, el, eh, g_lower, corner});
      };
      // After G(tc[tm], ec[em]) = g over rectangle r, by a plan with maxima (tc[ta], ec[ea]):
      // [ta, tm] x [ea, em] is settled; G >= g on the rest of [tl, tm] x [el, em] (g == inf: all
      // of it is infeasible), and G >= r.g_lower on the rest of r. The parts below (tm, em) try
      // their corners first only if G grew.
      auto split = [&](const Rectangle& r, int tm, int em, double g, int ta, int ea) {
        if (g < kInf) {
          ta = std::max(ta, r.tl);
          ea = std::max(ea, r.el);
          const bool progress = g > r.g_lower;
          push(r.tl, ta - 1, r.el, em, g, progress);
          push(ta, tm, r.el, ea - 1, g, progress);
        }
        push(tm + 1, r.th, r.el, r.eh, r.g_lower, true);
        push(r.tl, tm, em + 1, r.eh, r.g_lower, true);
      };
      const int t_top = static_cast<int>(tc.size()) - 1, e_top = static_cast<int>(ec.size()) - 1;
      split({0, 0, t_top, 0, e_top, 0, true}, t_top, e_top, pending[k].g_top, pending[k].t_act,
            pending[k].e_act);
      while (!queue.empty()) {
        Rectangle r = queue.top();
        if (r.bound >= best) break;
        if (out_of_budget()) {
          stopped = true;
          open_bound = r.bound;
          if (k + 1 < pending.size()) open_bound = std::min(open_bound, pending[k + 1].bound);
          break;
        }
        queue.pop();
        // Clip: candidates whose bound alone reaches the best plan need no exploring (the
        // expression of Rectangle::bound, so that r.tl and r.el always stay).
        auto t_room = [&](double t) { return (m - 1) * t + ec[r.el] + r.g_lower < best; };
        auto e_room = [&](double e) { return (m - 1) * tc[r.tl] + e + r.g_lower < best; };
        r.th = static_cast<int>(
            std::partition_point(tc.begin() + r.tl, tc.begin() + r.th + 1, t_room) - tc.begin() -
            1);
        r.eh = static_cast<int>(
            std::partition_point(ec.begin() + r.el, ec.begin() + r.eh + 1, e_room) - ec.begin() -
            1);
        // Evaluate the upper corner: G there bounds the whole rectangle, and its plan settles a
        // block of it. Where the corner brought no progress (the parent's G did not grow), bisect
        // instead, along the dimension whose span weighs more in the objective.
        int tm = r.th, em = r.eh;
        if (!r.corner) {
          if (r.th > r.tl && (m - 1) * (tc[r.th] - tc[r.tl]) >= ec[r.eh] - ec[r.el])
            tm = r.tl + (r.th - r.tl) / 2;
          else if (r.eh > r.el)
            em = r.el + (r.eh - r.el) / 2;
        }
        int ta = tm, ea = em;
        const double g = evaluate_g(solver, tables, tm, em, &ta, &ea);
        split(r, tm, em, g, ta, ea);
        progress(fmt::format("m={}: {} G evaluations, {} open rectangles, best {:.6g} s", m,
                             summary.evaluations, queue.size(), best),
                 false);
      }
    }
  } catch (const Deadline::Expired&) {
    // Whatever was left of this count and the later ones is bounded by this count's bound.
    stopped = true;
    stop_reason = TerminationType::kTimeLimit;
    open_bound = std::min(open_bound, pending[current].bound);
  }

  summary.wall_seconds = SecondsSince(start);
  summary.best_iteration_seconds = best;
  if (!stopped) {
    if (result.plan) {
      summary.termination = TerminationType::kOptimal;
      summary.lower_bound_seconds = best;
      summary.message = fmt::format("optimal over {} microbatch counts: {}",
                                    space.num_microbatches.size(), result.plan->Summary());
    } else {
      summary.termination = TerminationType::kInfeasible;
      summary.message = ExplainNoFeasiblePlan(cost_model, space, max_stages);
    }
  } else {
    summary.termination = stop_reason;
    // Microbatch counts that pass 1 never reached have no bound.
    if (result.plan && pass1_complete) summary.lower_bound_seconds = std::min(best, open_bound);
    summary.message = fmt::format(
        "stopped by the {} after {} G evaluations{}; best plan so far: {}",
        stop_reason == TerminationType::kTimeLimit ? "time limit" : "evaluation limit",
        summary.evaluations, pass1_complete ? "" : " (not every microbatch count was reached)",
        result.plan ? result.plan->Summary() : std::string("none"));
  }
  progress(summary.BriefReport(), true);
  return result;
}

}  // namespace stratos
