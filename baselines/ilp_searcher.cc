#include "baselines/ilp_searcher.h"

#include <fmt/format.h>

#include <algorithm>
#include <array>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <limits>
#include <map>
#include <memory>
#include <string>
#include <tuple>
#include <vector>

#include "baselines/explain.h"
#include "baselines/stage_frontier.h"
#include "costmodel/error.h"
#include "costmodel/evaluate.h"
#include "costmodel/interleaved_cost_model.h"
#include "search/interleaving_searcher.h"

#ifdef STRATOS_HAVE_CBC
#include <coin/Cbc_C_Interface.h>
#include <poll.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <sstream>
#endif

namespace stratos {
namespace {

constexpr double kInf = std::numeric_limits<double>::infinity();

#ifdef STRATOS_HAVE_CBC

// One candidate stage of the MILP of one unit (a microbatch count, and an order of the node
// groups): a binary column.
struct Column {
  int first_layer = 0;  // i
  int last_layer = 0;   // j (exclusive)
  int state = 1;        // q of the tail node
  int head_state = 0;   // q' of the head node; 0 when j == L (the sink)
  int tail = 0;         // tail node (ColumnSet::Node (i, q, run, first of its run))
  int head = -1;        // head node (j, q', run of the next stage, whether it opens that run);
                        // -1: the sink
  int run = 0;          // position in ColumnSet::order of the stage's node group
  int config = 0;       // index into SearchSpace::configs
  int devices = 1;      // mesh size n
  double t = 0;         // microbatch seconds t_s
  double a = 0;         // t_s + c_s (the additive part of the objective)
  double e = 0;         // exposed tail e_s (the objective pays max_s e_s)
};

// The pruned columns of one unit and what the MILP needs around them.
struct ColumnSet {
  int m = 0;
  // Interleaved 1F1B units (v > 1): plans of exactly `ranks` pipeline ranks of v model chunks
  // each; the states then count the ranks to the end exactly (the ranks' chunks in flight depend
  // on the rank and on p), a column's a is t / v + c, and max t weighs m - 1/v. Plain: v = 1,
  // ranks = 0.
  int v = 1;
  int ranks = 0;
  // The objective's weight of the slowest stage: m - 1/v (m - 1 exactly for v = 1).
  double Weight() const { return m - 1.0 / v; }
  // The node groups the stages visit, one run each, in pipeline order ({0} on a homogeneous
  // cluster), each run's device budget (its group's), and their sum.
  std::vector<int> order;
  std::vector<int> run_devices;
  int num_devices = 0;
  int num_states = 1;            // Q
  bool open_last_state = false;  // state Q means ">= Q stages remain" (loops to itself)
  std::vector<Column> columns;   // ordered by first_layer
  // Lower bound on this unit's optimum without a MILP: the shortest chain by a plus Weight()
  // times t_floor plus e_floor. kInf when no chain of columns exists (the unit is infeasible).
  double cheap_bound = kInf;
  // Lower bound on max_s t_s: the volume bound, and the largest per-layer least t of a column
  // covering the layer.
  double t_floor = 0;
  double volume_floor = 0;
  // Lower bound on max_s e_s: the largest per-layer least e of a column covering the layer.
  double e_floor = 0;
  int num_layers = 0;
  int min_stages = 1;

  int NumRuns() const { return static_cast<int>(order.size()); }
  // Flow nodes: the next stage starts at layer `boundary` with `state` stages from it to the
  // end, in run `run`, and is the first of its run when `opens_run` (it then receives from the
  // previous run's group). (L + 1, Q + 1, runs, 2) of them, most unused.
  size_t NumNodes() const {
    return static_cast<size_t>(num_layers + 1) * (num_states + 1) * NumRuns() * 2;
  }
  int Node(int boundary, int state, int run, bool opens_run) const {
    return ((boundary * (num_states + 1) + state) * NumRuns() + run) * 2 + (opens_run ? 1 : 0);
  }
};

// The state of the node a stage with `remaining` stages from it to the end leaves from.
int StateOf(int remaining, int num_states, bool open) {
  return open && remaining >= num_states ? num_states : remaining;
}

// Drops the columns that lie on no source-to-sink chain, or on none that could beat
// `incumbent` seconds: a chain through a column costs at least the cheapest chain by t + c
// through it plus w max(t_col, t_floor) plus max(e_col, e_floor), w = ColumnSet::Weight(). Repeats
// while t_floor (the largest per-layer least t of a remaining column covering it, or the volume
// bound) rises; then sets cheap_bound. Exact: only plans no better than the incumbent are lost.
void Tighten(ColumnSet& set, double incumbent) {
  const int L = set.num_layers;
  const int Q = set.num_states;
  const bool open = set.open_last_state;
  const double weight = set.Weight();
  const size_t num_nodes = set.NumNodes();
  const double threshold = incumbent * (1.0 + 1e-12);
  std::vector<double> forward(num_nodes), backward(num_nodes), cover(L), cover_e(L);
  for (;;) {
    // Columns are ordered by first_layer: one pass each way is a DAG shortest path.
    std::fill(forward.begin(), forward.end(), kInf);
    std::fill(backward.begin(), backward.end(), kInf);
    for (int q = 1; q <= Q; ++q)
      if (set.ranks > 0 ? q == set.ranks : (q == Q && open) || q >= set.min_stages)
        forward[set.Node(0, q, 0, true)] = 0.0;
    double to_sink = kInf;
    for (const Column& col : set.columns) {
      const double d = forward[col.tail] + col.a;
      double& head = col.head < 0 ? to_sink : forward[col.head];
      head = std::min(head, d);
    }
    for (size_t k = set.columns.size(); k-- > 0;) {
      const Column& col = set.columns[k];
      const double rest = col.head < 0 ? 0.0 : backward[col.head];
      double& tail = backward[col.tail];
      tail = std::min(tail, rest + col.a);
    }
    std::fill(cover.begin(), cover.end(), kInf);
    std::fill(cover_e.begin(), cover_e.end(), kInf);
    std::vector<Column> kept;
    kept.reserve(set.columns.size());
    for (const Column& col : set.columns) {
      const double rest = col.head < 0 ? 0.0 : backward[col.head];
      const double through = forward[col.tail] + col.a + rest;
      if (!std::isfinite(through) ||
          through + weight * std::max(col.t, set.t_floor) + std::max(col.e, set.e_floor) >
              threshold)
        continue;
      kept.push_back(col);
      for (int l = col.first_layer; l < col.last_layer; ++l) {
        cover[l] = std::min(cover[l], col.t);
        cover_e[l] = std::min(cover_e[l], col.e);
      }
    }
    const bool removed = kept.size() < set.columns.size();
    set.columns.swap(kept);
    if (set.columns.empty() || !std::isfinite(to_sink)) {
      set.columns.clear();
      set.cheap_bound = kInf;
      return;
    }
    double floor = set.volume_floor;
    for (double c : cover) floor = std::max(floor, c);
    double e_floor = 0;
    for (double e : cover_e) e_floor = std::max(e_floor, e);
    const bool raised = floor > set.t_floor || e_floor > set.e_floor;
    set.t_floor = std::max(set.t_floor, floor);
    set.e_floor = std::max(set.e_floor, e_floor);
    set.cheap_bound = to_sink + weight * set.t_floor + set.e_floor;
    if (!removed && !raised) return;
  }
}

// Thrown by BuildColumns when the columns would exceed their budget.
struct ColumnLimitReached {};

// Bytes a column takes, in our set and in CBC's copies of the matrix (a handful of nonzeros,
// bounds, cost, names), for the memory budget.
constexpr double kBytesPerColumn = 512;

// Lower bound on max_s t_s of the plans whose runs r have D_r devices: the volume rows
//   D_r T >= sum of w(l, r) over the layers l of run r     (work: (L, K), kInf: not on run r)
// weighted by any mu on the simplex give T >= f(mu) = sum_l min_r mu_r w(l, r) / D_r (weak
// duality of the fractional assignment of layers to runs, which no integral one beats). f is
// concave: maximized by ternary searches along the pairs of runs, starting from mu_r = D_r / D
// (f = sum_l min_r w(l, r) / D, the one-group volume bound). Any mu gives a valid bound, so the
// search needs no exactness. 0 when some layer fits no run.
double RunsVolumeBound(const std::vector<double>& work, const std::vector<int>& run_devices) {
  const int K = static_cast<int>(run_devices.size());
  const size_t L = work.size() / K;
  // Distinct layer rows (cost classes repeat), with their counts.
  std::map<std::vector<double>, int> rows;
  for (size_t l = 0; l < L; ++l) {
    std::vector<double> row(K);
    bool placeable = false;
    for (int r = 0; r < K; ++r) {
      row[r] = work[l * K + r] / run_devices[r];
      placeable = placeable || std::isfinite(row[r]);
    }
    if (!placeable) return 0.0;
    ++rows[row];
  }
  auto f = [&](const std::vector<double>& mu) {
    double sum = 0;
    for (const auto& [row, count] : rows) {
      double least = kInf;
      for (int r = 0; r < K; ++r)
        if (std::isfinite(row[r])) least = std::min(least, mu[r] * row[r]);
      sum += count * least;
    }
    return sum;
  };
  int total = 0;
  for (int d : run_devices) total += d;
  std::vector<double> mu(K);
  for (int r = 0; r < K; ++r) mu[r] = static_cast<double>(run_devices[r]) / total;
  double best = f(mu);
  for (int round = 0; round < 4; ++round) {
    const double before = best;
    for (int r = 0; r < K; ++r)
      for (int other = r + 1; other < K; ++other) {
        // mu + s (e_r - e_other), s in [-mu_r, mu_other].
        auto at = [&](double shift) {
          std::vector<double> moved = mu;
          moved[r] = std::max(0.0, moved[r] + shift);
          moved[other] = std::max(0.0, moved[other] - shift);
          return moved;
        };
        double lo = -mu[r], hi = mu[other];
        for (int step = 0; step < 60; ++step) {  // (2/3)^60: 3e-11 of the segment
          const double a = lo + (hi - lo) / 3, b = hi - (hi - lo) / 3;
          if (f(at(a)) < f(at(b)))
            lo = a;
          else
            hi = b;
        }
        const std::vector<double> candidate = at(0.5 * (lo + hi));
        const double value = f(candidate);
        if (value > best) {
          best = value;
          mu = candidate;
        }
      }
    if (!(best > before * (1 + 1e-12))) break;
  }
  return best;
}

// A node group as the columns see it: its configurations (those of SearchSpace::configs with its
// node_group, in that order), their indices there, its device budget and memory per device. On a
// homogeneous cluster the one group holds every configuration.
struct GroupSpace {
  std::vector<StageConfig> configs;
  std::vector<int> index;  // (configs.size()) index of each in SearchSpace::configs
  int devices = 0;
  double capacity_bytes = 0;
};

// The stage tables of one unit, by run and by neighbours: run_tables[r][pk][nk] prices the
// stages of group order[r] that receive from group order[r - 1] (pk = 1, the first stage of a
// run after the first) and send to group order[r + 1] (nk = 1, the last stage of a run before
// the last); pk = nk = 0 is the group's own neighbours (StageTable's -1). Only the variants that
// exist are set (pk = 1 needs r > 0, nk = 1 needs r < runs - 1).
using RunTables = std::vector<std::array<std::array<const StageTable*, 2>, 2>>;

// Checks `deadline` once per first layer (Deadline::Expired propagates) and throws
// ColumnLimitReached past `max_columns` columns.
//
// Columns of a unit whose order visits runs r = 0..K-1: a stage [i, j) of run r with q stages
// from it to the end goes from node (i, q, r, opens) to (j, q', r + nk, nk) -- nk = 1 when it is
// the last of its run and the next stage opens run r + 1 -- or to the sink when j == L, which
// only the last run reaches. The stage is priced with run_tables[r][opens && r > 0][nk]: its
// sends to or from another group cross the link between the groups, as in Evaluate(). Run 0
// opens only at layer 0, run r needs q >= K - r (one stage in each later run); the chain pruning
// of Tighten removes what still cannot reach the sink.
ColumnSet BuildColumns(const CostModel& cost_model, const SearchSpace& space,
                       const std::vector<GroupSpace>& groups, const std::vector<int>& order,
                       const RunTables& run_tables, int m, int max_stages,
                       const Deadline& deadline, size_t max_columns, int v, int ranks) {
  const Problem& problem = cost_model.problem();
  const Schedule schedule = problem.training.schedule;
  const int L = problem.NumLayers();
  const int K = static_cast<int>(order.size());

  ColumnSet set;
  set.m = m;
  set.order = order;
  for (int g : order) {
    set.run_devices.push_back(groups[g].devices);
    set.num_devices += groups[g].devices;
  }
  set.num_layers = L;
  set.min_stages = space.min_stages;
  set.v = v;
  set.ranks = ranks;
  // 1F1B: a stage with k stages after it (itself included) holds min(m, k) microbatches, so
  // counts k >= m are interchangeable; GPipe: every stage holds m. Interleaved (ranks > 0): rank
  // p - q of p holds ChunkForwardsInFlight chunk forwards, each 1/v of its activations.
  const int Q =
      ranks > 0 ? ranks : schedule == Schedule::kOneFOneB ? std::min(m, max_stages) : 1;
  const bool open = ranks == 0 && Q < max_stages;
  set.num_states = Q;
  set.open_last_state = open;
  std::vector<double> inflight(Q + 1, 0);
  for (int q = 1; q <= Q; ++q)
    inflight[q] = ranks > 0 ? ChunkForwardsInFlight(schedule, ranks, ranks - q, m, v) /
                                  static_cast<double>(v)
                            : MicrobatchesInFlight(schedule, q, 0, m);

  struct Candidate {
    double t, a, e;
    int devices, config;  // config: index into SearchSpace::configs
  };
  std::vector<std::vector<Candidate>> bucket(static_cast<size_t>(L + 1) * (Q + 1));
  std::vector<Candidate> kept_in_cell;
  for (int i = 0; i < L; ++i) {
    deadline.Check();
    if (set.columns.size() > max_columns) throw ColumnLimitReached{};
    // Run r starts at layer r or later, and only run 0 at layer 0.
    for (int r = 0; r < K && r <= i; ++r) {
      const GroupSpace& group = groups[order[r]];
      const int D = group.devices;
      const double capacity = group.capacity_bytes;
      for (int pk = 0; pk < (r > 0 ? 2 : 1); ++pk) {
        const bool opens = r == 0 ? i == 0 : pk == 1;
        for (int nk = 0; nk < (r + 1 < K ? 2 : 1); ++nk) {
          const StageTable& table = *run_tables[r][pk][nk];
          for (auto& b : bucket) b.clear();
          for (int c : table.ValidConfigs()) {
            if (table.Config(c).NumDevices() > D) continue;
            StageTerms inner = table.Overhead(c, i == 0, false);
            for (int j = i + 1; j <= L; ++j) {
              // Only the last run reaches the last layer, and not through a send to a next run.
              if (j == L && r + 1 < K) break;
              // An interleaved rank needs a layer per chunk (InterleavePlan).
              if (j - i < v) {
                if (j < L) inner += table.Layer(j - 1, c);
                continue;
              }
              StageTerms terms;
              if (j < L) {
                inner += table.Layer(j - 1, c);
                terms = inner;
              } else {
                terms = table.Terms(i, L, c);  // a last stage's overhead differs
              }
              const double t = terms.MicrobatchSeconds();
              const double a = t / v + terms.OneTimeSeconds();
              const double e = terms.ExposedTailSeconds();
              for (int q = 1; q <= Q; ++q) {
                if (L - i < q * v) break;  // q stages need q layers (v each when interleaved)
                if (ranks > 0 && i == 0 && q != ranks) continue;  // exactly `ranks` ranks
                // Evaluate's rule (capacity - peak < 0 is a violation); in-flight grows with q.
                if (capacity - terms.PeakMemoryBytes(inflight[q]) < 0) break;
                const bool last = j == L;
                if (last ? q != 1 : (q == 1 && !open)) continue;
                if (q < K - r && !(q == Q && open)) continue;  // a stage in every later run
                bucket[static_cast<size_t>(j) * (Q + 1) + q].push_back(
                    {t, a, e, table.Config(c).NumDevices(), group.index[c]});
              }
            }
          }
          for (int j = i + 1; j <= L; ++j) {
            for (int q = 1; q <= Q; ++q) {
              std::vector<Candidate>& cell = bucket[static_cast<size_t>(j) * (Q + 1) + q];
              if (cell.empty()) continue;
              std::sort(cell.begin(), cell.end(), [](const Candidate& x, const Candidate& y) {
                if (x.t != y.t) return x.t < y.t;
                if (x.a != y.a) return x.a < y.a;
                if (x.e != y.e) return x.e < y.e;
                if (x.devices != y.devices) return x.devices < y.devices;
                return x.config < y.config;
              });
              // A candidate is dominated if a kept one has no larger mesh, t, a and e (kept ones
              // come first in t order).
              kept_in_cell.clear();
              std::vector<std::pair<int, int>> heads;  // (head node, head state)
              if (j == L) {
                heads.push_back({-1, 0});
              } else {
                const int next_run = r + nk;
                if (q >= 2 && L - j >= (q - 1) * v)
                  heads.push_back({set.Node(j, q - 1, next_run, nk == 1), q - 1});
                if (q == Q && open && L - j >= Q)
                  heads.push_back({set.Node(j, Q, next_run, nk == 1), Q});
              }
              const int tail = set.Node(i, q, r, opens);
              for (const Candidate& cand : cell) {
                const bool dominated = std::any_of(
                    kept_in_cell.begin(), kept_in_cell.end(), [&cand](const Candidate& k) {
                      return k.devices <= cand.devices && k.a <= cand.a && k.e <= cand.e;
                    });
                if (dominated) continue;
                kept_in_cell.push_back(cand);
                for (auto [head, head_state] : heads)
                  set.columns.push_back({i, j, q, head_state, tail, head, r, cand.config,
                                         cand.devices, cand.t, cand.a, cand.e});
              }
            }
          }
        }
      }
    }
  }

  // Volume bound on max_s t_s (as in the DP): a stage's t is at least the sum of its layers' t
  // (overheads are >= 0) and the meshes of run r sum to at most D_r, so with
  // w(l, r) = min over the configurations c of group g_r with n_c <= D_r of n_c t(l, c),
  // D_r max_s t_s >= sum of w(l, r) over the layers of run r. One run: D max_s t_s >= sum_l w(l).
  bool nonnegative = true;
  for (int r = 0; r < K; ++r)
    for (int pk = 0; pk < 2; ++pk)
      for (int nk = 0; nk < 2; ++nk) {
        if (run_tables[r][pk][nk] == nullptr) continue;
        const StageTable& table = *run_tables[r][pk][nk];
        for (int c : table.ValidConfigs())
          for (int first = 0; first < 2; ++first)
            for (int last = 0; last < 2; ++last)
              if (!(table.Overhead(c, first, last).MicrobatchSeconds() >= 0)) nonnegative = false;
      }
  std::vector<double> work(static_cast<size_t>(L) * K, kInf);  // (L, K): w(l, r)
  for (int l = 0; l < L && nonnegative; ++l) {
    for (int r = 0; r < K; ++r) {
      const StageTable& table = *run_tables[r][0][0];  // layer terms do not depend on neighbours
      const int D = groups[order[r]].devices;
      double& least = work[static_cast<size_t>(l) * K + r];
      for (int c : table.ValidConfigs()) {
        const double t = table.Layer(l, c).MicrobatchSeconds();
        if (!(t >= 0)) nonnegative = false;
        if (table.Config(c).NumDevices() <= D)
          least = std::min(least, table.Config(c).NumDevices() * t);
      }
    }
  }
  if (nonnegative && K == 1) {
    double volume = 0;
    for (int l = 0; l < L; ++l) volume += work[l];
    // Shrunk by 1e-9 so that rounding never cuts off the optimum.
    if (std::isfinite(volume)) set.volume_floor = (1.0 - 1e-9) * volume / set.num_devices;
  } else if (nonnegative) {
    set.volume_floor = (1.0 - 1e-9) * RunsVolumeBound(work, set.run_devices);
  }
  Tighten(set, kInf);
  return set;
}


// The node group of each stage of a plan, in pipeline order.
std::vector<int> StageGroups(const Plan& plan) {
  std::vector<int> groups;
  for (const StagePlan& stage : plan.stages) groups.push_back(stage.config.node_group);
  return groups;
}

// The node groups of a plan's runs of stages, in pipeline order.
std::vector<int> RunGroups(const Plan& plan) {
  std::vector<int> runs;
  for (const StagePlan& stage : plan.stages)
    if (runs.empty() || runs.back() != stage.config.node_group)
      runs.push_back(stage.config.node_group);
  return runs;
}

// The warm start's columns, one per stage, in the column set of its unit (the plan's microbatch
// count and RunGroups): for each stage the column of the same layers, nodes (states, run, run
// boundaries) with no larger mesh, t and t + e (pruning keeps one). Empty if some stage has none.
std::vector<int> MapPlanToColumns(const ColumnSet& set, const Plan& plan,
                                  const Estimate& estimate) {
  std::vector<int> chosen;
  const int p = plan.NumStages();
  int run = 0;
  for (int s = 0; s < p; ++s) {
    const StagePlan& stage = plan.stages[s];
    const int group = stage.config.node_group;
    const bool opens = s == 0 || plan.stages[s - 1].config.node_group != group;
    const bool closes = s + 1 < p && plan.stages[s + 1].config.node_group != group;
    if (s > 0 && opens) ++run;
    const int q = StateOf(p - s, set.num_states, set.open_last_state);
    const int head_state =
        s == p - 1 ? 0 : StateOf(p - s - 1, set.num_states, set.open_last_state);
    const int tail = set.Node(stage.first_layer, q, run, opens);
    const int head = s == p - 1 ? -1 : set.Node(stage.last_layer, head_state, run + closes, closes);
    const double t = estimate.stages[s].microbatch_seconds;
    const double a = t + estimate.stages[s].tail_seconds;
    int found = -1;
    for (size_t k = 0; k < set.columns.size(); ++k) {
      const Column& col = set.columns[k];
      if (col.first_layer == stage.first_layer && col.last_layer == stage.last_layer &&
          col.tail == tail && col.head == head &&
          col.devices <= stage.config.NumDevices() && col.t <= t && col.a <= a) {
        found = static_cast<int>(k);
        break;
      }
    }
    if (found < 0) return {};
    chosen.push_back(found);
  }
  return chosen;
}

// The best uniform plan of one microbatch count in one node group (equal stages sharing one
// configuration; `table` prices the group's configurations with its own neighbours) that fits
// in memory, priced as Evaluate() prices it; nullopt if none fits.
std::optional<Plan> BestUniform(const CostModel& cost_model, const SearchSpace& space,
                                const GroupSpace& group, const StageTable& table,
                                int max_stages) {
  const Problem& problem = cost_model.problem();
  const Schedule schedule = problem.training.schedule;
  const int L = problem.NumLayers();
  const int m = table.num_microbatches();
  const double capacity = group.capacity_bytes;
  double best = kInf;
  int best_stages = 0, best_config = -1;
  for (int p = space.min_stages; p <= max_stages; ++p) {
    const std::vector<std::pair<int, int>> ranges = SplitLayersEvenly(L, p);
    std::vector<double> t(p), e(p), one_time(p);
    for (int c : table.ValidConfigs()) {
      if (p * table.Config(c).NumDevices() > group.devices) continue;
      bool fits = true;
      for (int s = 0; s < p && fits; ++s) {
        const StageTerms terms = table.Terms(ranges[s].first, ranges[s].second, c);
        t[s] = terms.MicrobatchSeconds();
        e[s] = terms.ExposedTailSeconds();
        one_time[s] = terms.OneTimeSeconds();
        if (capacity - terms.PeakMemoryBytes(MicrobatchesInFlight(schedule, p, s, m)) < 0)
          fits = false;
      }
      if (!fits) continue;
      const double seconds = PipelineObjective(t, e, one_time, m);
      if (seconds < best) {
        best = seconds;
        best_stages = p;
        best_config = c;
      }
    }
  }
  if (best_config < 0) return std::nullopt;
  Plan plan;
  plan.global_batch_size = problem.training.global_batch_size;
  plan.num_microbatches = m;
  plan.schedule = schedule;
  for (auto [first, last] : SplitLayersEvenly(L, best_stages))
    plan.stages.push_back({first, last, table.Config(best_config)});
  return plan;
}

// A primal heuristic for a unit of several runs (the uniform plans of BestUniform stay in one
// group, which on a heterogeneous cluster can be far from the optimum and leave CBC without a
// useful cutoff): each run r gets p_r equal stages sharing one configuration c_r of its group,
// and the runs get layers in proportion to p_r / tau_r (tau_r: c_r's mean layer time), so that
// the stage times balance. The choices are improved one run at a time (coordinate descent over
// (c_r, p_r), least memory overflow first, then the objective), then stage by stage (a layer
// across a stage boundary, another configuration of the group for one stage). Stages are priced
// from `run_tables` as Evaluate() prices them. Bounded work: at most 4 rounds of
// sum_r (configurations x stage counts) pricings and 32 passes of (stages x configurations)
// pricings, each O(L), `deadline` checked at each (Deadline::Expired propagates). nullopt when
// nothing found fits in memory.
std::optional<Plan> BalancedRuns(const CostModel& cost_model, const SearchSpace& space,
                                 const std::vector<GroupSpace>& groups,
                                 const std::vector<int>& order, const RunTables& run_tables,
                                 int m, int max_stages, const Deadline& deadline) {
  const Problem& problem = cost_model.problem();
  const Schedule schedule = problem.training.schedule;
  const int L = problem.NumLayers();
  const int K = static_cast<int>(order.size());
  if (K < 2 || L < K || max_stages < K) return std::nullopt;
  struct Option {
    int config;  // index into run_tables[r][.][.]
    int stages;
    double tau;
  };
  std::vector<std::vector<Option>> options(K);
  for (int r = 0; r < K; ++r) {
    const StageTable& table = *run_tables[r][0][0];
    const int D = groups[order[r]].devices;
    for (int c : table.ValidConfigs()) {
      const int n = table.Config(c).NumDevices();
      double sum = 0;
      for (int l = 0; l < L; ++l) sum += table.Layer(l, c).MicrobatchSeconds();
      const double tau = sum / L;
      if (!(tau > 0) || !std::isfinite(tau)) continue;
      for (int p = 1; p * n <= D && p <= max_stages - (K - 1); ++p)
        options[r].push_back({c, p, tau});
    }
    if (options[r].empty()) return std::nullopt;
  }
  // A stage of a candidate plan: run, configuration (index into the run's tables), layers.
  struct Segment {
    int run, config, first, last;
  };
  // (memory overflow bytes, seconds): lexicographic, less is better.
  using Score = std::pair<double, double>;
  const Score kNone{kInf, kInf};
  auto price_segments = [&](const std::vector<Segment>& segments) -> Score {
    deadline.Check();
    const int num_stages = static_cast<int>(segments.size());
    if (num_stages < space.min_stages || num_stages > max_stages) return kNone;
    std::vector<double> t, e, one_time;
    std::vector<int> used(K, 0);
    double overflow = 0;
    for (int s = 0; s < num_stages; ++s) {
      const Segment& seg = segments[s];
      if (seg.first >= seg.last) return kNone;
      const bool pk = seg.run > 0 && segments[s - 1].run != seg.run;
      const bool nk = s + 1 < num_stages && segments[s + 1].run != seg.run;
      const StageTable& table = *run_tables[seg.run][pk][nk];
      used[seg.run] += table.Config(seg.config).NumDevices();
      const StageTerms terms = table.Terms(seg.first, seg.last, seg.config);
      const double over = terms.PeakMemoryBytes(MicrobatchesInFlight(schedule, num_stages, s, m)) -
                          groups[order[seg.run]].capacity_bytes;
      if (over > 0) overflow += over;
      t.push_back(terms.MicrobatchSeconds());
      e.push_back(terms.ExposedTailSeconds());
      one_time.push_back(terms.OneTimeSeconds());
    }
    for (int r = 0; r < K; ++r)
      if (used[r] > groups[order[r]].devices) return kNone;
    return {overflow, PipelineObjective(t, e, one_time, m)};
  };
  // The segments of p_r equal stages per run with run_layers[r] layers and configuration c_r.
  auto segments_of = [&](const std::vector<int>& pick, const std::vector<int>& run_layers) {
    std::vector<Segment> segments;
    int first = 0;
    for (int r = 0; r < K; ++r) {
      const Option& option = options[r][pick[r]];
      if (run_layers[r] < option.stages) return std::vector<Segment>{};
      for (auto [i, j] : SplitLayersEvenly(run_layers[r], option.stages))
        segments.push_back({r, option.config, first + i, first + j});
      first += run_layers[r];
    }
    return segments;
  };
  auto price = [&](const std::vector<int>& pick, const std::vector<int>& run_layers) {
    const std::vector<Segment> segments = segments_of(pick, run_layers);
    return segments.empty() ? kNone : price_segments(segments);
  };
  // Layers per run in proportion to p_r / tau_r (largest remainders), at least p_r each.
  auto balance = [&](const std::vector<int>& pick) {
    std::vector<double> ideal(K);
    double total = 0;
    for (int r = 0; r < K; ++r) total += options[r][pick[r]].stages / options[r][pick[r]].tau;
    std::vector<int> layers(K);
    int sum = 0;
    for (int r = 0; r < K; ++r) {
      ideal[r] = L * (options[r][pick[r]].stages / options[r][pick[r]].tau) / total;
      layers[r] = std::max(options[r][pick[r]].stages, static_cast<int>(ideal[r]));
      sum += layers[r];
    }
    while (sum != L) {
      int chosen = -1;
      for (int r = 0; r < K; ++r) {
        if (sum > L && layers[r] <= options[r][pick[r]].stages) continue;
        const double behind = ideal[r] - layers[r];
        if (chosen < 0 || (sum < L ? behind > ideal[chosen] - layers[chosen]
                                   : behind < ideal[chosen] - layers[chosen]))
          chosen = r;
      }
      if (chosen < 0) break;  // more stages than layers
      layers[chosen] += sum < L ? 1 : -1;
      sum += sum < L ? 1 : -1;
    }
    return layers;
  };
  // Start: each run at its fastest configuration per layer and stage.
  std::vector<int> pick(K, 0);
  for (int r = 0; r < K; ++r)
    for (size_t o = 0; o < options[r].size(); ++o)
      if (options[r][o].tau / options[r][o].stages <
          options[r][pick[r]].tau / options[r][pick[r]].stages)
        pick[r] = static_cast<int>(o);
  Score best = price(pick, balance(pick));
  for (int round = 0; round < 4; ++round) {
    bool improved = false;
    for (int r = 0; r < K; ++r) {
      std::vector<int> trial = pick;
      for (size_t o = 0; o < options[r].size(); ++o) {
        trial[r] = static_cast<int>(o);
        const Score score = price(trial, balance(trial));
        if (score < best) {
          best = score;
          pick = trial;
          improved = true;
        }
      }
    }
    if (!improved) break;
  }
  // Then stage by stage: one layer across any boundary, another configuration of the stage's
  // group within its run's devices, while either helps (at most 32 passes).
  std::vector<Segment> segments = segments_of(pick, balance(pick));
  if (segments.empty()) return std::nullopt;
  for (int pass = 0; pass < 32; ++pass) {
    bool moved = false;
    for (size_t s = 0; s + 1 < segments.size(); ++s)
      for (int direction : {-1, 1}) {
        std::vector<Segment> trial = segments;
        trial[s].last += direction;
        trial[s + 1].first += direction;
        const Score score = price_segments(trial);
        if (score < best) {
          best = score;
          segments = std::move(trial);
          moved = true;
        }
      }
    for (size_t s = 0; s < segments.size(); ++s) {
      const StageTable& table = *run_tables[segments[s].run][0][0];
      for (int c : table.ValidConfigs()) {
        if (c == segments[s].config) continue;
        std::vector<Segment> trial = segments;
        trial[s].config = c;
        const Score score = price_segments(trial);
        if (score < best) {
          best = score;
          segments = std::move(trial);
          moved = true;
        }
      }
    }
    if (!moved) break;
  }
  if (best.first > 0 || !std::isfinite(best.second)) return std::nullopt;
  Plan plan;
  plan.global_batch_size = problem.training.global_batch_size;
  plan.num_microbatches = m;
  plan.schedule = schedule;
  for (const Segment& seg : segments)
    plan.stages.push_back({seg.first, seg.last, run_tables[seg.run][0][0]->Config(seg.config)});
  return plan;
}

// What one MILP solve settled.
struct MilpOutcome {
  bool proven = false;        // optimal, or no solution better than the cutoff exists
  std::vector<int> chosen;    // columns of the best solution, in stage order (empty: none)
  double objective_seconds = kInf;  // MILP objective of that solution, unscaled
  double bound_seconds = 0;   // lower bound on this m's optimum below the cutoff
  long nodes = 0;
  std::string status;         // "optimal" | "infeasible" | "time limit" | ...
};

class CbcModel {
 public:
  CbcModel() : model_(Cbc_newModel()) {}
  ~CbcModel() { Cbc_deleteModel(model_); }
  CbcModel(const CbcModel&) = delete;
  CbcModel& operator=(const CbcModel&) = delete;
  Cbc_Model* get() { return model_; }

 private:
  Cbc_Model* model_;
};

MilpOutcome SolveMilp(const ColumnSet& set, const SearchSpace& space, int max_stages,
                      int num_layers, double cutoff_seconds, const std::vector<int>& mip_start,
                      double seconds, bool log) {
  const int L = num_layers;
  const int C = static_cast<int>(set.columns.size());
  const double scale = set.cheap_bound > 0 && std::isfinite(set.cheap_bound) ? set.cheap_bound
                                                                              : 1.0;
  const double big = std::numeric_limits<double>::max();

  // Rows: source, flow nodes (ColumnSet::Node) past layer 0, devices (one per run: its group's
  // budget), stage count, u_l (L), T >= u_l (L), volume (one per run), v_l (L), E >= v_l (L).
  // u_l / v_l are the t / e of the stage covering layer l, written telescoped (each column adds
  // its value where it starts, removes it where it ends).
  std::vector<int> node_row(set.NumNodes(), -1);
  std::vector<double> row_lb, row_ub;
  auto add_row = [&](double lb, double ub) {
    row_lb.push_back(lb);
    row_ub.push_back(ub);
    return static_cast<int>(row_lb.size()) - 1;
  };
  const int row_source = add_row(1.0, 1.0);
  auto node_row_of = [&](int node) {
    int& row = node_row[node];
    if (row < 0) row = add_row(0.0, 0.0);
    return row;
  };
  for (const Column& col : set.columns) {
    if (col.first_layer > 0) node_row_of(col.tail);
    if (col.head >= 0) node_row_of(col.head);
  }
  const int row_devices0 = static_cast<int>(row_lb.size());
  for (int devices : set.run_devices) add_row(-big, devices);
  const int row_count = add_row(space.min_stages, max_stages);
  const int row_u0 = static_cast<int>(row_lb.size());
  for (int l = 0; l < L; ++l) add_row(0.0, 0.0);
  const int row_t0 = static_cast<int>(row_lb.size());
  for (int l = 0; l < L; ++l) add_row(0.0, big);
  // Volume, per run: run r's meshes sum to at most its group's devices D_r and each t <= T, so
  // D_r T >= sum over run r's columns of n t x (one row, the whole cluster's, when homogeneous).
  const int row_volume0 = static_cast<int>(row_lb.size());
  for (int r = 0; r < set.NumRuns(); ++r) add_row(0.0, big);
  const int row_v0 = static_cast<int>(row_lb.size());
  for (int l = 0; l < L; ++l) add_row(0.0, 0.0);
  const int row_e0 = static_cast<int>(row_lb.size());
  for (int l = 0; l < L; ++l) add_row(0.0, big);

  // Columns: x (C), u_l (L), T, v_l (L), E.
  const int num_cols = C + L + 1 + L + 1;
  std::vector<CoinBigIndex> start;
  std::vector<int> index;
  std::vector<double> value, col_lb, col_ub, obj;
  start.reserve(num_cols + 1);
  index.reserve(static_cast<size_t>(C) * 9 + 6 * L + 2);
  value.reserve(index.capacity());
  // A stage column's value x enters the per-layer rows where the stage starts (-x) and ends (+x).
  auto add_telescoped = [&](int row_value0, const Column& col, double x) {
    index.push_back(row_value0 + col.first_layer);
    value.push_back(-x);
    if (col.last_layer < L) {
      index.push_back(row_value0 + col.last_layer);
      value.push_back(x);
    }
  };
  for (const Column& col : set.columns) {
    start.push_back(static_cast<CoinBigIndex>(index.size()));
    const double t = col.t / scale;
    if (col.first_layer == 0) {
      index.push_back(row_source);
      value.push_back(1.0);
    } else {
      index.push_back(node_row[col.tail]);
      value.push_back(-1.0);
    }
    if (col.head >= 0) {
      index.push_back(node_row[col.head]);
      value.push_back(1.0);
    }
    index.push_back(row_devices0 + col.run);
    value.push_back(col.devices);
    index.push_back(row_count);
    value.push_back(1.0);
    add_telescoped(row_u0, col, t);
    index.push_back(row_volume0 + col.run);
    value.push_back(-col.devices * t);
    add_telescoped(row_v0, col, col.e / scale);
    col_lb.push_back(0.0);
    col_ub.push_back(1.0);
    obj.push_back(col.a / scale);
  }
  // The per-layer value columns: w_l (= u_l or v_l) with w_l - w_{l-1} - (value of the column
  // starting at l) + (value of the column ending at l) = 0, and max >= w_l.
  auto add_per_layer_columns = [&](int row_value0, int row_bound0) {
    for (int l = 0; l < L; ++l) {
      start.push_back(static_cast<CoinBigIndex>(index.size()));
      index.push_back(row_value0 + l);
      value.push_back(1.0);
      if (l + 1 < L) {
        index.push_back(row_value0 + l + 1);
        value.push_back(-1.0);
      }
      index.push_back(row_bound0 + l);
      value.push_back(-1.0);
      col_lb.push_back(0.0);
      col_ub.push_back(big);
      obj.push_back(0.0);
    }
  };
  add_per_layer_columns(row_u0, row_t0);
  start.push_back(static_cast<CoinBigIndex>(index.size()));  // T
  for (int l = 0; l < L; ++l) {
    index.push_back(row_t0 + l);
    value.push_back(1.0);
  }
  for (int r = 0; r < set.NumRuns(); ++r) {
    index.push_back(row_volume0 + r);
    value.push_back(set.run_devices[r]);
  }
  col_lb.push_back(set.t_floor / scale);
  col_ub.push_back(big);
  obj.push_back(set.Weight());
  add_per_layer_columns(row_v0, row_e0);
  start.push_back(static_cast<CoinBigIndex>(index.size()));  // E
  for (int l = 0; l < L; ++l) {
    index.push_back(row_e0 + l);
    value.push_back(1.0);
  }
  col_lb.push_back(set.e_floor / scale);
  col_ub.push_back(big);
  obj.push_back(1.0);
  start.push_back(static_cast<CoinBigIndex>(index.size()));

  CbcModel holder;
  Cbc_Model* model = holder.get();
  Cbc_loadProblem(model, num_cols, static_cast<int>(row_lb.size()), start.data(), index.data(),
                  value.data(), col_lb.data(), col_ub.data(), obj.data(), row_lb.data(),
                  row_ub.data());
  for (int k = 0; k < C; ++k) Cbc_setInteger(model, k);
  Cbc_setLogLevel(model, log ? 1 : 0);
  Cbc_setParameter(model, "timeMode", "elapsed");
  Cbc_setParameter(model, "seconds", fmt::format("{:.3f}", std::max(0.001, seconds)).c_str());
  Cbc_setParameter(model, "randomSeed", "1");
  Cbc_setParameter(model, "randomCbcSeed", "1");
  Cbc_setParameter(model, "ratioGap", "0");
  Cbc_setParameter(model, "allowableGap", "1e-10");
  // Coefficients are O(1) after the time scaling; Clp's automatic scaling made the root LP of
  // gpt3-6.7b on 64 GPUs three times slower.
  Cbc_setParameter(model, "scaling", "off");
  if (std::isfinite(cutoff_seconds))
    Cbc_setParameter(model, "cutoff", fmt::format("{:.17g}", cutoff_seconds / scale).c_str());
  if (!mip_start.empty()) {
    std::vector<double> ones(mip_start.size(), 1.0);
    Cbc_setMIPStartI(model, static_cast<int>(mip_start.size()), mip_start.data(), ones.data());
  }
  Cbc_solve(model);

  MilpOutcome outcome;
  outcome.nodes = Cbc_getNodeCount(model);
  const double* solution = Cbc_bestSolution(model);
  const bool optimal = Cbc_isProvenOptimal(model) != 0;
  const bool infeasible = Cbc_isProvenInfeasible(model) != 0;
  if (solution != nullptr) {
    std::vector<int> chosen;
    for (int k = 0; k < C; ++k)
      if (solution[k] > 0.5) chosen.push_back(k);
    std::sort(chosen.begin(), chosen.end(), [&](int x, int y) {
      return set.columns[x].first_layer < set.columns[y].first_layer;
    });
    double objective = 0;
    for (int k : chosen) objective += set.columns[k].a;
    objective += set.Weight() * solution[C + L] * scale + solution[C + 2 * L + 1] * scale;
    outcome.chosen = chosen;
    outcome.objective_seconds = objective;
  }
  if (optimal || infeasible) {
    outcome.proven = true;
    outcome.status = solution != nullptr ? "optimal" : "no plan below the cutoff";
    if (solution != nullptr)
      outcome.bound_seconds = outcome.objective_seconds;
    else
      outcome.bound_seconds = std::isfinite(cutoff_seconds) ? cutoff_seconds : kInf;
    if (solution == nullptr && !std::isfinite(cutoff_seconds)) outcome.status = "infeasible";
  } else {
    const int status = Cbc_status(model);
    const int secondary = Cbc_secondaryStatus(model);
    outcome.status = status == 1 && secondary == 4   ? "time limit"
                     : status == 2                   ? "abandoned (numerical difficulties)"
                                                     : fmt::format("stopped (status {}, {})",
                                                                   status, secondary);
    const double bound = Cbc_getBestPossibleObjValue(model) * scale;
    outcome.bound_seconds = std::isfinite(bound) ? std::max(set.cheap_bound, bound)
                                                 : set.cheap_bound;
  }
  return outcome;
}

// SolveMilp in a child process, killed at `seconds` + a grace period: CBC checks its time limit
// only between branch-and-bound steps, and the root LP of a large MILP alone can run far past it
// (36 s for 253k columns). The child only runs CBC and reports through a pipe; glibc keeps
// malloc usable after fork even when the parent has other threads (LibTorch's pool).
MilpOutcome SolveMilpWithDeadline(const ColumnSet& set, const SearchSpace& space, int max_stages,
                                  int num_layers, double cutoff_seconds,
                                  const std::vector<int>& mip_start, double seconds, bool log) {
  constexpr double kGraceSeconds = 0.5;
  MilpOutcome stopped;
  stopped.status = "time limit (solver stopped before finishing its root LP)";
  stopped.bound_seconds = set.cheap_bound;
  int fds[2];
  if (pipe(fds) != 0) return SolveMilp(set, space, max_stages, num_layers, cutoff_seconds, mip_start, seconds, log);
  std::fflush(nullptr);
  const pid_t pid = fork();
  if (pid < 0) {
    close(fds[0]);
    close(fds[1]);
    return SolveMilp(set, space, max_stages, num_layers, cutoff_seconds, mip_start, seconds, log);
  }
  if (pid == 0) {
    close(fds[0]);
    const MilpOutcome o =
        SolveMilp(set, space, max_stages, num_layers, cutoff_seconds, mip_start, seconds, log);
    std::ostringstream out;
    out.precision(17);
    // Times are >= 0; -1 stands for +infinity, which streams cannot read back.
    auto encode = [](double x) { return std::isfinite(x) ? x : -1.0; };
    out << o.proven << ' ' << encode(o.objective_seconds) << ' ' << encode(o.bound_seconds) << ' '
        << o.nodes
        << ' ' << o.chosen.size();
    for (int c : o.chosen) out << ' ' << c;
    out << '\n' << o.status;
    const std::string text = out.str();
    size_t written = 0;
    while (written < text.size()) {
      const ssize_t n = write(fds[1], text.data() + written, text.size() - written);
      if (n <= 0) _exit(2);
      written += static_cast<size_t>(n);
    }
    _exit(0);
  }
  close(fds[1]);
  const auto deadline = std::chrono::steady_clock::now() +
                        std::chrono::duration<double>(seconds + kGraceSeconds);
  std::string text;
  bool finished = false;
  for (;;) {
    const double left =
        std::chrono::duration<double>(deadline - std::chrono::steady_clock::now()).count();
    if (left <= 0) break;
    pollfd pfd{fds[0], POLLIN, 0};
    if (poll(&pfd, 1, static_cast<int>(std::ceil(left * 1000))) <= 0) continue;
    char buffer[65536];
    const ssize_t n = read(fds[0], buffer, sizeof buffer);
    if (n <= 0) {
      finished = true;  // end of file: the child wrote everything and exited
      break;
    }
    text.append(buffer, static_cast<size_t>(n));
  }
  close(fds[0]);
  if (!finished) kill(pid, SIGKILL);
  int status = 0;
  waitpid(pid, &status, 0);
  if (!finished || !WIFEXITED(status) || WEXITSTATUS(status) != 0 || text.empty()) return stopped;
  std::istringstream in(text);
  MilpOutcome outcome;
  size_t count = 0;
  in >> outcome.proven >> outcome.objective_seconds >> outcome.bound_seconds >> outcome.nodes >>
      count;
  outcome.chosen.resize(count);
  for (int& c : outcome.chosen) in >> c;
  in.ignore(1);
  std::getline(in, outcome.status);
  if (outcome.objective_seconds < 0) outcome.objective_seconds = kInf;
  if (outcome.bound_seconds < 0) outcome.bound_seconds = kInf;
  return outcome;
}

#endif  // STRATOS_HAVE_CBC

}  // namespace

bool IlpSearcher::Available() {
#ifdef STRATOS_HAVE_CBC
  return true;
#else
  return false;
#endif
}

SearchResult IlpSearcher::Search(const Problem& problem, const SearchOptions& options) {
  options.Validate();
  // Interleaving the ILP does not price exactly: its plain optimum, offered interleaved.
  const std::vector<int> exact_virtual_stages =
      ExactVirtualStages(problem, options.space.virtual_stages);
  if (!plain_only_ && options.space.OffersInterleaving() && exact_virtual_stages.size() == 1)
    return InterleavingSearcher(std::make_unique<IlpSearcher>(ilp_options_, true))
        .Search(problem, options);
  const bool interleave_here = !plain_only_ && exact_virtual_stages.size() > 1;
  SearchRun run(Name(), options);
  const SearchClock::time_point start = run.Start();
  const SearchSpace space = SearchSpace::Build(problem, options.space);
  const CostModel cost_model(problem);
  const int L = problem.NumLayers();
  const int max_stages = std::min(space.max_stages, L);
  const bool heterogeneous = space.Heterogeneous();

  SearchResult& result = run.Result();
  SearchSummary& summary = run.Summary();

#ifndef STRATOS_HAVE_CBC
  (void)cost_model;
  (void)max_stages;
  (void)start;
  (void)result;
  (void)summary;
  return run.Finish(TerminationType::kDeclined,
                    "built without COIN-OR CBC: the ILP baseline needs Debian's "
                    "coinor-libcbc-dev at build time");
#else
  double best = kInf;
  auto improve = [&](const Plan& plan, double seconds) {
    best = seconds;
    result.plan = plan;
    run.NoteImprovement(seconds);
  };

  // The warm start: first incumbent, and CBC's MIP start for its microbatch count.
  std::string warm_note;
  std::optional<Estimate> warm_estimate;
  if (ilp_options_.warm_start) {
    const Plan& warm = *ilp_options_.warm_start;
    std::string why;
    try {
      ValidatePlan(problem, warm, "warm start");
      Estimate estimate = Evaluate(cost_model, warm);
      const bool m_in_space =
          std::find(space.num_microbatches.begin(), space.num_microbatches.end(),
                    warm.num_microbatches) != space.num_microbatches.end();
      if (!estimate.Fits()) {
        why = estimate.MemoryViolation();
      } else if (warm.schedule != problem.training.schedule) {
        why = fmt::format("schedule {} differs from the problem's {}", ScheduleName(warm.schedule),
                          ScheduleName(problem.training.schedule));
      } else if (!m_in_space) {
        why = fmt::format("num_microbatches {} is not in the search space", warm.num_microbatches);
      } else if (warm.virtual_stages > 1 &&
                 std::find(exact_virtual_stages.begin(), exact_virtual_stages.end(),
                           warm.virtual_stages) == exact_virtual_stages.end()) {
        why = fmt::format("{} virtual stages per rank are not searched here",
                          warm.virtual_stages);
      } else if (warm.NumPipelineRanks() < space.min_stages ||
                 warm.NumPipelineRanks() > max_stages) {
        why = fmt::format("{} stages outside [{}, {}]", warm.NumPipelineRanks(), space.min_stages,
                          max_stages);
      } else if (!SearchSpace::GroupsInRuns(StageGroups(warm))) {
        why = "its stages do not visit the node groups in runs (a group's stages consecutive)";
      } else {
        for (const StagePlan& stage : warm.stages)
          if (std::find(space.configs.begin(), space.configs.end(), stage.config) ==
              space.configs.end()) {
            why = fmt::format("stage configuration {} is not in the search space",
                              stage.config.Label());
            break;
          }
      }
      if (why.empty()) {
        improve(warm, estimate.iteration_seconds);
        warm_estimate = estimate;
      }
    } catch (const InputError& error) {
      why = error.what();
    }
    warm_note = why.empty() ? fmt::format("; warm start {:.6g} s", best)
                            : fmt::format("; warm start ignored: {}", why);
  }

  // The units of work: one per microbatch count, and on a heterogeneous cluster one per count
  // and order of node groups the runs of stages visit (SearchSpace::GroupOrders, as the DP). An
  // order of more groups than max_stages has no plan and no unit. Each unit is one MILP with
  // the run's group fixed for every column, so the per-run budgets and the sends between groups
  // are exact, linear data (see ilp_searcher.h).
  // (A homogeneous cluster's one group: the order {0}.)
  std::vector<std::vector<int>> orders;
  for (std::vector<int>& order :
       heterogeneous ? space.GroupOrders() : std::vector<std::vector<int>>{{0}})
    if (static_cast<int>(order.size()) <= max_stages) orders.push_back(std::move(order));
  std::vector<GroupSpace> groups(space.group_devices.size());
  for (size_t g = 0; g < groups.size(); ++g) {
    groups[g].devices = space.group_devices[g];
    groups[g].capacity_bytes = cost_model.DeviceMemoryCapacityBytes(static_cast<int>(g));
  }
  for (size_t c = 0; c < space.configs.size(); ++c) {
    GroupSpace& group = groups[space.configs[c].node_group];
    group.configs.push_back(space.configs[c]);
    group.index.push_back(static_cast<int>(c));
  }
  const int num_m = static_cast<int>(space.num_microbatches.size());
  // With virtual stages v > 1 offered and priced exactly (one node group, InterleavesExactly),
  // a unit per (m, v, p) more: plans of exactly p pipeline ranks of v chunks, for every p from 2
  // to max_stages with p v <= L (as the DP's units).
  std::vector<std::pair<int, int>> interleaved_units;  // (v, p)
  for (int v : exact_virtual_stages)
    for (int p = std::max(2, space.min_stages); interleave_here && v > 1 && p <= max_stages &&
                                                p * v <= L;
         ++p)
      interleaved_units.push_back({v, p});
  const int num_units =
      num_m * static_cast<int>(orders.size() + interleaved_units.size());
  std::map<int, InterleavedCostModel> interleaved_models;  // by v
  // "m=4", "m=4, groups 1>0" or "m=4, 2 ranks x 4 virtual stages" (progress lines, messages).
  auto describe = [&](const ColumnSet& set) {
    if (set.v > 1)
      return fmt::format("m={}, {} ranks x {} virtual stages", set.m, set.ranks, set.v);
    if (!heterogeneous) return fmt::format("m={}", set.m);
    std::string text;
    for (int g : set.order) text += fmt::format("{}{}", text.empty() ? "" : ">", g);
    return fmt::format("m={}, groups {}", set.m, text);
  };

  // Columns of every unit, and the best uniform plan (of each group alone) as a first incumbent
  // (a primal heuristic: with a good cutoff CBC settles most units at the root).
  struct PerM {
    ColumnSet set;
    double bound = 0;      // lower bound on this unit's optimum (or >= the final best)
    bool settled = false;  // bound proven (MILP finished, or cheap bound >= incumbent)
    bool feasible = false; // some chain of columns exists (ignoring devices and T)
    double seconds_given = 0;  // CBC time of its last attempt
  };
  std::vector<PerM> per_m;
  bool stopped_by_time = false;
  bool stopped_by_evaluations = false;
  size_t num_columns = 0;       // built (valid, fitting, Pareto-optimal, on a chain)
  size_t num_held_columns = 0;  // kept by the units after the pruning by the incumbent so far
  size_t num_milp_columns = 0;  // in the MILPs solved, after pruning by the incumbent
  double uniform_best = kInf;
  double balanced_best = kInf;  // BalancedRuns, over the orders of several groups
  const Deadline deadline = run.MakeDeadline();
  const double memory_limit = MemoryLimitBytes(options);
  bool declined = false;  // the columns would pass the memory limit
  // Builds the columns of one unit (priced by `model`) into per_m; false when the search stops
  // building (stopped_by_time or declined set).
  auto build_unit = [&](const CostModel& model, const std::vector<int>& order,
                        const RunTables& run_tables, int m, int v, int ranks) {
    PerM entry;
    const double room = memory_limit / kBytesPerColumn - static_cast<double>(num_held_columns);
    try {
      entry.set = BuildColumns(model, space, groups, order, run_tables, m, max_stages, deadline,
                               static_cast<size_t>(std::max(0.0, room)), v, ranks);
    } catch (const Deadline::Expired&) {
      stopped_by_time = true;
      return false;
    } catch (const ColumnLimitReached&) {
      declined = true;
      return false;
    }
    entry.bound = entry.set.cheap_bound;
    entry.feasible = std::isfinite(entry.set.cheap_bound);
    num_columns += entry.set.columns.size();
    // Keep only the columns that can beat the incumbent so far (what the later Tighten with a
    // better one keeps is the same: pruning is monotone in the incumbent), so that the many
    // units of a heterogeneous cluster do not hold every column they built.
    if (std::isfinite(best)) {
      Tighten(entry.set, best);
      entry.set.columns.shrink_to_fit();
    }
    num_held_columns += entry.set.columns.size();
    per_m.push_back(std::move(entry));
    return true;
  };
  for (int m : space.num_microbatches) {
    // The stage tables of this count by (group, group received from, group sent to; -1: its
    // own), shared by its orders.
    std::map<std::tuple<int, int, int>, std::unique_ptr<StageTable>> tables;
    auto table_of = [&](int g, int previous, int next) -> const StageTable& {
      std::unique_ptr<StageTable>& table = tables[{g, previous, next}];
      if (!table)
        table = std::make_unique<StageTable>(cost_model, groups[g].configs, m, previous, next);
      return *table;
    };
    for (const std::vector<int>& order : orders) {
      if (run.OutOfTime()) {
        stopped_by_time = true;
        break;
      }
      const int K = static_cast<int>(order.size());
      RunTables run_tables(K);
      for (int r = 0; r < K; ++r)
        for (int pk = 0; pk < 2; ++pk)
          for (int nk = 0; nk < 2; ++nk)
            run_tables[r][pk][nk] =
                (pk == 1 && r == 0) || (nk == 1 && r + 1 == K)
                    ? nullptr
                    : &table_of(order[r], pk ? order[r - 1] : -1, nk ? order[r + 1] : -1);
      if (!build_unit(cost_model, order, run_tables, m, 1, 0)) break;
      if (K > 1) {
        std::optional<Plan> balanced;
        try {
          balanced = BalancedRuns(cost_model, space, groups, order, run_tables, m, max_stages,
                                  deadline);
        } catch (const Deadline::Expired&) {
          stopped_by_time = true;
          break;
        }
        if (balanced) {
          const Estimate estimate = Evaluate(cost_model, *balanced);
          STRATOS_CHECK(estimate.Fits(), "balanced plan does not fit: {}",
                        estimate.MemoryViolation());
          balanced_best = std::min(balanced_best, estimate.iteration_seconds);
          if (estimate.iteration_seconds < best) improve(*balanced, estimate.iteration_seconds);
        }
        continue;
      }
      if (std::optional<Plan> uniform =
              BestUniform(cost_model, space, groups[order[0]], *run_tables[0][0][0], max_stages)) {
        const Estimate plain = Evaluate(cost_model, *uniform);
        STRATOS_CHECK(plain.Fits(), "uniform plan does not fit: {}", plain.MemoryViolation());
        // With virtual stages, its fastest interleaved form (the interleaved units' cutoff).
        long forms = 0;
        const auto [plan, estimate] =
            interleave_here
                ? FastestInterleaving(cost_model, *uniform, plain, exact_virtual_stages, &forms)
                : std::pair<Plan, Estimate>{*uniform, plain};
        uniform_best = std::min(uniform_best, estimate.iteration_seconds);
        if (estimate.iteration_seconds < best) improve(plan, estimate.iteration_seconds);
      }
    }
    // The interleaved units of this count, each v's stages priced by its own cost model.
    std::map<int, std::unique_ptr<StageTable>> interleaved_tables;  // by v
    for (auto [v, p] : interleaved_units) {
      if (stopped_by_time || declined) break;
      if (run.OutOfTime()) {
        stopped_by_time = true;
        break;
      }
      const CostModel& model = interleaved_models.try_emplace(v, problem, v).first->second
                                   .cost_model();
      std::unique_ptr<StageTable>& table = interleaved_tables[v];
      if (!table) table = std::make_unique<StageTable>(model, groups[0].configs, m, -1, -1);
      RunTables run_tables(1);
      run_tables[0][0][0] = table.get();
      run_tables[0][0][1] = run_tables[0][1][0] = run_tables[0][1][1] = nullptr;
      if (!build_unit(model, {0}, run_tables, m, v, p)) break;
    }
    if (stopped_by_time || declined) break;
  }
  if (declined) {
    summary.termination = TerminationType::kDeclined;
    summary.message = fmt::format(
        "problem too large for the ILP: the columns of {} layers pass {:.0f} (about {:.0f} "
        "bytes each with CBC's copies), over the memory limit of {:.1f} GiB (--memory-limit)",
        L, memory_limit / kBytesPerColumn, kBytesPerColumn, memory_limit / (1u << 30));
    result.plan.reset();
    return run.Finish();
  }
  // Drop the columns that cannot beat the incumbent, then solve the units in order of their
  // bound (the best-looking first, so the cutoff tightens early).
  for (PerM& entry : per_m) {
    if (std::isfinite(best)) Tighten(entry.set, best);
    entry.bound = std::max(entry.bound, std::min(entry.set.cheap_bound, best));
  }
  std::vector<size_t> order(per_m.size());
  for (size_t k = 0; k < order.size(); ++k) order[k] = k;
  std::stable_sort(order.begin(), order.end(), [&](size_t x, size_t y) {
    return per_m[x].set.cheap_bound < per_m[y].set.cheap_bound;
  });

  int settled_by_bound = 0;
  std::string abandoned;
  // Solves (or settles by its bound) one unit with at most `seconds` of CBC time.
  auto attempt = [&](PerM& entry, double seconds) {
    if (std::isfinite(best)) Tighten(entry.set, best);
    // A bound on min(this unit's optimum, best): what the lower bound of the search needs.
    entry.bound = std::max(entry.bound, std::min(entry.set.cheap_bound, best));
    const ColumnSet& set = entry.set;
    if (!std::isfinite(set.cheap_bound) || set.cheap_bound >= best) {
      entry.settled = true;
      if (entry.feasible) ++settled_by_bound;
      return;
    }
    std::vector<int> mip_start;
    double cutoff = best;
    if (warm_estimate && set.v == 1 && ilp_options_.warm_start->virtual_stages == 1 &&
        ilp_options_.warm_start->num_microbatches == set.m &&
        RunGroups(*ilp_options_.warm_start) == set.order) {
      mip_start = MapPlanToColumns(set, *ilp_options_.warm_start, *warm_estimate);
      // Let CBC accept the MIP start, whose value is at most the incumbent's.
      if (!mip_start.empty()) cutoff = best * (1.0 + 1e-9);
    }
    const MilpOutcome outcome = SolveMilpWithDeadline(set, space, max_stages, L, cutoff,
                                                      mip_start, seconds, ilp_options_.solver_log);
    ++summary.evaluations;
    summary.iterations += outcome.nodes;
    num_milp_columns += set.columns.size();
    if (!outcome.chosen.empty()) {
      Plan plan;
      plan.global_batch_size = problem.training.global_batch_size;
      plan.num_microbatches = set.m;
      plan.schedule = problem.training.schedule;
      int expected_first = 0;
      for (int c : outcome.chosen) {
        const Column& col = set.columns[c];
        STRATOS_CHECK(col.first_layer == expected_first, "MILP solution for {} is not a chain",
                      describe(set));
        plan.stages.push_back({col.first_layer, col.last_layer, space.configs[col.config]});
        expected_first = col.last_layer;
      }
      STRATOS_CHECK(expected_first == L, "MILP solution for {} ends at layer {} of {}",
                    describe(set), expected_first, L);
      if (set.v > 1) {
        // Each rank's layers in v chunks: priced as the rank's plain stage (InterleavesExactly).
        STRATOS_CHECK(plan.NumStages() == set.ranks, "MILP solution for {} has {} ranks",
                      describe(set), plan.NumStages());
        std::optional<Plan> interleaved = InterleavePlan(plan, set.v);
        STRATOS_CHECK(interleaved.has_value(), "MILP plan {} has no {} virtual stages",
                      plan.Summary(), set.v);
        plan = std::move(*interleaved);
      }
      // The runs visit the unit's groups in its order, each within its budget (Evaluate()
      // checks the budgets; the runs are the search space's rule).
      STRATOS_CHECK(RunGroups(plan) == set.order && SearchSpace::GroupsInRuns(StageGroups(plan)),
                    "MILP solution for {} leaves the order of its node groups: {}",
                    describe(set), plan.Summary());
      const Estimate estimate = Evaluate(cost_model, plan);
      STRATOS_CHECK(estimate.Fits(), "MILP plan does not fit: {}", estimate.MemoryViolation());
      STRATOS_CHECK(std::abs(estimate.iteration_seconds - outcome.objective_seconds) <=
                        1e-6 * std::abs(estimate.iteration_seconds),
                    "MILP objective {:.12g} s != Evaluate() {:.12g} s for {}",
                    outcome.objective_seconds, estimate.iteration_seconds, plan.Summary());
      if (estimate.iteration_seconds < best) improve(plan, estimate.iteration_seconds);
    }
    entry.bound = std::max(entry.bound, outcome.bound_seconds);
    entry.settled = outcome.proven;
    if (outcome.status.rfind("abandoned", 0) == 0)
      abandoned = fmt::format("; {}: CBC {}", describe(set), outcome.status);
    if (options.progress)
      std::fprintf(stderr,
                   "[ilp %8.2fs] %s: %zu columns, %s, %ld nodes, bound %.6g s, best %.6g s\n",
                   SecondsSince(start), describe(set).c_str(), set.columns.size(),
                   outcome.status.c_str(), outcome.nodes, outcome.bound_seconds, best);
  };
  // Pass 1 shares the remaining time fairly among the units still open, so one hard unit does
  // not starve the others; pass 2 gives the units CBC did not finish all the time left.
  for (int pass = 0; pass < 2 && !stopped_by_time && !stopped_by_evaluations; ++pass) {
    std::vector<size_t> open_counts;
    for (size_t k : order)
      if (!per_m[k].settled) open_counts.push_back(k);
    for (size_t n = 0; n < open_counts.size(); ++n) {
      PerM& entry = per_m[open_counts[n]];
      if (entry.settled) continue;
      const double remaining = options.time_limit_seconds - SecondsSince(start);
      if (remaining <= 0) {
        stopped_by_time = true;
        break;
      }
      if (run.OutOfEvaluations(summary.evaluations)) {
        stopped_by_evaluations = true;
        break;
      }
      // Pass 2 re-solves from scratch: only worth it with more time than pass 1 gave.
      if (pass == 1 && entry.seconds_given >= 0.5 * remaining) continue;
      entry.seconds_given = pass == 0 ? remaining / (open_counts.size() - n) : remaining;
      attempt(entry, entry.seconds_given);
    }
  }
  if (run.OutOfTime()) stopped_by_time = true;

  int num_settled = 0;
  double lower_bound = best;
  for (const PerM& entry : per_m) {
    if (entry.settled) ++num_settled;
    lower_bound = std::min(lower_bound, entry.bound);
  }
  // Units whose columns were never built have no bound but 0.
  if (static_cast<int>(per_m.size()) < num_units) lower_bound = std::min(lower_bound, 0.0);
  const bool all_settled = num_settled == num_units;
  summary.best_iteration_seconds = best;
  // What a unit is, in the messages: a microbatch count, with several groups a pair, with
  // virtual stages a microbatch count and a plain or interleaved pipeline.
  const std::string units =
      heterogeneous ? fmt::format("(microbatch count, node-group order) pairs ({} x {})", num_m,
                                  orders.size())
      : interleaved_units.empty()
          ? std::string("microbatch counts")
          : fmt::format("(microbatch count, pipeline) units ({} x (plain + {} of ranks x virtual "
                        "stages))",
                        num_m, interleaved_units.size());
  const std::string work = fmt::format(
      "{} MILPs over {} {} ({} settled by their bound), {} columns built, {} in "
      "the MILPs; best uniform plan {}{}{}{}",
      summary.evaluations, num_units, units, settled_by_bound, num_columns, num_milp_columns,
      std::isfinite(uniform_best) ? fmt::format("{:.9g} s", uniform_best) : std::string("none"),
      heterogeneous ? fmt::format(", best balanced plan over several groups {}",
                                  std::isfinite(balanced_best)
                                      ? fmt::format("{:.9g} s", balanced_best)
                                      : std::string("none"))
                    : std::string(),
      warm_note, abandoned);
  const std::string units_short =
      heterogeneous || !interleaved_units.empty() ? "units" : "microbatch counts";

  if (all_settled && result.plan) {
    summary.termination = TerminationType::kOptimal;
    summary.lower_bound_seconds = best;
    summary.message = fmt::format("optimal: objective {:.9g} s, bound {:.9g} s, gap 0 %; {}; {}",
                                  best, best, work, result.plan->Summary());
  } else if (all_settled) {
    summary.termination = TerminationType::kInfeasible;
    const std::string why =
        heterogeneous
            ? fmt::format("no feasible plan: on no order of the {} node groups do {} to {} stages "
                          "fit in device memory with any microbatch count",
                          space.group_devices.size(), space.min_stages, max_stages)
            : ExplainNoFeasiblePlan(cost_model, space, max_stages);
    summary.message = fmt::format("{}; {}", why, work);
  } else {
    const bool by_time = stopped_by_time || !stopped_by_evaluations;
    summary.termination = by_time ? TerminationType::kTimeLimit
                                  : TerminationType::kEvaluationLimit;
    const std::string why = by_time ? "stopped by the time limit"
                                    : "stopped by the evaluation (MILP) limit";
    if (std::isfinite(lower_bound) && lower_bound > 0) summary.lower_bound_seconds = lower_bound;
    if (result.plan) {
      const double gap = best > 0 ? std::max(0.0, (best - lower_bound) / best) : 0.0;
      summary.message = fmt::format(
          "{} with {} of {} {} settled: objective {:.9g} s, bound {:.9g} s, gap "
          "{:.4f} %; {}; {}",
          why, num_settled, num_units, units_short, best, lower_bound, 100.0 * gap, work,
          result.plan->Summary());
    } else {
      summary.message = fmt::format(
          "{} before any feasible plan was found ({} of {} {} settled, bound "
          "{:.9g} s); {}",
          why, num_settled, num_units, units_short, lower_bound, work);
    }
  }
  return run.Finish();
#endif
}

}  // namespace stratos
