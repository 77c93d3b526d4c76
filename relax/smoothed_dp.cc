#include "relax/smoothed_dp.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>

#include "costmodel/error.h"
#include "costmodel/min_plus.h"

namespace stratos {
namespace {

constexpr double kInf = std::numeric_limits<double>::infinity();
// exp(-40) ~ 4e-18: terms this far above the running minimum do not change a double sum.
constexpr double kNegligible = 40.0;
// Largest (layer ranges x configs) whose terms SmoothedStageDp keeps between evaluations
// (32 bytes each).
constexpr double kMaxCachedRangeTerms = 8e6;

// Soft-min accumulator in the first-order expectation semiring: value -tau log sum exp(-x / tau)
// and the Gibbs mean of N derivative channels (d/dtheta, d/dphi, the devices of each node
// group). sum and d are relative to exp(-best / tau). tau = 0 keeps the argmin only.
template <int N>
struct SoftMinN {
  double best = kInf;
  double sum = 0;
  double d[N] = {};
  int arg = -1;

  void Add(double x, const double* dx, int index, double tau) {
    if (!(x < kInf)) return;
    if (tau <= 0) {
      if (x < best) {
        best = x;
        sum = 1;
        for (int c = 0; c < N; ++c) d[c] = dx[c];
        arg = index;
      }
      return;
    }
    if (x < best) {
      const double f = sum > 0 ? std::exp((x - best) / tau) : 0.0;
      sum = sum * f + 1;
      for (int c = 0; c < N; ++c) d[c] = d[c] * f + dx[c];
      best = x;
      arg = index;
    } else {
      const double z = (best - x) / tau;
      if (z < -kNegligible) return;
      const double w = std::exp(z);
      sum += w;
      for (int c = 0; c < N; ++c) d[c] += w * dx[c];
    }
  }
  void Merge(const SoftMinN& o, double tau) {
    if (!(o.best < kInf)) return;
    if (tau <= 0) {
      if (o.best < best) *this = o;
      return;
    }
    if (o.best < best) {
      const double f = sum > 0 ? std::exp((o.best - best) / tau) : 0.0;
      sum = sum * f + o.sum;
      for (int c = 0; c < N; ++c) d[c] = d[c] * f + o.d[c];
      best = o.best;
      arg = o.arg;
    } else {
      const double z = (best - o.best) / tau;
      if (z < -kNegligible) return;
      const double w = std::exp(z);
      sum += w * o.sum;
      for (int c = 0; c < N; ++c) d[c] += w * o.d[c];
    }
  }
  double Value(double tau) const {
    if (!(best < kInf)) return kInf;
    return tau > 0 ? best - tau * std::log(sum) : best;
  }
  double Mean(int c) const { return sum > 0 ? d[c] / sum : 0.0; }
};

// A soft-min as the DP reads it: its value and channel means, taken once (the DP reads an edge
// once per stage count and order that uses it).
template <int N>
struct EdgeN {
  double value = kInf;
  double mean[N] = {};
  int arg = -1;
};

// softplus_tau(z) = tau log(1 + exp(z / tau)) and its derivative sigma(z / tau); relu at tau = 0.
inline void SoftPlus(double z, double tau, double* value, double* slope) {
  if (tau <= 0) {
    *value = z > 0 ? z : 0;
    *slope = z > 0 ? 1 : 0;
    return;
  }
  const double u = z / tau;
  if (u > 30) {
    *value = z;
    *slope = 1;
  } else if (u < -30) {
    *value = 0;
    *slope = 0;
  } else {
    const double ex = std::exp(u);
    *value = tau * std::log1p(ex);
    *slope = ex / (1 + ex);
  }
}

// A config that fits a stage (layer range) at `fits` in-flight levels, at `units` devices (in the
// DP's unit) and cost a = t + c + (M - 1) relu(t - theta) + relu(e - phi).
struct FrontierCandidate {
  int units, slot, fits;
  double a;
};
struct FrontierEntry {
  int units, slot;
  double a;
};

// Appends a strictly decreasing frontier to *entries from candidates offered in ascending units:
// a candidate is kept when it costs less than every one before it, the cheapest of each mesh
// size.
class FrontierBuilder {
 public:
  explicit FrontierBuilder(std::vector<FrontierEntry>* entries)
      : entries_(entries), begin_(entries->size()) {}
  void Offer(int units, int slot, double a) {
    if (!(a < least_)) return;
    least_ = a;
    if (entries_->size() > begin_ && entries_->back().units == units) entries_->pop_back();
    entries_->push_back({units, slot, a});
  }

 private:
  std::vector<FrontierEntry>* entries_;
  size_t begin_;
  double least_ = kInf;
};

// Appends the frontier, at in-flight level v (0-based), of `candidates` (ascending units): those
// that fit at level v (FrontierBuilder's rule).
void AppendFrontier(const std::vector<FrontierCandidate>& candidates, int v,
                    std::vector<FrontierEntry>* entries) {
  FrontierBuilder frontier(entries);
  for (const FrontierCandidate& c : candidates)
    if (c.fits > v) frontier.Offer(c.units, c.slot, c.a);
}

// The edge sets of some orders of node groups: a stage's group, the group it receives from when
// it opens its run after another group's (else -1) and the group it sends to when it closes its
// run before another group's (else -1); one set (-1, -1, -1) for the one position of a
// homogeneous cluster. Orders that share a set (a group with the same neighbours) share its
// edges.
struct EdgeSet {
  int group, from, to;
  int position;  // of the set in the first order that has it
};
struct EdgeSets {
  std::vector<EdgeSet> sets;
  // Per order, position j and opens * 2 + closes: the index into sets; -1 where the stage
  // cannot open (j = 0) or close (the last position) a run next to another group's.
  std::vector<std::vector<std::array<int, 4>>> index;
};
// Whether the stage at position j of J can open / close a run next to another group's: 2 if so.
inline int OpensVariants(int j) { return j > 0 ? 2 : 1; }
inline int ClosesVariants(int j, int J) { return j + 1 < J ? 2 : 1; }

// position_lists: each order's groups ({-1} for a homogeneous cluster).
EdgeSets MakeEdgeSets(const std::vector<std::vector<int>>& position_lists) {
  EdgeSets out;
  for (const std::vector<int>& positions : position_lists) {
    const int J = static_cast<int>(positions.size());
    std::vector<std::array<int, 4>>& index =
        out.index.emplace_back(J, std::array<int, 4>{-1, -1, -1, -1});
    for (int j = 0; j < J; ++j)
      for (int in = 0; in < OpensVariants(j); ++in)
        for (int out_ = 0; out_ < ClosesVariants(j, J); ++out_) {
          const EdgeSet key{positions[j], in ? positions[j - 1] : -1,
                            out_ ? positions[j + 1] : -1, j};
          int found = -1;
          for (size_t e = 0; e < out.sets.size() && found < 0; ++e)
            if (out.sets[e].group == key.group && out.sets[e].from == key.from &&
                out.sets[e].to == key.to)
              found = static_cast<int>(e);
          if (found < 0) {
            found = static_cast<int>(out.sets.size());
            out.sets.push_back(key);
          }
          index[j][in * 2 + out_] = found;
        }
  }
  return out;
}

}  // namespace

std::vector<int> CoarseCutPositions(const RelaxTables& tables, int coarse_layers,
                                    int max_stages) {
  STRATOS_CHECK(coarse_layers == 0 || coarse_layers >= 2, "coarse_layers {}", coarse_layers);
  STRATOS_CHECK(max_stages >= 0, "max_stages {}", max_stages);
  const int L = tables.num_layers;
  if (coarse_layers == 0 || L <= coarse_layers) return {};
  int stride = (L + coarse_layers - 1) / coarse_layers;
  if (max_stages > 0) stride = std::min(stride, std::max(2, L / max_stages));
  std::vector<int> count(tables.num_classes, 0), first(tables.num_classes, L);
  for (int l = 0; l < L; ++l) {
    const int c = tables.layer_class[l];
    ++count[c];
    first[c] = std::min(first[c], l);
  }
  int best = -1;
  for (int c = 0; c < tables.num_classes; ++c) {
    if (count[c] > coarse_layers - 1) continue;
    if (best < 0 || count[c] > count[best] || (count[c] == count[best] && first[c] < first[best]))
      best = c;
  }
  if (best >= 0 && count[best] >= 2 && 8 * count[best] >= coarse_layers) {
    std::vector<int> cuts{0};
    for (int l = 1; l < L; ++l)
      if (tables.layer_class[l] == best) cuts.push_back(l);
    cuts.push_back(L);
    int gap = 0;
    for (size_t a = 1; a < cuts.size(); ++a) gap = std::max(gap, cuts[a] - cuts[a - 1]);
    const int spacing = (L + count[best] - 1) / count[best];
    if (gap <= 2 * spacing) return cuts;
  }
  std::vector<int> cuts;
  for (int l = 0; l < L; l += stride) cuts.push_back(l);
  cuts.push_back(L);
  return cuts;
}

SmoothedStageDp::SmoothedStageDp(const RelaxTables& tables, int microbatch_option,
                                 const std::vector<int>& configs,
                                 const std::vector<int>& cut_positions)
    : tables_(tables), m_(microbatch_option), L_(tables.num_layers), cuts_(cut_positions) {
  if (cuts_.empty()) {
    cuts_.resize(L_ + 1);
    std::iota(cuts_.begin(), cuts_.end(), 0);
  }
  STRATOS_CHECK(cuts_.size() >= 2 && cuts_.front() == 0 && cuts_.back() == L_,
                "cut positions must run from 0 to {}", L_);
  for (size_t a = 1; a < cuts_.size(); ++a)
    STRATOS_CHECK(cuts_[a - 1] < cuts_[a], "cut positions must ascend strictly");
  N_ = static_cast<int>(cuts_.size()) - 1;
  STRATOS_CHECK(m_ >= 0 && m_ < tables.num_microbatch_options, "microbatch option {}", m_);
  microbatch_count_ = tables.num_microbatches[m_];
  G_ = tables.num_groups;
  STRATOS_CHECK(G_ >= 1 && G_ <= kMaxRelaxGroups, "{} node groups", G_);
  for (int k : configs) {
    STRATOS_CHECK(k >= 0 && k < tables.num_configs, "config {}", k);
    if (!tables.Valid(k, m_)) continue;
    configs_.push_back(k);
    group_.push_back(tables.configs[k].node_group);
    capacity_.push_back(tables.CapacityBytes(k) * (1.0 - 1e-9));  // as PlanPolisher
  }
  const int K = static_cast<int>(configs_.size());
  const size_t stride = static_cast<size_t>(L_) + 1;
  for (auto* v : {&prefix_t_, &prefix_e_, &prefix_c_, &prefix_fixed_, &prefix_activation_})
    v->assign(K * stride, 0.0);
  overhead_.resize(static_cast<size_t>(K) * 4);
  // A bucketed DP reduction anywhere (TrainingSpec::dp_bucket_bytes): its S, W and b apart.
  for (int k : configs_) {
    for (int c = 0; c < tables.num_classes; ++c)
      bucketed_ = bucketed_ || tables.Layer(c, k, m_).HasBucketedDp();
    for (int f = 0; f < 4; ++f)
      bucketed_ = bucketed_ || tables.Overhead(k, m_, f >= 2, f % 2 == 1).HasBucketedDp();
  }
  if (bucketed_) {
    prefix_sync_.assign(K * stride, 0.0);
    prefix_window_.assign(K * stride, 0.0);
    overhead_bucket_.resize(static_cast<size_t>(K) * 4);
  }
  for (int i = 0; i < K; ++i) {
    const int k = configs_[i];
    devices_.push_back(tables.configs[k].NumDevices());
    for (int l = 0; l < L_; ++l) {
      const TermScalars& x = tables.Layer(tables.layer_class[l], k, m_);
      const size_t at = i * stride + l;
      prefix_t_[at + 1] = prefix_t_[at] + x.microbatch_seconds;
      prefix_e_[at + 1] = prefix_e_[at] + x.additive_tail_seconds;
      if (bucketed_) {
        prefix_sync_[at + 1] = prefix_sync_[at] + x.bucketed_sync_seconds;
        prefix_window_[at + 1] = prefix_window_[at] + x.backward_window_seconds;
      }
      prefix_c_[at + 1] = prefix_c_[at] + x.one_time_seconds;
      prefix_fixed_[at + 1] = prefix_fixed_[at] + x.state_bytes + x.working_bytes;
      prefix_activation_[at + 1] = prefix_activation_[at] + x.activation_bytes;
    }
    for (int first = 0; first < 2; ++first)
      for (int last = 0; last < 2; ++last) {
        const TermScalars& o = tables.Overhead(k, m_, first != 0, last != 0);
        overhead_[static_cast<size_t>(i) * 4 + first * 2 + last] = {
            o.microbatch_seconds, o.additive_tail_seconds, o.one_time_seconds,
            o.state_bytes + o.working_bytes, o.activation_bytes};
        if (bucketed_)
          overhead_bucket_[static_cast<size_t>(i) * 4 + first * 2 + last] = {
              o.bucketed_sync_seconds, o.backward_window_seconds, o.last_bucket_seconds};
      }
  }
  if (tables.schedule == Schedule::kGpipe) {
    levels_ = {microbatch_count_};
  } else {
    for (int v = 1; v <= std::min(microbatch_count_, tables.max_stages); ++v) levels_.push_back(v);
  }
  if (G_ > 1) {
    const size_t G1 = static_cast<size_t>(G_) + 1;
    cross_.resize(static_cast<size_t>(K) * 4 * G1 * G1);
    for (int i = 0; i < K; ++i)
      for (int first = 0; first < 2; ++first)
        for (int last = 0; last < 2; ++last) {
          const TermScalars& own = tables.Overhead(configs_[i], m_, first != 0, last != 0);
          for (size_t a = 0; a < G1; ++a)
            for (size_t b = 0; b < G1; ++b) {
              const TermScalars& x = tables.OverheadBetween(
                  configs_[i], m_, first != 0, last != 0, static_cast<int>(a) - 1,
                  static_cast<int>(b) - 1);
              cross_[(((static_cast<size_t>(i) * 2 + first) * 2 + last) * G1 + a) * G1 + b] = {
                  x.microbatch_seconds - own.microbatch_seconds,
                  x.additive_tail_seconds - own.additive_tail_seconds,
                  x.one_time_seconds - own.one_time_seconds};
            }
        }
  }
  by_size_.resize(K);
  std::iota(by_size_.begin(), by_size_.end(), 0);
  std::stable_sort(by_size_.begin(), by_size_.end(), [&](int a, int b) {
    return group_[a] != group_[b] ? group_[a] < group_[b] : devices_[a] < devices_[b];
  });
  pair_row_.assign(N_ + 1, 0);
  for (int i = 1; i <= N_; ++i) pair_row_[i] = pair_row_[i - 1] + (N_ - (i - 1));
  const size_t pairs = pair_row_[N_];
  if (static_cast<double>(pairs) * K <= kMaxCachedRangeTerms) {
    // Row i's terms are gathered in `row` and copied once into a vector of their exact size: a
    // table grown by reallocation would touch twice its pages, which costs more than the terms.
    range_rows_.resize(N_);
    range_begin_.assign(pairs, 0);
    range_end_.assign(pairs, 0);
    std::vector<RangeTerm> row, scratch;
    for (int i = 0; i < N_; ++i) {
      row.clear();
      for (int j = i + 1; j <= N_; ++j) {
        CollectRangeTerms(i, j, &scratch);
        range_begin_[PairIndex(i, j)] = row.size();
        row.insert(row.end(), scratch.begin(), scratch.end());
        range_end_[PairIndex(i, j)] = row.size();
        // Memory grows with j (layer terms are nonnegative; only the last stage's overhead
        // differs): once no config fits [i, j) for some j < L, none fits [i, j') for j' < L.
        if (scratch.empty() && j < N_ - 1) {
          for (int jj = j + 1; jj < N_; ++jj)
            range_begin_[PairIndex(i, jj)] = range_end_[PairIndex(i, jj)] = row.size();
          j = N_ - 1;
        }
      }
      range_rows_[i].assign(row.begin(), row.end());
    }
  }
}

void SmoothedStageDp::CollectRangeTerms(int first_cut, int last_cut,
                                        std::vector<RangeTerm>* out) const {
  out->clear();
  for (int slot : by_size_) {
    const Terms x = StageTerms(slot, cuts_[first_cut], cuts_[last_cut]);
    const int fits = FittingLevels(x, slot);
    if (fits > 0) out->push_back({x.t, x.e, x.c, slot, fits});
  }
}

const SmoothedStageDp::RangeTerm* SmoothedStageDp::RangeTerms(int first_cut, int last_cut,
                                                              std::vector<RangeTerm>* scratch,
                                                              size_t* count) const {
  if (!range_rows_.empty()) {
    const size_t at = PairIndex(first_cut, last_cut);
    *count = range_end_[at] - range_begin_[at];
    return range_rows_[first_cut].data() + range_begin_[at];
  }
  CollectRangeTerms(first_cut, last_cut, scratch);
  *count = scratch->size();
  return scratch->data();
}

SmoothedStageDp::Delta SmoothedStageDp::CrossDelta(int slot, bool first, bool last,
                                                    int previous_group, int next_group) const {
  const int own = group_[slot];
  const size_t a = previous_group < 0 || previous_group == own ? 0 : previous_group + 1;
  const size_t b = next_group < 0 || next_group == own ? 0 : next_group + 1;
  if (a == 0 && b == 0) return {0, 0, 0};
  const size_t G1 = static_cast<size_t>(G_) + 1;
  return cross_[(((static_cast<size_t>(slot) * 2 + (first ? 1 : 0)) * 2 + (last ? 1 : 0)) * G1 +
                 a) * G1 + b];
}

SmoothedStageDp::Terms SmoothedStageDp::StageTerms(int slot, int first_layer, int last_layer,
                                                    int previous_group, int next_group) const {
  const size_t stride = static_cast<size_t>(L_) + 1;
  const size_t a = slot * stride + first_layer, b = slot * stride + last_layer;
  const bool first = first_layer == 0, last = last_layer == L_;
  const Terms& o = overhead_[static_cast<size_t>(slot) * 4 + (first ? 2 : 0) + (last ? 1 : 0)];
  Terms x{prefix_t_[b] - prefix_t_[a] + o.t, prefix_e_[b] - prefix_e_[a] + o.e,
          prefix_c_[b] - prefix_c_[a] + o.c,
          prefix_fixed_[b] - prefix_fixed_[a] + o.fixed_bytes,
          prefix_activation_[b] - prefix_activation_[a] + o.activation_bytes};
  if (bucketed_) {
    const Bucket& ob = overhead_bucket_[static_cast<size_t>(slot) * 4 + (first ? 2 : 0) +
                                        (last ? 1 : 0)];
    x.e += BucketedDpExposedSeconds(prefix_sync_[b] - prefix_sync_[a] + ob.sync_seconds,
                                    prefix_window_[b] - prefix_window_[a] + ob.window_seconds,
                                    ob.last_bucket_seconds);
  }
  if (previous_group >= 0 || next_group >= 0) {
    const Delta d = CrossDelta(slot, first, last, previous_group, next_group);
    x.t += d.t;
    x.e += d.e;
    x.c += d.c;
  }
  return x;
}

int SmoothedStageDp::FittingLevels(const Terms& x, int slot) const {
  const double capacity = capacity_[slot];
  // levels_ ascending and the peak nondecreasing in the level: binary search.
  int lo = 0, hi = static_cast<int>(levels_.size());
  while (lo < hi) {
    const int mid = (lo + hi) / 2;
    if (x.fixed_bytes + levels_[mid] * x.activation_bytes <= capacity) {
      lo = mid + 1;
    } else {
      hi = mid;
    }
  }
  return lo;
}

int SmoothedStageDp::LevelIndex(int stages_left) const {
  if (tables_.schedule == Schedule::kGpipe) return 0;
  return std::min(microbatch_count_, stages_left) - 1;
}

double SmoothedStageDp::BalancedStageSeconds() const {
  // Per group, the least microbatch device-seconds of the whole model; the groups' device rates
  // add up: theta = 1 / sum_g (D_g / best_g) (= best / D on one group).
  std::vector<double> best(G_, kInf);
  for (size_t i = 0; i < configs_.size(); ++i) {
    const Terms x = StageTerms(static_cast<int>(i), 0, L_);
    best[group_[i]] = std::min(best[group_[i]], x.t * devices_[i]);
  }
  double rate = 0;
  for (int g = 0; g < G_; ++g)
    if (std::isfinite(best[g]) && best[g] > 0) rate += tables_.group_devices[g] / best[g];
  return rate > 0 ? 1.0 / rate : 0.0;
}

std::vector<int> SmoothedStageDp::Positions(const std::vector<int>& order) const {
  if (G_ == 1) {
    STRATOS_CHECK(order.empty() || order == std::vector<int>{0},
                  "a group order on a homogeneous cluster");
    return {-1};
  }
  STRATOS_CHECK(!order.empty() && static_cast<int>(order.size()) <= G_,
                "a heterogeneous DP needs an order of its {} node groups", G_);
  std::vector<char> seen(G_, 0);
  for (int g : order) {
    STRATOS_CHECK(g >= 0 && g < G_ && !seen[g], "order: group {} twice or out of range", g);
    seen[g] = 1;
  }
  return order;
}

bool SmoothedStageDp::PlanNeighbours(const DiscretePlan& plan, std::vector<int>* slots,
                                     std::vector<int>* previous, std::vector<int>* next) const {
  const int S = plan.NumStages();
  slots->assign(S, -1);
  previous->assign(S, -1);
  next->assign(S, -1);
  std::vector<int> groups(S);
  for (int s = 0; s < S; ++s) {
    const auto it = std::find(configs_.begin(), configs_.end(), plan.configs[s]);
    if (it == configs_.end()) return false;
    (*slots)[s] = static_cast<int>(it - configs_.begin());
    groups[s] = group_[(*slots)[s]];
  }
  if (!SearchSpace::GroupsInRuns(groups)) return false;
  for (int s = 0; s < S; ++s) {
    if (s > 0 && groups[s - 1] != groups[s]) (*previous)[s] = groups[s - 1];
    if (s + 1 < S && groups[s + 1] != groups[s]) (*next)[s] = groups[s + 1];
  }
  return true;
}

double SmoothedStageDp::PlanValue(const DiscretePlan& plan, const SmoothedDpPoint& p) const {
  if (plan.microbatch_option != m_) return kInf;
  const int S = plan.NumStages();
  const double mc = microbatch_count_;
  std::vector<int> slots, previous, next;
  if (!PlanNeighbours(plan, &slots, &previous, &next)) return kInf;
  double value = (mc - 1) * p.theta_seconds + p.phi_seconds;
  for (int g = 0; g < G_; ++g) value -= p.lambda_seconds[g] * tables_.group_devices[g];
  for (int s = 0; s < S; ++s) {
    const int slot = slots[s];
    const Terms x =
        StageTerms(slot, plan.boundaries[s], plan.boundaries[s + 1], previous[s], next[s]);
    if (FittingLevels(x, slot) <= LevelIndex(S - s)) return kInf;
    value += x.t + x.c + (mc - 1) * std::max(0.0, x.t - p.theta_seconds) +
             std::max(0.0, x.e - p.phi_seconds) + p.lambda_seconds[group_[slot]] * devices_[slot];
  }
  return value;
}

SmoothedDpPoint SmoothedStageDp::PlanLevels(const DiscretePlan& plan) const {
  STRATOS_CHECK(plan.microbatch_option == m_, "plan of microbatch option {}, not {}",
                plan.microbatch_option, m_);
  std::vector<int> slots, previous, next;
  STRATOS_CHECK(PlanNeighbours(plan, &slots, &previous, &next),
                "a plan with a config outside this DP or groups not in runs");
  SmoothedDpPoint levels{-kInf, -kInf, {}};
  for (int s = 0; s < plan.NumStages(); ++s) {
    const Terms x =
        StageTerms(slots[s], plan.boundaries[s], plan.boundaries[s + 1], previous[s], next[s]);
    levels.theta_seconds = std::max(levels.theta_seconds, x.t);
    levels.phi_seconds = std::max(levels.phi_seconds, x.e);
  }
  return levels;
}

SmoothedDpValue SmoothedStageDp::Evaluate(const SmoothedDpPoint& p, double tau,
                                          const std::vector<int>& order) {
  return EvaluateMany({p}, {tau}, order).front();
}

std::vector<SmoothedDpValue> SmoothedStageDp::EvaluateMany(
    const std::vector<SmoothedDpPoint>& points, const std::vector<double>& taus,
    const std::vector<int>& order) {
  return EvaluateOrders(points, taus,
                        order.empty() ? std::vector<std::vector<int>>{}
                                      : std::vector<std::vector<int>>{order});
}

std::vector<SmoothedDpValue> SmoothedStageDp::EvaluateOrders(
    const std::vector<SmoothedDpPoint>& points, const std::vector<double>& taus,
    const std::vector<std::vector<int>>& orders) {
  // Channels: d/dtheta, d/dphi and the devices of each group.
  switch (G_) {
    case 1:
      return EvaluateManyN<3>(points, taus, orders);
    case 2:
      return EvaluateManyN<4>(points, taus, orders);
    case 3:
      return EvaluateManyN<5>(points, taus, orders);
    case 4:
      return EvaluateManyN<6>(points, taus, orders);
    case 5:
      return EvaluateManyN<7>(points, taus, orders);
    default:
      static_assert(kMaxRelaxGroups == 6, "one case per group count");
      return EvaluateManyN<8>(points, taus, orders);
  }
}

template <int N>
std::vector<SmoothedDpValue> SmoothedStageDp::EvaluateManyN(
    const std::vector<SmoothedDpPoint>& points, const std::vector<double>& taus,
    const std::vector<std::vector<int>>& orders) {
  using SoftMin = SoftMinN<N>;
  // Copied from memory, not built in place (the in-place temporary stalled the stores).
  using Edge = EdgeN<N>;
  static const SoftMin kEmpty;
  static const Edge kNoEdge;
  STRATOS_CHECK(points.size() == taus.size(), "{} points, {} temperatures", points.size(),
                taus.size());
  // Each order's positions ({-1}: every config, on a homogeneous cluster).
  std::vector<std::vector<int>> position_lists;
  if (orders.empty()) position_lists.push_back(Positions({}));
  for (const std::vector<int>& order : orders) position_lists.push_back(Positions(order));
  const int O = static_cast<int>(position_lists.size());
  const size_t P = points.size();
  std::vector<SmoothedDpValue> out(P);
  for (SmoothedDpValue& o : out) o.value = kInf;
  const int L = N_, K = static_cast<int>(configs_.size());
  const int S = tables_.max_stages, V = static_cast<int>(levels_.size());
  const double mc = microbatch_count_;
  if (K == 0 || L == 0 || P == 0) return out;

  // The orders' edge sets (MakeEdgeSets), each computed once.
  const EdgeSets edge_sets = MakeEdgeSets(position_lists);
  const std::vector<EdgeSet>& sets = edge_sets.sets;
  const std::vector<std::vector<std::array<int, 4>>>& set_index = edge_sets.index;
  const int E = static_cast<int>(sets.size());

  // --- Edges: soft-min over configs of every layer range, for every edge set, in-flight level
  // and point: edge (point k, set e, level v, pair) at ((k E + e) V + v) pairs + pair. Each
  // range's terms are read from memory once for all the points. ---
  const std::vector<size_t>& row = pair_row_;
  const size_t pairs = row[L];
  // Reused between calls (written in full below: no initialization, no page faults).
  thread_local std::vector<Edge> edge;
  edge.resize(P * E * V * pairs);
  auto clear_pair = [&](int e, int i, int j) {
    for (size_t k = 0; k < P; ++k)
      for (int v = 0; v < V; ++v)
        edge[((k * E + e) * V + v) * pairs + row[i] + (j - i - 1)] = kNoEdge;
  };
  std::vector<SoftMin> bucket(V + 1);
  std::vector<RangeTerm> scratch;
  std::vector<double> bound, cut(V + 1), least_bound(V + 1);
  std::vector<int> least(V + 1);
  // A config's cost g = t + c + (M - 1) softplus(t - theta) + softplus(e - phi) + lambda_g n on
  // the range at point p, and its gradient channels (d/dtheta, d/dphi, devices of each group)
  // into dg (if not null).
  auto cost = [&](const RangeTerm& x, const SmoothedDpPoint& p, double tau, double* dg) {
    double sp_t, slope_t, sp_e, slope_e;
    SoftPlus(x.t - p.theta_seconds, tau, &sp_t, &slope_t);
    SoftPlus(x.e - p.phi_seconds, tau, &sp_e, &slope_e);
    const double devices = devices_[x.slot];
    const int g = N == 3 ? 0 : group_[x.slot];
    if (dg != nullptr) {
      dg[0] = -(mc - 1) * slope_t;
      dg[1] = -slope_e;
      for (int c = 2; c < N; ++c) dg[c] = 0;
      dg[2 + g] = devices;
    }
    return x.t + x.c + (mc - 1) * sp_t + sp_e + p.lambda_seconds[g] * devices;
  };
  // The soft-min jobs of one range: per edge set, its configs' terms.
  struct Job {
    int e;
    const RangeTerm* terms;
    size_t count;
  };
  std::vector<Job> jobs;
  std::vector<std::vector<RangeTerm>> shifted(E);
  for (int i = 0; i < L; ++i) {
    for (int j = i + 1; j <= L; ++j) {
      size_t count = 0;
      const RangeTerm* range = RangeTerms(i, j, &scratch, &count);
      const size_t pair = row[i] + (j - i - 1);
      if (count == 0) {
        // Memory grows with j: nothing fits [i, j') for j < j' < L either. Next: j = L.
        for (const int last = std::max(j, L - 1); j < last; ++j)
          for (int e = 0; e < E; ++e) clear_pair(e, i, j);
        for (int e = 0; e < E; ++e) clear_pair(e, i, j);
        continue;
      }
      jobs.clear();
      for (int e = 0; e < E; ++e) {
        // The set's configs: a contiguous run of the terms (sorted by group).
        const RangeTerm* begin = range;
        const RangeTerm* end = range + count;
        const auto [g, from, to, position] = sets[e];
        if (g >= 0) {
          begin = std::partition_point(range, end,
                                       [&](const RangeTerm& x) { return group_[x.slot] < g; });
          end = std::partition_point(begin, end,
                                     [&](const RangeTerm& x) { return group_[x.slot] <= g; });
        }
        // Unreachable: a receive at layer 0, a send to a next group from the end.
        if (begin == end || (from >= 0 && i == 0) || (to >= 0 && j == L)) {
          clear_pair(e, i, j);
          continue;
        }
        if (from < 0 && to < 0) {
          jobs.push_back({e, begin, static_cast<size_t>(end - begin)});
          continue;
        }
        std::vector<RangeTerm>& moved = shifted[e];
        moved.assign(begin, end);
        for (RangeTerm& x : moved) {
          const Delta d = CrossDelta(x.slot, i == 0, j == L, from, to);
          x.t += d.t;
          x.e += d.e;
          x.c += d.c;
        }
        jobs.push_back({e, moved.data(), moved.size()});
      }
      // The soft-min over each job's configs into every point's levels of its set.
      for (const Job& job : jobs) {
        const RangeTerm* terms = job.terms;
        const size_t count = job.count;
        const int e = job.e;
        edge_terms_ += static_cast<long>(count * P);
        bound.resize(count);
        for (size_t k = 0; k < P; ++k) {
          const SmoothedDpPoint& p = points[k];
          const double tau = taus[k];
          std::fill(bucket.begin(), bucket.end(), kEmpty);
          // softplus >= relu, so a config's relu bound is a lower bound of its cost g. A config
          // is negligible (exp(-40)) at every level it fits when its bound exceeds, by 40 tau,
          // the exact cost of a config that fits at least as many levels: pass 1 takes the
          // bounds and each bucket's least; the exact costs of those leasts, suffix-minimized
          // over the buckets, make the cuts of pass 2, which alone pays for the softplus exps.
          std::fill(least.begin(), least.end(), -1);
          std::fill(least_bound.begin(), least_bound.end(), kInf);
          for (size_t q = 0; q < count; ++q) {
            const RangeTerm& x = terms[q];
            const double b = x.t + x.c + (mc - 1) * std::max(0.0, x.t - p.theta_seconds) +
                             std::max(0.0, x.e - p.phi_seconds) +
                             p.lambda_seconds[N == 3 ? 0 : group_[x.slot]] * devices_[x.slot];
            bound[q] = b;
            if (b < least_bound[x.fits]) {
              least_bound[x.fits] = b;
              least[x.fits] = static_cast<int>(q);
            }
          }
          // The reference of bucket b: the least bound over the buckets >= b (its exact cost
          // taken only where that least changes, a few times per range, not once per bucket).
          double suffix = kInf, suffix_bound = kInf;
          for (int b = V; b >= 1; --b) {
            if (least[b] >= 0 && least_bound[b] < suffix_bound) {
              suffix_bound = least_bound[b];
              suffix = std::min(suffix, cost(terms[least[b]], p, tau, nullptr));
            }
            cut[b] = suffix + kNegligible * tau;
          }
          for (size_t q = 0; q < count; ++q) {
            const RangeTerm& x = terms[q];
            if (bound[q] > cut[x.fits]) continue;
            double dg[N];
            const double g = cost(x, p, tau, dg);
            bucket[x.fits].Add(g, dg, x.slot, tau);
          }
          // Level v (0-based) admits the configs that fit at least v + 1 levels.
          SoftMin acc;
          for (int b = V; b >= 1; --b) {
            acc.Merge(bucket[b], tau);
            Edge& out = edge[((k * E + e) * V + (b - 1)) * pairs + pair];
            out.value = acc.Value(tau);
            for (int c = 0; c < N; ++c) out.mean[c] = acc.Mean(c);
            out.arg = acc.arg;
          }
        }
      }
    }
  }

  // --- Per point and order, the DP over (stages left r, position j, whether the stage opens a
  // run after another group's, first layer i): cover [i, L) with exactly r stages, the rest of
  // the order included; then the soft-min over the orders. ---
  struct Cell {
    double value = kInf;
    double d[N] = {};
    int next = -1;  // the mode's next boundary b, times 2, plus 1 if the next stage opens a run
  };
  const size_t stride = static_cast<size_t>(L) + 1;
  // The budget term - sum_g lambda_g D_g runs over every group with a budget.
  std::vector<int> budgeted;
  for (int g = 0; g < G_; ++g)
    if (tables_.group_devices[g] > 0) budgeted.push_back(g);
  std::vector<std::vector<Cell>> cells(O);
  for (size_t k = 0; k < P; ++k) {
    const SmoothedDpPoint& p = points[k];
    const double tau = taus[k];
    const Edge* point_edges = edge.data() + k * E * V * pairs;
    SoftMin best_order;  // over the orders: value, channels, the mode's order
    std::vector<int> top_stages(O, 0);
    std::vector<double> order_values(orders.empty() ? 0 : O, kInf);
    for (int o = 0; o < O; ++o) {
      const int J = static_cast<int>(position_lists[o].size());
      const int ins = J > 1 ? 2 : 1;  // cells that open a run after another group's
      auto cell_at = [&](int r, int pos, int in) {
        return (static_cast<size_t>(r * J + pos) * ins + in) * stride;
      };
      std::vector<Cell>& cell = cells[o];
      cell.assign(static_cast<size_t>(S + 1) * J * ins * stride, Cell());
      cell[cell_at(0, J - 1, 0) + L].value = 0;  // r = 0, the last position, i = L
      for (int r = 1; r <= S; ++r) {
        const size_t level = static_cast<size_t>(LevelIndex(r)) * pairs;
        for (int pos = J - 1; pos >= 0; --pos)
          for (int in = 0; in < OpensVariants(pos); ++in) {
            // The edges of this level and the rest of the pipeline, per whether the next stage
            // opens the next group's run.
            const int outs = ClosesVariants(pos, J);
            const Edge* edges[2];
            const Cell* rests[2];
            for (int opens = 0; opens < outs; ++opens) {
              edges[opens] =
                  point_edges + static_cast<size_t>(set_index[o][pos][in * 2 + opens]) * V * pairs +
                  level;
              rests[opens] = cell.data() + cell_at(r - 1, pos + opens, opens);
            }
            for (int i = 0; i + r <= L; ++i) {
              SoftMin acc;
              const Edge* from[2] = {edges[0] + row[i] - i - 1,
                                        edges[outs - 1] + row[i] - i - 1};
              for (int j = i + 1; j + (r - 1) <= L; ++j) {
                for (int opens = 0; opens < outs; ++opens) {
                  const Cell& rest = rests[opens][j];
                  if (!(rest.value < kInf)) continue;
                  const Edge& e = from[opens][j];
                  if (!(e.value < kInf)) continue;
                  const double x = e.value + rest.value;
                  double dx[N];
                  for (int c = 0; c < N; ++c) dx[c] = e.mean[c] + rest.d[c];
                  acc.Add(x, dx, 2 * j + opens, tau);
                }
              }
              Cell& c = cell[cell_at(r, pos, in) + i];
              c.value = acc.Value(tau);
              for (int ch = 0; ch < N; ++ch) c.d[ch] = acc.Mean(ch);
              c.next = acc.arg;
            }
          }
      }
      SoftMin top;
      for (int r = std::max(1, tables_.min_stages); r <= S && r <= L; ++r) {
        const Cell& c = cell[cell_at(r, 0, 0)];
        top.Add(c.value, c.d, r, tau);
      }
      if (!(top.best < kInf)) continue;
      top_stages[o] = top.arg;
      if (!orders.empty()) order_values[o] = top.Value(tau);
      double channels[N];
      for (int c = 0; c < N; ++c) channels[c] = top.Mean(c);
      best_order.Add(top.Value(tau), channels, o, tau);
    }
    if (!(best_order.best < kInf)) continue;
    SmoothedDpValue& value = out[k];
    double budget_value = 0;
    for (int g : budgeted) budget_value += p.lambda_seconds[g] * tables_.group_devices[g];
    value.order_values = std::move(order_values);
    for (double& v : value.order_values)
      v += (mc - 1) * p.theta_seconds + p.phi_seconds - budget_value;
    for (int g : budgeted) {
      value.expected_devices[g] = best_order.Mean(2 + g);
      value.d_lambda[g] = value.expected_devices[g] - tables_.group_devices[g];
    }
    value.value =
        best_order.Value(tau) + (mc - 1) * p.theta_seconds + p.phi_seconds - budget_value;
    value.d_theta = best_order.Mean(0) + (mc - 1);
    value.d_phi = best_order.Mean(1) + 1;

    // --- Decode the mode: its order's argmins. ---
    const int o = best_order.arg;
    const int J = static_cast<int>(position_lists[o].size());
    const int ins = J > 1 ? 2 : 1;
    const std::vector<Cell>& cell = cells[o];
    DiscretePlan& plan = value.decoded;
    plan.microbatch_option = m_;
    plan.boundaries.push_back(0);
    int i = 0, pos = 0, in = 0;
    for (int r = top_stages[o]; r >= 1; --r) {
      const int next = cell[(static_cast<size_t>(r * J + pos) * ins + in) * stride + i].next;
      const int j = next / 2, opens = next % 2;
      const Edge& e =
          point_edges[(static_cast<size_t>(set_index[o][pos][in * 2 + opens]) * V +
                       LevelIndex(r)) * pairs + row[i] + (j - i - 1)];
      plan.configs.push_back(configs_[e.arg]);
      plan.boundaries.push_back(cuts_[j]);
      i = j;
      pos += opens;
      in = opens;
    }
  }
  return out;
}

DiscretePlan SmoothedStageDp::DecodeWithinDevices(const SmoothedDpPoint& p, double max_work,
                                                  const DiscretePlan* known,
                                                  const std::vector<int>& order) const {
  DiscretePlan plan;
  const std::vector<int> positions = Positions(order);
  const int J = static_cast<int>(positions.size());
  const int L = N_, K = static_cast<int>(configs_.size());
  const int S = std::min(tables_.max_stages, L), V = static_cast<int>(levels_.size());
  if (K == 0 || L == 0) return plan;
  const size_t stride = static_cast<size_t>(L) + 1;
  const double mc = microbatch_count_;
  // Each position's device budget (the whole cluster's on one group).
  std::vector<int> budget(J);
  for (int pos = 0; pos < J; ++pos)
    budget[pos] = positions[pos] < 0 ? tables_.num_devices : tables_.group_devices[positions[pos]];
  const int most = *std::max_element(budget.begin(), budget.end());
  // A plan that fits within the budgets on this DP's cut positions (along this order) bounds
  // the optimum: every stage cost is >= 0, so an entry that alone costs more is in no better
  // plan (mostly the smallest meshes of long ranges; fewer min-plus steps, the unit rarely
  // larger).
  double bound = kInf;
  if (known != nullptr && known->NumStages() <= S &&
      std::all_of(known->boundaries.begin(), known->boundaries.end(),
                  [&](int b) { return std::binary_search(cuts_.begin(), cuts_.end(), b); }) &&
      (G_ == 1 || PlanRunOrder(tables_, *known) == order))
    bound = AroundCost(p, *known);
  const double limit = bound < kInf ? bound * (1 + 1e-9) : kInf;
  // The order's edge sets, as in EvaluateMany (one per position and opens / closes).
  const EdgeSets edge_sets = MakeEdgeSets({positions});
  const int E = static_cast<int>(edge_sets.sets.size());
  auto set_of = [&](int j, int in, int out_) { return edge_sets.index[0][j][in * 2 + out_]; };
  // Without a bound the unit is known before the edges: decline early when over the work.
  if (!(bound < kInf) &&
      static_cast<double>(S) * E * pair_row_[N_] * (most / DeviceUnit() + 1) > max_work)
    return plan;

  // --- Edges: per edge set, in-flight level and layer range, the meshes on the strictly
  // decreasing frontier of the cheapest fitting config's t + c + (M - 1) relu(t - theta) +
  // relu(e - phi), in devices; those above the bound dropped. ---
  const std::vector<size_t>& row = pair_row_;
  const size_t pairs = row[L];
  auto edge_index = [&](int e, int v, size_t pair) {
    return (static_cast<size_t>(e) * V + v) * pairs + pair;
  };
  std::vector<size_t> begin(static_cast<size_t>(E) * V * pairs + 1, 0), end(begin.size(), 0);
  std::vector<FrontierEntry> entries;
  std::vector<FrontierCandidate> candidates;
  std::vector<RangeTerm> scratch;
  long unit = 0;  // the gcd of the meshes kept: devices are counted in it
  for (int i = 0; i < L; ++i) {
    for (int j = i + 1; j <= L; ++j) {
      size_t count = 0;
      const RangeTerm* terms = RangeTerms(i, j, &scratch, &count);
      const size_t pair = row[i] + (j - i - 1);
      for (int set = 0; set < E; ++set) {
        const auto [g, from, to, position] = edge_sets.sets[set];
        candidates.clear();
        // Unreachable: a later position at layer 0, a send to a next group from the end.
        const bool reachable = !(position > 0 && i == 0) && !(to >= 0 && j == L);
        for (size_t q = 0; q < count && reachable; ++q) {
          const RangeTerm& x = terms[q];
          if (g >= 0 && group_[x.slot] != g) continue;
          double t = x.t, e = x.e, c = x.c;
          if (from >= 0 || to >= 0) {
            const Delta d = CrossDelta(x.slot, i == 0, j == L, from, to);
            t += d.t;
            e += d.e;
            c += d.c;
          }
          const double a = t + c + (mc - 1) * std::max(0.0, t - p.theta_seconds) +
                           std::max(0.0, e - p.phi_seconds);
          if (a <= limit)
            candidates.push_back({static_cast<int>(devices_[x.slot]), x.slot, x.fits, a});
        }
        for (int v = 0; v < V; ++v) {
          const size_t at = edge_index(set, v, pair);
          begin[at] = entries.size();
          AppendFrontier(candidates, v, &entries);
          end[at] = entries.size();
          for (size_t e = begin[at]; e < end[at]; ++e)
            unit = std::gcd(unit, long{entries[e].units});
        }
      }
      if (count == 0 && j < L - 1) j = L - 1;  // memory grows with j: next j = L
    }
  }
  if (unit == 0) return plan;  // no stage fits anywhere
  for (FrontierEntry& e : entries) e.units = static_cast<int>(e.units / unit);
  std::vector<int> width(J);  // free units + 1 per position
  for (int pos = 0; pos < J; ++pos) width[pos] = static_cast<int>(budget[pos] / unit) + 1;
  const int W = static_cast<int>(most / unit) + 1;
  // The table, (S + 1) J 2 (L + 1) W doubles, grows no faster than the work.
  if (static_cast<double>(S) * E * pairs * W > max_work) return plan;

  // --- F[r][pos][in][i][d]: the least sum over r stages covering [i, L), the first at position
  // pos (opening its run after another group's if in), with at most d free units of its group.
  const int ins = J > 1 ? 2 : 1;  // cells that open a run after another group's: not on one
  auto cell_at = [&](int r, int pos, int in, int i) {
    return ((static_cast<size_t>(r * J + pos) * ins + in) * stride + i);
  };
  std::vector<double> f(static_cast<size_t>(S + 1) * J * ins * stride * W, kInf);
  std::vector<int> lo(static_cast<size_t>(S + 1) * J * ins * stride, W);  // finite iff d >= lo
  auto F = [&](size_t cell) { return f.data() + cell * W; };
  // The value of a run's first stage: its group's whole budget free.
  auto opening = [&](int r, int pos, int i) {
    const size_t cell = cell_at(r, pos, 1, i);
    return lo[cell] < width[pos] ? F(cell)[width[pos] - 1] : kInf;
  };
  std::fill(F(cell_at(0, J - 1, 0, L)), F(cell_at(0, J - 1, 0, L)) + W, 0.0);
  lo[cell_at(0, J - 1, 0, L)] = 0;
  for (int r = 1; r <= S; ++r) {
    const int level = LevelIndex(r);
    for (int pos = J - 1; pos >= 0; --pos)
      for (int in = 0; in < OpensVariants(pos); ++in)
        for (int i = L - r; i >= 0; --i) {
          const size_t here = cell_at(r, pos, in, i);
          double* out = F(here);
          const int w = width[pos];
          int out_lo = w;
          for (int j = i + 1; j + (r - 1) <= L; ++j) {
            const size_t pair = row[i] + (j - i - 1);
            // The next stage in the same run: the budget carries over.
            const size_t stay = cell_at(r - 1, pos, 0, j);
            const int prev_lo = lo[stay];
            const size_t at = edge_index(set_of(pos, in, 0), level, pair);
            if (prev_lo < w)
              for (size_t e = begin[at]; e < end[at]; ++e) {
                const int start = prev_lo + entries[e].units;
                if (start >= w) break;
                MinPlusInto(out + start, F(stay) + prev_lo, entries[e].a, w - start);
                out_lo = std::min(out_lo, start);
              }
            if (pos + 1 >= J) continue;
            // The next stage opens the next group's run: its budget starts over. Frontier
            // entries ascend in units and descend in cost: at d free units the last one that
            // fits is the cheapest.
            const double rest = opening(r - 1, pos + 1, j);
            if (!(rest < kInf)) continue;
            const size_t at_out = edge_index(set_of(pos, in, 1), level, pair);
            for (size_t e = begin[at_out]; e < end[at_out]; ++e) {
              const int from = entries[e].units;
              if (from >= w) break;
              const int to = e + 1 < end[at_out] ? std::min(w, entries[e + 1].units) : w;
              const double x = entries[e].a + rest;
              for (int d = from; d < to; ++d) out[d] = std::min(out[d], x);
              out_lo = std::min(out_lo, from);
            }
          }
          lo[here] = out_lo;
        }
  }
  int best_r = 0;
  double best = kInf;
  for (int r = std::max(1, tables_.min_stages); r <= S; ++r) {
    const size_t top = cell_at(r, 0, 0, 0);
    if (lo[top] < width[0] && F(top)[width[0] - 1] < best) {
      best = F(top)[width[0] - 1];
      best_r = r;
    }
  }
  if (!(best < kInf)) return plan;

  // --- Reconstruct by re-finding each argmin (same floating-point operations). ---
  plan.microbatch_option = m_;
  plan.boundaries.push_back(0);
  int i = 0, pos = 0, in = 0, d = width[0] - 1;
  for (int r = best_r; r >= 1; --r) {
    const double target = F(cell_at(r, pos, in, i))[d];
    const int level = LevelIndex(r);
    double best_gap = kInf;
    int best_j = -1, best_opens = 0;
    size_t best_e = 0;
    for (int j = i + 1; j + (r - 1) <= L; ++j) {
      const size_t pair = row[i] + (j - i - 1);
      for (int opens = 0; opens < (pos + 1 < J ? 2 : 1); ++opens) {
        const size_t at = edge_index(set_of(pos, in, opens), level, pair);
        const double rest = opens ? opening(r - 1, pos + 1, j) : 0.0;
        for (size_t e = begin[at]; e < end[at]; ++e) {
          const int n = entries[e].units;
          if (n > d) break;
          double x;
          if (opens) {
            x = entries[e].a + rest;
          } else {
            const size_t stay = cell_at(r - 1, pos, 0, j);
            if (d - n < lo[stay]) break;
            x = F(stay)[d - n] + entries[e].a;
          }
          const double gap = std::abs(x - target);
          if (gap < best_gap) {
            best_gap = gap;
            best_j = j;
            best_e = e;
            best_opens = opens;
          }
        }
      }
    }
    STRATOS_CHECK(best_j > 0 && best_gap <= 1e-9 * std::max(1.0, std::abs(target)),
                  "constrained decode lost the argmin at {} stages left, layer {}", r, i);
    plan.configs.push_back(configs_[entries[best_e].slot]);
    plan.boundaries.push_back(cuts_[best_j]);
    if (best_opens) {
      ++pos;
      d = width[pos] - 1;
    } else {
      d -= entries[best_e].units;
    }
    in = best_opens;
    i = best_j;
  }
  STRATOS_CHECK(i == L && pos == J - 1, "constrained decode ended at layer {} of {}", i, L);
  return plan;
}

double SmoothedStageDp::AroundCost(const SmoothedDpPoint& p, const DiscretePlan& plan) const {
  if (plan.microbatch_option != m_) return kInf;
  std::vector<double> devices(G_, 0.0);
  for (int k : plan.configs)
    devices[tables_.configs[k].node_group] += tables_.configs[k].NumDevices();
  for (int g = 0; g < G_; ++g)
    if (devices[g] > tables_.group_devices[g]) return kInf;
  const SmoothedDpPoint at{p.theta_seconds, p.phi_seconds, {}};
  const double value = PlanValue(plan, at);
  return value < kInf ? value - (microbatch_count_ - 1) * p.theta_seconds - p.phi_seconds : kInf;
}

long SmoothedStageDp::DeviceUnit() const {
  // Free devices in units of the gcd of the mesh sizes.
  long unit = 0;
  for (double n : devices_) unit = std::gcd(unit, static_cast<long>(n));
  return std::max(1L, unit);
}

DiscretePlan SmoothedStageDp::DecodeNearPlan(const SmoothedDpPoint& p, const DiscretePlan& around,
                                             int radius, double max_work) const {
  const int S = around.NumStages();
  STRATOS_CHECK(radius >= 0, "radius {} < 0", radius);
  STRATOS_CHECK(S >= 1 && around.boundaries.size() == static_cast<size_t>(S) + 1 &&
                    around.boundaries.front() == 0 && around.boundaries.back() == L_,
                "the plan around which to decode is not a partition of the {} layers", L_);
  DiscretePlan plan;
  if (configs_.empty()) return plan;
  // Each stage keeps around's group; a stage next to another group's sends over their link.
  std::vector<int> group(S), previous(S, -1), next(S, -1), width(S);
  for (int s = 0; s < S; ++s) group[s] = tables_.configs[around.configs[s]].node_group;
  STRATOS_CHECK(SearchSpace::GroupsInRuns(group), "the plan's node groups are not in runs");
  for (int s = 0; s < S; ++s) {
    if (s > 0 && group[s - 1] != group[s]) previous[s] = group[s - 1];
    if (s + 1 < S && group[s + 1] != group[s]) next[s] = group[s + 1];
  }
  // window[s]: the layers where stage s may start (window[S] = {L}: where the last one ends).
  std::vector<std::vector<int>> window(S + 1);
  window[0] = {0};
  window[S] = {L_};
  for (int s = 1; s < S; ++s)
    for (int x = std::max(1, around.boundaries[s] - radius);
         x <= std::min(L_ - 1, around.boundaries[s] + radius); ++x)
      window[s].push_back(x);
  // Nodes: (stage s, window index a) at base[s] + a.
  std::vector<size_t> base(S + 2, 0);
  for (int s = 0; s <= S; ++s) base[s + 1] = base[s] + window[s].size();
  const double mc = microbatch_count_;

  // --- Edges: the frontier of every stage [window[s][a], window[s + 1][b]) at its in-flight
  // level, in mesh devices; edge (s, a, b) at edge_begin[s][a * |window[s + 1]| + b]. ---
  std::vector<std::vector<size_t>> edge_begin(S);
  std::vector<FrontierEntry> entries;
  std::vector<RangeTerm> scratch;
  long unit = 0;  // the gcd of the meshes on some frontier: devices are counted in it
  for (int s = 0; s < S; ++s) {
    const int v = LevelIndex(S - s);
    edge_begin[s].reserve(window[s].size() * window[s + 1].size() + 1);
    for (int x : window[s])
      for (int y : window[s + 1]) {
        edge_begin[s].push_back(entries.size());
        if (y <= x) continue;
        const long key = static_cast<long>(x) * (L_ + 1) + y;
        auto cached = near_terms_.find(key);
        if (cached == near_terms_.end()) {
          scratch.clear();
          for (int slot : by_size_) {
            const Terms t = StageTerms(slot, x, y);
            const int fits = FittingLevels(t, slot);
            if (fits > 0) scratch.push_back({t.t, t.e, t.c, slot, fits});
          }
          std::vector<RangeTerm> terms(scratch.begin(), scratch.end());
          if (near_terms_count_ + terms.size() > kMaxCachedRangeTerms) {
            near_terms_.clear();
            near_terms_count_ = 0;
          }
          near_terms_count_ += terms.size();
          cached = near_terms_.emplace(key, std::move(terms)).first;
        }
        const size_t first = entries.size();
        FrontierBuilder frontier(&entries);
        for (RangeTerm t : cached->second) {
          if (t.fits <= v || group_[t.slot] != group[s]) continue;
          if (previous[s] >= 0 || next[s] >= 0) {
            const Delta d = CrossDelta(t.slot, x == 0, y == L_, previous[s], next[s]);
            t.t += d.t;
            t.e += d.e;
            t.c += d.c;
          }
          frontier.Offer(static_cast<int>(devices_[t.slot]), t.slot,
                         t.t + t.c + (mc - 1) * std::max(0.0, t.t - p.theta_seconds) +
                             std::max(0.0, t.e - p.phi_seconds));
        }
        for (size_t e = first; e < entries.size(); ++e)
          unit = std::gcd(unit, long{entries[e].units});
      }
    edge_begin[s].push_back(entries.size());
  }
  if (unit == 0) return plan;  // no stage fits anywhere
  // Entries that cannot be in the optimum: when `around` fits within D devices, its own stage
  // costs sum to an upper bound U on the optimum's, and an entry of stage s whose cost plus the
  // least cost of every other stage exceeds U is in no better plan. These are mostly the
  // smallest meshes (the slowest configs that still fit), whose sizes set the device unit
  // (smoothed_dp.h: W = 2,049 with them on GPT-3 175B / 16,384 GPUs, 5 to 257 without).
  const double bound = AroundCost(p, around);
  if (bound < kInf) {
    std::vector<double> least(S, kInf);
    for (int s = 0; s < S; ++s)
      for (size_t e = edge_begin[s].front(); e < edge_begin[s].back(); ++e)
        least[s] = std::min(least[s], entries[e].a);
    const double others = std::accumulate(least.begin(), least.end(), 0.0);
    std::vector<FrontierEntry> kept;
    kept.reserve(entries.size());
    unit = 0;
    for (int s = 0; s < S; ++s) {
      // The slack keeps `around`'s own entries whatever the rounding of the sums.
      const double limit = bound - (others - least[s]) + 1e-9 * std::abs(bound);
      size_t e = edge_begin[s].front();
      for (size_t at = 0; at + 1 < edge_begin[s].size(); ++at) {
        const size_t last = edge_begin[s][at + 1];
        edge_begin[s][at] = kept.size();
        for (; e < last; ++e)
          if (entries[e].a <= limit) {
            kept.push_back(entries[e]);
            unit = std::gcd(unit, long{entries[e].units});
          }
      }
      edge_begin[s].back() = kept.size();
    }
    entries = std::move(kept);
    if (unit == 0) return plan;
  }
  for (FrontierEntry& e : entries) e.units = static_cast<int>(e.units / unit);
  int most = 0;
  for (int s = 0; s < S; ++s) {
    const int budget = G_ == 1 ? tables_.num_devices : tables_.group_devices[group[s]];
    width[s] = static_cast<int>(budget / unit) + 1;
    most = std::max(most, width[s]);
  }
  const int W = most;
  double work = 0;
  for (int s = 0; s < S; ++s)
    work += static_cast<double>(window[s].size()) * window[s + 1].size() * W;
  if (work > max_work) return plan;
  auto edge = [&](int s, size_t a, size_t b) {
    const size_t at = a * window[s + 1].size() + b;
    return std::make_pair(edge_begin[s][at], edge_begin[s][at + 1]);
  };

  // G[s][a][d]: the least sum over stages s.. covering [window[s][a], L) with at most d free
  // units of stage s's group; finite iff d >= lo.
  std::vector<double> g(base[S + 1] * W, kInf);
  std::vector<int> lo(base[S + 1], W);
  auto G = [&](int s, size_t a) { return g.data() + (base[s] + a) * W; };
  std::fill(G(S, 0), G(S, 0) + W, 0.0);
  lo[base[S]] = 0;
  // Whether stage s + 1 opens another group's run (then its budget starts over).
  auto opens = [&](int s) { return s + 1 < S && group[s + 1] != group[s]; };
  for (int s = S - 1; s >= 0; --s) {
    const int w = width[s];
    for (size_t a = 0; a < window[s].size(); ++a) {
      double* out = G(s, a);
      int out_lo = w;
      for (size_t b = 0; b < window[s + 1].size(); ++b) {
        const int prev_lo = lo[base[s + 1] + b];
        const auto [first, last] = edge(s, a, b);
        if (opens(s)) {
          // Frontier entries ascend in units and descend in cost: at d free units the last one
          // that fits is the cheapest.
          if (prev_lo >= width[s + 1]) continue;
          const double rest = G(s + 1, b)[width[s + 1] - 1];
          for (size_t e = first; e < last; ++e) {
            const int from = entries[e].units;
            if (from >= w) break;
            const int to = e + 1 < last ? std::min(w, entries[e + 1].units) : w;
            for (int d = from; d < to; ++d) out[d] = std::min(out[d], entries[e].a + rest);
            out_lo = std::min(out_lo, from);
          }
          continue;
        }
        if (prev_lo >= w) continue;
        for (size_t e = first; e < last; ++e) {
          const int start = prev_lo + entries[e].units;
          if (start >= w) break;
          MinPlusInto(out + start, G(s + 1, b) + prev_lo, entries[e].a, w - start);
          out_lo = std::min(out_lo, start);
        }
      }
      lo[base[s] + a] = out_lo;
    }
  }
  if (!(lo[0] < width[0] && G(0, 0)[width[0] - 1] < kInf)) return plan;

  // --- Reconstruct by re-finding each argmin (same floating-point operations). ---
  plan.microbatch_option = m_;
  plan.boundaries.push_back(0);
  size_t a = 0;
  int d = width[0] - 1;
  for (int s = 0; s < S; ++s) {
    const double target = G(s, a)[d];
    double best_gap = kInf;
    size_t best_b = 0, best_e = 0;
    for (size_t b = 0; b < window[s + 1].size(); ++b) {
      const int prev_lo = lo[base[s + 1] + b];
      const auto [first, last] = edge(s, a, b);
      for (size_t e = first; e < last; ++e) {
        const int n = entries[e].units;
        if (opens(s) ? n > d || prev_lo >= width[s + 1] : d - n < prev_lo) break;
        const double rest = opens(s) ? G(s + 1, b)[width[s + 1] - 1] : G(s + 1, b)[d - n];
        const double gap = std::abs(rest + entries[e].a - target);
        if (gap < best_gap) {
          best_gap = gap;
          best_b = b;
          best_e = e;
        }
      }
    }
    STRATOS_CHECK(best_gap <= 1e-9 * std::max(1.0, std::abs(target)),
                  "near decode lost the argmin at stage {}, layer {}", s, window[s][a]);
    plan.configs.push_back(configs_[entries[best_e].slot]);
    plan.boundaries.push_back(window[s + 1][best_b]);
    d = opens(s) ? width[s + 1] - 1 : d - entries[best_e].units;
    a = best_b;
  }
  return plan;
}

}  // namespace stratos
