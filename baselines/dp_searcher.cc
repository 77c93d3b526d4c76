#include "baselines/dp_searcher.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <array>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <iterator>
#include <limits>
#include <map>
#include <memory>
#include <queue>
#include <tuple>

#include "baselines/explain.h"
#include "baselines/stage_frontier.h"
#include "costmodel/error.h"
#include "costmodel/evaluate.h"
#include "costmodel/interleaved_cost_model.h"
#include "costmodel/min_plus.h"
#include "search/interleaving_searcher.h"

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

// astar[(level - 1) * groups + g] = the least a (t + c) among frontier group g's entries with
// t <= t_max and e <= e_max that fit at least `level` in-flight counts; inf where none does.
// `astar` is resized to (levels, groups).
void FillLeastCosts(const StageFrontier& tables, double t_max, double e_max,
                    std::vector<double>& astar) {
  const int num_levels = static_cast<int>(tables.inflight.size());
  const size_t groups = tables.NumGroups();
  astar.resize(static_cast<size_t>(num_levels) * groups);
  std::vector<double> best(num_levels + 2);
  for (size_t g = 0; g < groups; ++g) {
    const std::uint32_t begin = tables.group_offsets[g], end = tables.group_offsets[g + 1];
    std::fill(best.begin(), best.end(), kInf);
    for (std::uint32_t k = begin; k < end; ++k) {
      const FrontierEntry& e = tables.entries[k];
      if (e.t > t_max) break;
      if (e.e <= e_max) best[e.level] = std::min(best[e.level], e.a);
    }
    for (int level = num_levels - 1; level >= 1; --level)
      best[level] = std::min(best[level], best[level + 1]);
    for (int level = 1; level <= num_levels; ++level)
      astar[static_cast<size_t>(level - 1) * groups + g] = best[level];
  }
}

// The configuration of cell (i, j, n) whose a FillLeastCosts chose for `level` within the
// maxima. Throws InternalError if none has exactly `a` (the DP's reconstruction lost it).
const FrontierEntry& FindEntry(const StageFrontier& tables, int i, int j, int n, int level,
                               double t_max, double e_max, double a) {
  const std::uint32_t g = tables.cell_group[tables.Cell(i, j, n)];
  for (std::uint32_t k = tables.group_offsets[g]; k < tables.group_offsets[g + 1]; ++k) {
    const FrontierEntry& e = tables.entries[k];
    if (e.t > t_max) break;
    if (e.e <= e_max && e.level >= level && e.a == a) return e;
  }
  STRATOS_CHECK(false, "no configuration of cell ({}, {}, {}) has a = {}", i, j, n, a);
}

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
  // With exact_stages > 0 only plans of that many stages, whose levels are `levels` (index s:
  // the level of a stage with s stages from it to the end); else tables.level_of_stages.
  void Use(const StageFrontier& tables, const std::vector<int>* levels = nullptr,
           int exact_stages = 0) {
    STRATOS_CHECK(tables.num_layers == L_ && tables.num_meshes == N_, "tables of another problem");
    STRATOS_CHECK(exact_stages <= S_ && (levels == nullptr || static_cast<int>(levels->size()) >
                                                                   std::max(exact_stages, 0)),
                  "{} stages of at most {}", exact_stages, S_);
    tables_ = &tables;
    levels_ = levels != nullptr ? levels : &tables.level_of_stages;
    top_ = exact_stages > 0 ? exact_stages : S_;
    exact_ = exact_stages > 0;
  }

  // Checked once per row of Solve (Deadline::Expired propagates); nullptr: never.
  void SetDeadline(const Deadline* deadline) { deadline_ = deadline; }

  GResult Solve(double t_max, double e_max) {
    FillLeastCosts(*tables_, t_max, e_max, astar_);
    const std::uint32_t* group = tables_->cell_group.data();
    // s = 0: only "all layers placed" is feasible, with any number of free devices.
    std::fill(f_.begin(), f_.begin() + static_cast<size_t>(L_ + 1) * (D_ + 1), kInf);
    std::fill(lo_.begin(), lo_.begin() + (L_ + 1), D_ + 1);
    std::fill(Row(0, L_), Row(0, L_) + D_ + 1, 0.0);
    Lo(0, L_) = 0;
    // Rows (s, i >= 1) are needed only for s <= top - 1 (some stage precedes them).
    for (int s = 1; s <= top_ - 1; ++s) {
      const double* astar = Astar((*levels_)[s]);
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
    // The first stage: i = 0, all devices free, s in [min_stages, top] (only top when exact).
    GResult result;
    int best_s = 0, best_j = 0, best_n = 0;
    for (int s = exact_ ? top_ : std::max(1, space_.min_stages); s <= top_; ++s) {
      const double* astar = Astar((*levels_)[s]);
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
      const int level = (*levels_)[s];
      const double a = Astar(level)[group[tables_->Cell(i, j, n)]];
      const FrontierEntry& e = FindEntry(*tables_, i, j, n, level, t_max, e_max, a);
      result.stages.push_back({i, j, space_.configs[e.config]});
      result.max_t = std::max(result.max_t, e.t);
      result.max_e = std::max(result.max_e, e.e);
      d -= space_.mesh_sizes[n];
      i = j;
      --s;
      if (s == 0) break;
      const double target = Row(s, i)[d];
      const double* astar = Astar((*levels_)[s]);
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
  const double* Astar(int level) const {
    return astar_.data() + static_cast<size_t>(level - 1) * tables_->NumGroups();
  }
  double* Row(int s, int i) {
    return f_.data() + (static_cast<size_t>(s) * (L_ + 1) + i) * (D_ + 1);
  }
  int& Lo(int s, int i) { return lo_[static_cast<size_t>(s) * (L_ + 1) + i]; }

  const StageFrontier* tables_ = nullptr;
  const std::vector<int>* levels_ = nullptr;
  int top_ = 0;         // the most stages solved for
  bool exact_ = false;  // only plans of top_ stages
  const Deadline* deadline_ = nullptr;
  const SearchSpace& space_;
  const int L_, N_, D_, S_;
  // (num_levels, groups): least a with t <= t_max and e <= e_max fitting the level
  std::vector<double> astar_;
  std::vector<double> f_;      // (S, L + 1, D + 1): F[s][i][d] for s < S
  std::vector<int> lo_;        // (S, L + 1): first d with F[s][i][d] finite (D + 1: none)
};


// What the search over (t_max, e_max) needs of one unit of work -- a microbatch count, and on a
// heterogeneous cluster one order of the node groups along the pipeline: the candidate maxima,
// lower bounds on them, and G.
class GOracle {
 public:
  virtual ~GOracle() = default;
  virtual int m() const = 0;
  // v: the plans' virtual stages per pipeline rank (their objective weighs max t by m - 1/v).
  virtual int VirtualStages() const { return 1; }
  virtual const std::vector<double>& TCandidates() const = 0;
  virtual const std::vector<double>& ECandidates() const = 0;
  virtual double TLowerBound() const = 0;
  virtual double ELowerBound() const = 0;
  virtual GResult Solve(double t_max, double e_max) = 0;
  virtual double Bytes() const = 0;
  // e.g. "m=4: 120 frontier entries" (progress lines).
  virtual std::string Describe() const = 0;
};

// A microbatch count on a homogeneous cluster: one frontier, solved by the shared DpSolver. With
// virtual stages (tables->virtual_stages > 1), plans of exactly `num_stages` pipeline ranks.
class HomogeneousOracle : public GOracle {
 public:
  HomogeneousOracle(std::shared_ptr<const StageFrontier> tables, DpSolver& solver,
                    int num_stages = 0)
      : tables_(std::move(tables)),
        solver_(solver),
        num_stages_(num_stages),
        levels_(num_stages > 0 ? tables_->LevelsOfStages(num_stages) : std::vector<int>{}) {}
  int m() const override { return tables_->m; }
  int VirtualStages() const override { return tables_->virtual_stages; }
  const std::vector<double>& TCandidates() const override { return tables_->t_candidates; }
  const std::vector<double>& ECandidates() const override { return tables_->e_candidates; }
  double TLowerBound() const override { return tables_->t_lower_bound; }
  double ELowerBound() const override { return tables_->e_lower_bound; }
  GResult Solve(double t_max, double e_max) override {
    solver_.Use(*tables_, num_stages_ > 0 ? &levels_ : nullptr, num_stages_);
    return solver_.Solve(t_max, e_max);
  }
  double Bytes() const override { return tables_->Bytes(); }
  std::string Describe() const override {
    if (num_stages_ > 0)
      return fmt::format("m={}, {} ranks x {} virtual stages: {} frontier entries", tables_->m,
                         num_stages_, tables_->virtual_stages, tables_->entries.size());
    return fmt::format("m={}: {} frontier entries", tables_->m, tables_->entries.size());
  }

 private:
  std::shared_ptr<const StageFrontier> tables_;
  DpSolver& solver_;
  int num_stages_;           // > 0: plans of exactly this many stages
  std::vector<int> levels_;  // their levels (StageFrontier::LevelsOfStages)
};

// Frontiers of one microbatch count on a heterogeneous cluster, by (node group, group it
// receives from, group it sends to; -1: its own), shared by the orders that need them.
using FrontierCache = std::map<std::tuple<int, int, int>, std::shared_ptr<const StageFrontier>>;

// A microbatch count and an order of node groups (g_0, ..., g_{k-1}) on a heterogeneous
// cluster: the stages run through every group of the order once, in that order. G is the DP
//   F[j][s][i][d] = min over the stage [i, l) on a mesh n <= d of group g_j of
//                   A + F[j][s-1][l][d-n]                     (the next stage in g_j), or
//                   A' + F[j+1][s-1][l][devices of g_{j+1}]   (the next stage in g_{j+1}),
// with d the devices of g_j still free and s the stages from layer i to the end (the in-flight
// level, as DpSolver). A stage's terms depend on whether it receives from the previous group
// (the first of its run, d = all of g_j, j > 0) and sends to the next (A'): four frontiers per
// group of the order (StageTable's neighbours). F[k-1][0][L][d] = 0, and G = min over s of
// F[0][s][0][devices of g_0].
class HeteroOracle : public GOracle {
 public:
  HeteroOracle(const CostModel& cost_model, const std::vector<SearchSpace>& group_spaces,
               std::vector<int> order, int min_stages, int max_stages, int m,
               const Deadline* deadline, FrontierCache& cache, std::vector<double>& buffer)
      : group_spaces_(group_spaces),
        order_(std::move(order)),
        k_(static_cast<int>(order_.size())),
        L_(cost_model.problem().NumLayers()),
        S_(max_stages),
        min_stages_(min_stages),
        m_(m),
        f_(buffer),
        frontier_(k_),
        astar_(k_) {
    for (int j = 0; j < k_; ++j) {
      const int g = order_[j];
      devices_.push_back(group_spaces_[g].num_devices);
      offsets_.push_back(j == 0 ? 0
                                : offsets_[j - 1] + static_cast<size_t>(S_ + 1) * (L_ + 1) *
                                                        (devices_[j - 1] + 1));
      for (int pk = 0; pk < 2; ++pk)
        for (int nk = 0; nk < 2; ++nk) {
          if ((pk == 1 && j == 0) || (nk == 1 && j == k_ - 1)) continue;
          const int previous = pk ? order_[j - 1] : -1;
          const int next = nk ? order_[j + 1] : -1;
          std::shared_ptr<const StageFrontier>& cached = cache[{g, previous, next}];
          if (!cached)
            cached = std::make_shared<const StageFrontier>(BuildStageFrontier(
                cost_model, group_spaces_[g], S_, m, deadline, previous, next));
          frontier_[j][pk][nk] = cached;
          for (double t : cached->t_candidates) t_candidates_.push_back(t);
          for (double e : cached->e_candidates) e_candidates_.push_back(e);
        }
    }
    total_ = offsets_.back() + static_cast<size_t>(S_ + 1) * (L_ + 1) * (devices_.back() + 1);
    for (std::vector<double>* v : {&t_candidates_, &e_candidates_}) {
      std::sort(v->begin(), v->end());
      v->erase(std::unique(v->begin(), v->end()), v->end());
    }
  }

  int m() const override { return m_; }
  const std::vector<double>& TCandidates() const override { return t_candidates_; }
  const std::vector<double>& ECandidates() const override { return e_candidates_; }
  double TLowerBound() const override { return 0.0; }
  double ELowerBound() const override { return 0.0; }
  double Bytes() const override {
    double bytes = 0;
    for (int j = 0; j < k_; ++j)
      for (int pk = 0; pk < 2; ++pk)
        for (int nk = 0; nk < 2; ++nk)
          if (frontier_[j][pk][nk]) bytes += frontier_[j][pk][nk]->Bytes();
    return bytes;
  }
  std::string Describe() const override {
    std::string groups;
    for (int g : order_)
      groups += fmt::format("{}{}", groups.empty() ? "" : ">", g);
    return fmt::format("m={}, groups {}: {} x {} candidates", m_, groups, t_candidates_.size(),
                       e_candidates_.size());
  }

  GResult Solve(double t_max, double e_max) override {
    FillAstar(t_max, e_max);
    f_.assign(total_, kInf);
    const int last = k_ - 1;
    std::fill(Row(last, 0, L_), Row(last, 0, L_) + devices_[last] + 1, 0.0);
    const std::vector<int>& level_of_stages = AnyFrontier().level_of_stages;
    std::vector<double> least;  // least constant offered at each mesh size (moves, last stages)
    for (int s = 1; s <= S_; ++s) {
      const int level = level_of_stages[s];
      for (int j = last; j >= 0; --j) {
        const int D = devices_[j];
        const std::vector<int>& sizes = group_spaces_[order_[j]].mesh_sizes;
        const int full_kind = j > 0 ? 1 : 0;  // a stage entering the group receives from j - 1
        for (int i = j == 0 ? 0 : 1; i <= L_ - s; ++i) {
          if (i == 0 && s < min_stages_) continue;
          double* row = Row(j, s, i);
          least.assign(D + 1, kInf);
          double full = kInf;  // row[D]: the first stage of the run
          for (int l = i + 1; l <= L_ - (s - 1); ++l) {
            if (l == L_ && (s != 1 || j != last)) continue;
            if (l < L_ && s == 1) continue;
            for (size_t n = 0; n < sizes.size(); ++n) {
              const int size = sizes[n];
              if (size > D) break;
              const int ni = static_cast<int>(n);
              if (l == L_) {
                least[size] = std::min(least[size], A(j, 0, 0, i, l, ni, level));
                full = std::min(full, A(j, full_kind, 0, i, l, ni, level));
                continue;
              }
              const double* stay = Row(j, s - 1, l);
              const double a = A(j, 0, 0, i, l, ni, level);
              if (a < kInf && size < D) MinPlusInto(row + size, stay, a, D - size);
              full = std::min(full, A(j, full_kind, 0, i, l, ni, level) + stay[D - size]);
              if (j < last) {
                const double next = Row(j + 1, s - 1, l)[devices_[j + 1]];
                if (next == kInf) continue;
                least[size] = std::min(least[size], A(j, 0, 1, i, l, ni, level) + next);
                full = std::min(full, A(j, full_kind, 1, i, l, ni, level) + next);
              }
            }
          }
          double running = kInf;
          for (int d = 0; d < D; ++d) {
            running = std::min(running, least[d]);
            row[d] = std::min(row[d], running);
          }
          row[D] = full;
        }
      }
    }
    GResult result;
    int best_s = 0;
    for (int s = std::max(1, min_stages_); s <= S_; ++s) {
      const double v = Row(0, s, 0)[devices_[0]];
      if (v < result.sum_a) {
        result.sum_a = v;
        best_s = s;
      }
    }
    if (result.sum_a == kInf) return result;
    Reconstruct(best_s, t_max, e_max, result);
    return result;
  }

 private:
  const StageFrontier& AnyFrontier() const { return *frontier_[0][0][0]; }

  void FillAstar(double t_max, double e_max) {
    for (int j = 0; j < k_; ++j)
      for (int pk = 0; pk < 2; ++pk)
        for (int nk = 0; nk < 2; ++nk)
          if (frontier_[j][pk][nk])
            FillLeastCosts(*frontier_[j][pk][nk], t_max, e_max, astar_[j][pk][nk]);
  }

  // Least t + c of a stage [i, l) on mesh n of group order_[j] (receiving from the previous group
  // when pk, sending to the next when nk) that fits `level` within the maxima; inf if none.
  double A(int j, int pk, int nk, int i, int l, int n, int level) const {
    const StageFrontier& tables = *frontier_[j][pk][nk];
    return astar_[j][pk][nk][static_cast<size_t>(level - 1) * tables.NumGroups() +
                             tables.cell_group[tables.Cell(i, l, n)]];
  }

  // Walks the argmins down from F[0][best_s][0][all], re-finding each by recomputing its
  // candidates with the same floating-point operations.
  void Reconstruct(int best_s, double t_max, double e_max, GResult& result) {
    const std::vector<int>& level_of_stages = AnyFrontier().level_of_stages;
    int j = 0, s = best_s, i = 0, d = devices_[0];
    while (s > 0) {
      const double target = Row(j, s, i)[d];
      const int level = level_of_stages[s];
      const int pk = j > 0 && d == devices_[j] ? 1 : 0;
      const std::vector<int>& sizes = group_spaces_[order_[j]].mesh_sizes;
      double best_gap = kInf;
      int bl = -1, bn = -1, bnk = 0;
      for (int l = i + 1; l <= L_ - (s - 1); ++l) {
        for (size_t n = 0; n < sizes.size(); ++n) {
          const int size = sizes[n];
          if (size > d) break;
          const int ni = static_cast<int>(n);
          for (int nk = 0; nk < 2; ++nk) {
            double v = kInf;
            if (l == L_) {
              if (nk == 1 || s != 1 || j != k_ - 1) continue;
              v = A(j, pk, 0, i, l, ni, level);
            } else if (s >= 2 && nk == 0) {
              v = A(j, pk, 0, i, l, ni, level) + Row(j, s - 1, l)[d - size];
            } else if (s >= 2 && nk == 1 && j < k_ - 1) {
              v = A(j, pk, 1, i, l, ni, level) + Row(j + 1, s - 1, l)[devices_[j + 1]];
            }
            if (v == kInf) continue;
            const double gap = std::abs(v - target);
            if (gap < best_gap) {
              best_gap = gap;
              bl = l;
              bn = ni;
              bnk = nk;
            }
          }
        }
      }
      STRATOS_CHECK(bl >= 0 && best_gap <= 1e-9 * std::max(1.0, std::abs(target)),
                    "heterogeneous DP reconstruction lost the argmin at stage {} layer {}", s, i);
      const double a = A(j, pk, bnk, i, bl, bn, level);
      const FrontierEntry& found =
          FindEntry(*frontier_[j][pk][bnk], i, bl, bn, level, t_max, e_max, a);
      result.stages.push_back({i, bl, group_spaces_[order_[j]].configs[found.config]});
      result.max_t = std::max(result.max_t, found.t);
      result.max_e = std::max(result.max_e, found.e);
      if (bnk == 1) {
        ++j;
        d = devices_[j];
      } else {
        d -= sizes[bn];
      }
      i = bl;
      --s;
    }
    STRATOS_CHECK(i == L_ && j == k_ - 1, "heterogeneous DP reconstruction ended at layer {}", i);
  }

  double* Row(int j, int s, int i) {
    return f_.data() + offsets_[j] + (static_cast<size_t>(s) * (L_ + 1) + i) * (devices_[j] + 1);
  }

  const std::vector<SearchSpace>& group_spaces_;
  const std::vector<int> order_;
  const int k_, L_, S_, min_stages_, m_;
  std::vector<double>& f_;  // shared by the orders: one DP at a time
  std::vector<int> devices_;
  std::vector<size_t> offsets_;
  size_t total_ = 0;
  // Per position j of the order, [receives from j - 1][sends to j + 1].
  using Variants = std::array<std::array<std::shared_ptr<const StageFrontier>, 2>, 2>;
  std::vector<Variants> frontier_;
  std::vector<std::array<std::array<std::vector<double>, 2>, 2>> astar_;
  std::vector<double> t_candidates_, e_candidates_;
};

// A pending rectangle of (t_max, e_max) candidates of one microbatch count: indices
// [tl, th] x [el, eh] into StageFrontier::t_candidates x e_candidates, with a lower bound on G over
// it (G at its upper corner, or beyond it).
struct Rectangle {
  double bound;  // w * t_candidates[tl] + e_candidates[el] + g_lower (w: Unit::Weight)
  int tl, th, el, eh;
  double g_lower;
  bool corner;    // evaluate the upper corner (else bisect)
  bool operator>(const Rectangle& o) const { return bound > o.bound; }
};
using RectangleQueue =
    std::priority_queue<Rectangle, std::vector<Rectangle>, std::greater<Rectangle>>;

}  // namespace

SearchResult DpSearcher::Search(const Problem& problem, const SearchOptions& options) {
  options.Validate();
  // Interleaving the DP does not price exactly: its plain optimum, offered interleaved.
  const std::vector<int> exact_virtual_stages =
      ExactVirtualStages(problem, options.space.virtual_stages);
  if (!plain_only_ && options.space.OffersInterleaving() && exact_virtual_stages.size() == 1)
    return InterleavingSearcher(std::make_unique<DpSearcher>(true)).Search(problem, options);
  SearchRun run(Name(), options);
  const SearchSpace space = SearchSpace::Build(problem, options.space);
  const CostModel cost_model(problem);
  const int L = problem.NumLayers();
  const int max_stages = std::max(1, std::min({space.max_stages, L, space.num_devices}));
  const bool heterogeneous = space.Heterogeneous();

  SearchResult& result = run.Result();
  SearchSummary& summary = run.Summary();

  double best = kInf;
  bool stopped = false;
  TerminationType stop_reason = TerminationType::kOptimal;
  SearchClock::time_point last_progress = run.Start();

  auto out_of_budget = [&]() {
    const std::optional<TerminationType> spent = run.BudgetSpent();
    if (spent) stop_reason = *spent;
    return spent.has_value();
  };

  // Evaluates G(t_candidates[ti], e_candidates[ei]) of `oracle`, offers its plan (Evaluate()d)
  // as the best, and returns G; *t_act, *e_act = indices of the plan's own max stage time and
  // longest tail (every candidate pair in [*t_act, ti] x [*e_act, ei] is then settled: G is
  // constant there and the objective no less than this plan's).
  auto evaluate_g = [&](GOracle& oracle, int ti, int ei, int* t_act, int* e_act) {
    const std::vector<double>& tc = oracle.TCandidates();
    const std::vector<double>& ec = oracle.ECandidates();
    const GResult g = oracle.Solve(tc[ti], ec[ei]);
    ++summary.evaluations;
    if (g.sum_a == kInf) return kInf;
    *t_act = static_cast<int>(std::lower_bound(tc.begin(), tc.end(), g.max_t) - tc.begin());
    *e_act = static_cast<int>(std::lower_bound(ec.begin(), ec.end(), g.max_e) - ec.begin());
    Plan plan;
    plan.global_batch_size = problem.training.global_batch_size;
    plan.num_microbatches = oracle.m();
    plan.schedule = problem.training.schedule;
    plan.stages = g.stages;
    const int v = oracle.VirtualStages();
    if (v > 1) {
      const std::optional<Plan> interleaved = InterleavePlan(plan, v);
      STRATOS_CHECK(interleaved.has_value(), "the DP's plan {} has no {} virtual stages",
                    plan.Summary(), v);
      plan = *interleaved;
    }
    const Estimate estimate = Evaluate(cost_model, plan);
    STRATOS_CHECK(estimate.Fits(), "DP plan does not fit: {} ({})", estimate.MemoryViolation(),
                  plan.Summary());
    // The DP priced its stages as Evaluate() does (StageTable): the same sum of t_s / v + c_s
    // and the same slowest stage, up to the order of the additions (with v > 1 each pipeline
    // rank holds the same layers' costs as the DP's stage: InterleavesExactly).
    double sum_a = 0.0, max_t = 0.0;
    for (const StageEstimate& stage : estimate.stages) {
      sum_a += stage.microbatch_seconds / v + stage.one_time_seconds;
      max_t = std::max(max_t, stage.microbatch_seconds);
    }
    STRATOS_CHECK(std::abs(sum_a - g.sum_a) <= 1e-9 * std::abs(sum_a) &&
                      std::abs(max_t - g.max_t) <= 1e-9 * max_t,
                  "the DP priced {} at sum {} and max {}; Evaluate() at {} and {}", plan.Summary(),
                  g.sum_a, g.max_t, sum_a, max_t);
    if (run.NoteImprovement(estimate.iteration_seconds)) {
      best = estimate.iteration_seconds;
      result.plan = plan;
    }
    return g.sum_a;
  };

  auto progress = [&](const std::string& line, bool force) {
    if (!options.progress) return;
    if (!force && SecondsSince(last_progress) < 2.0) return;
    last_progress = SearchClock::now();
    std::fprintf(stderr, "[dp %8.2fs] %s\n", run.Elapsed(), line.c_str());
  };

  // Units of work: the microbatch counts, and on a heterogeneous cluster each with every order of
  // a nonempty subset of the node groups (the stages visit the groups in runs).
  // With virtual stages v > 1 offered (and priced exactly: InterleavesExactly), units of
  // exactly p pipeline ranks of v chunks, for every p from 2 to max_stages with p v <= L.
  struct Unit {
    int m;
    std::vector<int> order;
    int v = 1;
    int p = 0;  // v > 1: the plans' pipeline ranks
    // The objective's weight of the slowest stage: m - 1/v (m - 1 exactly for v = 1).
    double Weight() const { return m - 1.0 / v; }
  };
  std::vector<Unit> units;
  const std::vector<std::vector<int>> orders = space.GroupOrders();
  const bool interleave_here = !plain_only_ && exact_virtual_stages.size() > 1;
  for (int m : space.num_microbatches) {
    if (!heterogeneous) units.push_back({m, {}});
    for (const std::vector<int>& order : orders) units.push_back({m, order});
    for (int v : exact_virtual_stages)
      for (int p = std::max(2, space.min_stages); interleave_here && v > 1 && p <= max_stages &&
                                                  p * v <= L;
           ++p)
        units.push_back({m, {}, v, p});
  }
  // The cost models and frontiers of the virtual stages (each v's stage overheads send v times),
  // shared by the units of one microbatch count.
  std::map<int, InterleavedCostModel> interleaved_models;
  std::map<std::pair<int, int>, std::shared_ptr<const StageFrontier>> interleaved_frontiers;
  // Each group's own configurations and mesh sizes, for the heterogeneous frontiers.
  std::vector<SearchSpace> group_spaces;
  for (size_t g = 0; heterogeneous && g < space.group_devices.size(); ++g) {
    SearchSpace own = space;
    own.configs.clear();
    own.mesh_sizes.clear();
    for (const StageConfig& config : space.configs)
      if (config.node_group == static_cast<int>(g)) {
        own.configs.push_back(config);
        own.mesh_sizes.push_back(config.NumDevices());
      }
    std::sort(own.mesh_sizes.begin(), own.mesh_sizes.end());
    own.mesh_sizes.erase(std::unique(own.mesh_sizes.begin(), own.mesh_sizes.end()),
                         own.mesh_sizes.end());
    own.num_devices = space.group_devices[g];
    own.group_devices = {own.num_devices};
    group_spaces.push_back(std::move(own));
  }

  // Pass 1: per unit, the unconstrained G (largest candidates) gives a plan and a lower bound
  // w * t_lb + e_lb + G(inf, inf) on everything else of that unit (w = m - 1/v).
  struct Pending {
    size_t unit;
    double bound;
    double g_top;  // G at the largest candidates
    int t_act;     // [t_act, top] x [e_act, top] is settled
    int e_act;
    std::shared_ptr<GOracle> oracle;  // kept for pass 2 while memory allows
  };
  // The tables every microbatch count needs whatever the model: decline rather than fail to
  // allocate them (or spend hours filling them). A heterogeneous order holds up to four
  // frontiers per group and a DP row per group, stage and layer.
  const int N = static_cast<int>(space.mesh_sizes.size());
  const int num_groups = static_cast<int>(space.group_devices.size());
  const double table_bytes =
      heterogeneous
          ? FrontierCellBytes(L, N) * 4 * num_groups +
                sizeof(double) * (space.num_devices + num_groups) * (max_stages + 1.0) * (L + 1.0)
          : FrontierCellBytes(L, N) +
                (sizeof(double) * (space.num_devices + 1.0) + sizeof(int)) * max_stages *
                    (L + 1.0);
  const double memory_limit = MemoryLimitBytes(options);
  auto decline = [&](std::string message) {
    return run.Finish(TerminationType::kDeclined, std::move(message));
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
  const Deadline deadline = run.MakeDeadline();

  std::vector<Pending> pending;
  bool pass1_complete = true;
  DpSolver solver(space, L, max_stages);
  solver.SetDeadline(&deadline);
  std::vector<double> hetero_buffer;  // the heterogeneous DP's table, one order at a time
  // The heterogeneous frontiers of the microbatch count being built, shared by its orders.
  FrontierCache cache;
  int cache_m = 0;
  auto make_oracle = [&](const Unit& unit) -> std::shared_ptr<GOracle> {
    if (unit.v > 1) {
      const CostModel& model =
          interleaved_models.try_emplace(unit.v, problem, unit.v).first->second.cost_model();
      const std::pair<int, int> key{unit.m, unit.v};
      auto it = interleaved_frontiers.find(key);
      if (it == interleaved_frontiers.end()) {
        // Only the frontiers of the microbatch count being built stay cached.
        for (auto old = interleaved_frontiers.begin(); old != interleaved_frontiers.end();)
          old = old->first.first != unit.m ? interleaved_frontiers.erase(old) : std::next(old);
        it = interleaved_frontiers
                 .emplace(key, std::make_shared<const StageFrontier>(BuildStageFrontier(
                                   model, space, max_stages, unit.m, &deadline)))
                 .first;
      }
      return std::make_shared<HomogeneousOracle>(it->second, solver, unit.p);
    }
    if (!heterogeneous)
      return std::make_shared<HomogeneousOracle>(
          std::make_shared<const StageFrontier>(
              BuildStageFrontier(cost_model, space, max_stages, unit.m, &deadline)),
          solver);
    if (unit.m != cache_m) {
      cache.clear();
      cache_m = unit.m;
    }
    return std::make_shared<HeteroOracle>(cost_model, group_spaces, unit.order, space.min_stages,
                                          max_stages, unit.m, &deadline, cache, hetero_buffer);
  };
  // Tables kept between the passes: a few MB per microbatch count on GPT ladders.
  constexpr double kKeptTablesBudgetBytes = 512.0 * 1024.0 * 1024.0;
  double kept_bytes = 0;
  try {
    for (size_t u = 0; u < units.size(); ++u) {
      if (out_of_budget()) {
        stopped = true;
        pass1_complete = false;
        break;
      }
      const double w = units[u].Weight();
      std::shared_ptr<GOracle> oracle = make_oracle(units[u]);
      const std::vector<double>& tc = oracle->TCandidates();
      const std::vector<double>& ec = oracle->ECandidates();
      if (tc.empty()) continue;
      const int t_top = static_cast<int>(tc.size()) - 1;
      const int e_top = static_cast<int>(ec.size()) - 1;
      int t_act = t_top, e_act = e_top;
      const double g = evaluate_g(*oracle, t_top, e_top, &t_act, &e_act);
      if (g == kInf) continue;
      const double t_lb = std::max(tc.front(), oracle->TLowerBound());
      const double e_lb = std::max(ec.front(), oracle->ELowerBound());
      const double bound = w * t_lb + e_lb + g;
      if (t_act > 0 || e_act > 0) {
        const double bytes = oracle->Bytes();
        const bool keep = kept_bytes + bytes <= kKeptTablesBudgetBytes;
        if (keep) kept_bytes += bytes;
        pending.push_back({u, bound, g, t_act, e_act, keep ? oracle : nullptr});
      }
      progress(fmt::format("{}, {} x {} candidate stage times x tails, bound {:.6g} s, best "
                           "{:.6g} s",
                           oracle->Describe(), tc.size(), ec.size(), bound, best),
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
      const double w = units[pending[k].unit].Weight();
      if (pending[k].bound >= best) break;  // sorted: every later m is pruned too
      if (out_of_budget()) {
        stopped = true;
        open_bound = pending[k].bound;  // the least of the remaining ones
        break;
      }
      ++summary.iterations;
      std::shared_ptr<GOracle> oracle = std::move(pending[k].oracle);
      if (!oracle) oracle = make_oracle(units[pending[k].unit]);
      const std::vector<double>& tc = oracle->TCandidates();
      const std::vector<double>& ec = oracle->ECandidates();
      // No plan has its max below the lower bounds: candidates under them need no exploring.
      const int t_first = static_cast<int>(
          std::lower_bound(tc.begin(), tc.end(), oracle->TLowerBound()) - tc.begin());
      const int e_first = static_cast<int>(
          std::lower_bound(ec.begin(), ec.end(), oracle->ELowerBound()) - ec.begin());
      RectangleQueue queue;
      auto push = [&](int tl, int th, int el, int eh, double g_lower, bool corner) {
        tl = std::max(tl, t_first);
        el = std::max(el, e_first);
        if (tl > th || el > eh) return;
        queue.push({w * tc[tl] + ec[el] + g_lower, tl, th, el, eh, g_lower, corner});
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
        auto t_room = [&](double t) { return w * t + ec[r.el] + r.g_lower < best; };
        auto e_room = [&](double e) { return w * tc[r.tl] + e + r.g_lower < best; };
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
          if (r.th > r.tl && w * (tc[r.th] - tc[r.tl]) >= ec[r.eh] - ec[r.el])
            tm = r.tl + (r.th - r.tl) / 2;
          else if (r.eh > r.el)
            em = r.el + (r.eh - r.el) / 2;
        }
        int ta = tm, ea = em;
        const double g = evaluate_g(*oracle, tm, em, &ta, &ea);
        split(r, tm, em, g, ta, ea);
        progress(fmt::format("{}: {} G evaluations, {} open rectangles, best {:.6g} s",
                             oracle->Describe(), summary.evaluations, queue.size(), best),
                 false);
      }
    }
  } catch (const Deadline::Expired&) {
    // Whatever was left of this count and the later ones is bounded by this count's bound.
    stopped = true;
    stop_reason = TerminationType::kTimeLimit;
    open_bound = std::min(open_bound, pending[current].bound);
  }

  summary.best_iteration_seconds = best;
  if (!stopped) {
    if (result.plan) {
      summary.termination = TerminationType::kOptimal;
      summary.lower_bound_seconds = best;
      summary.message =
          heterogeneous
              ? fmt::format("optimal over {} microbatch counts and {} orders of the node groups: {}",
                            space.num_microbatches.size(), orders.size(), result.plan->Summary())
              : fmt::format("optimal over {} microbatch counts{}: {}",
                            space.num_microbatches.size(),
                            interleave_here
                                ? fmt::format(" and virtual stages {{{}}}",
                                              fmt::join(options.space.virtual_stages, ","))
                                : "",
                            result.plan->Summary());
    } else {
      summary.termination = TerminationType::kInfeasible;
      summary.message =
          heterogeneous
              ? fmt::format("no feasible plan: on no order of the {} node groups do {} to {} "
                            "stages fit in device memory with any microbatch count",
                            num_groups, space.min_stages, max_stages)
              : ExplainNoFeasiblePlan(cost_model, space, max_stages);
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
  SearchResult finished = run.Finish();
  progress(summary.BriefReport(), true);
  return finished;
}

}  // namespace stratos
