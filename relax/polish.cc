#include "relax/polish.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <optional>
#include <set>

#include "costmodel/error.h"
#include "costmodel/evaluate.h"

namespace stratos {

namespace {

int Log2(int x) {
  int r = 0;
  while ((1 << (r + 1)) <= x) ++r;
  return r;
}

int RecomputeIndex(Recompute r) { return static_cast<int>(r); }

void AddScaled(TermScalars* x, const TermScalars& y, double n) {
  x->microbatch_seconds += n * y.microbatch_seconds;
  x->additive_tail_seconds += n * y.additive_tail_seconds;
  x->bucketed_sync_seconds += n * y.bucketed_sync_seconds;
  x->backward_window_seconds += n * y.backward_window_seconds;
  x->last_bucket_seconds += n * y.last_bucket_seconds;
  x->one_time_seconds += n * y.one_time_seconds;
  x->state_bytes += n * y.state_bytes;
  x->activation_bytes += n * y.activation_bytes;
  x->working_bytes += n * y.working_bytes;
}

}  // namespace

bool DiscreteCost::BetterThan(const DiscreteCost& o) const {
  if (valid != o.valid) return valid;
  if (!valid) return false;
  if (overflow_bytes != o.overflow_bytes) return overflow_bytes < o.overflow_bytes;
  return iteration_seconds < o.iteration_seconds;
}

std::vector<int> PlanRunOrder(const RelaxTables& tables, const DiscretePlan& plan) {
  std::vector<int> order;
  for (int k : plan.configs) {
    const int g = tables.configs[k].node_group;
    if (order.empty() || order.back() != g) order.push_back(g);
  }
  return order;
}

PlanPolisher::PlanPolisher(const RelaxTables& tables) : tables_(tables) {
  capacity_bytes_ = tables.memory_capacity_bytes * (1.0 - 1e-9);
  const int K = tables.num_configs;
  for (const StageConfig& c : tables.configs) mesh_sizes_.push_back(c.NumDevices());
  std::sort(mesh_sizes_.begin(), mesh_sizes_.end());
  mesh_sizes_.erase(std::unique(mesh_sizes_.begin(), mesh_sizes_.end()), mesh_sizes_.end());
  int max_tp = 1;
  for (const StageConfig& c : tables.configs) max_tp = std::max(max_tp, c.tensor_parallel);
  num_tp_slots_ = Log2(max_tp) + 1;
  const int G = tables.num_groups;
  lookup_.assign(G * mesh_sizes_.size() * num_tp_slots_ * 4 * 3, -1);
  config_mesh_index_.resize(K);
  for (int k = 0; k < K; ++k) {
    const StageConfig& c = tables.configs[k];
    const int mi = static_cast<int>(
        std::lower_bound(mesh_sizes_.begin(), mesh_sizes_.end(), c.NumDevices()) -
        mesh_sizes_.begin());
    config_mesh_index_[k] = mi;
    int& slot = lookup_[(((static_cast<size_t>(c.node_group) * mesh_sizes_.size() + mi) *
                              num_tp_slots_ +
                          Log2(c.tensor_parallel)) *
                             4 +
                         c.zero_stage) *
                            3 +
                        RecomputeIndex(c.recompute)];
    if (slot < 0) slot = k;
    capacity_.push_back(G > 1 ? tables.CapacityBytes(k) * (1.0 - 1e-9) : capacity_bytes_);
  }
  nearest_valid_.assign(static_cast<size_t>(K) * tables.num_microbatch_options, -2);
  mesh_configs_.resize(G * mesh_sizes_.size());
  for (int k = 0; k < K; ++k) mesh_configs_[MeshKey(k)].push_back(k);
  // Neighbours: configs of the same mesh that differ from k in one or two of TP, ZeRO and
  // recomputation (two at once: trading one memory saving for another, as TP for recomputation,
  // is often faster only when both change), and the configs of the other mesh sizes. A mesh
  // change keeps TP, ZeRO and recompute where the new mesh allows them.
  config_neighbors_.resize(K);
  for (int k = 0; k < K; ++k) {
    const StageConfig& a = tables.configs[k];
    std::set<int> n;
    for (int j = 0; j < K; ++j) {
      if (j == k) continue;
      const StageConfig& b = tables.configs[j];
      const bool same_mesh = a.NumDevices() == b.NumDevices() && a.node_group == b.node_group;
      const int differences = (a.tensor_parallel != b.tensor_parallel) +
                              (a.zero_stage != b.zero_stage) + (a.recompute != b.recompute);
      if (same_mesh && differences <= 2) n.insert(j);
    }
    for (int mi = 0; mi < static_cast<int>(mesh_sizes_.size()); ++mi) {
      if (mi == config_mesh_index_[k]) continue;
      for (int tp = std::min(a.tensor_parallel, 1 << (num_tp_slots_ - 1)); tp >= 1; tp /= 2) {
        int j = Lookup(a.node_group, mi, tp, a.zero_stage, RecomputeIndex(a.recompute));
        if (j < 0) j = Lookup(a.node_group, mi, tp, 0, RecomputeIndex(a.recompute));
        if (j >= 0) {
          n.insert(j);
          break;
        }
      }
    }
    config_neighbors_[k].assign(n.begin(), n.end());
  }
}

int PlanPolisher::Lookup(int group, int mesh_index, int tp, int zero, int recompute) const {
  if (mesh_index < 0 || mesh_index >= static_cast<int>(mesh_sizes_.size())) return -1;
  const int t = Log2(tp);
  if (t >= num_tp_slots_ || (1 << t) != tp || zero < 0 || zero > 3) return -1;
  return lookup_[(((static_cast<size_t>(group) * mesh_sizes_.size() + mesh_index) *
                       num_tp_slots_ +
                   t) *
                      4 +
                  zero) *
                     3 +
                 recompute];
}

int PlanPolisher::MeshKey(int k) const {
  return tables_.configs[k].node_group * static_cast<int>(mesh_sizes_.size()) +
         config_mesh_index_[k];
}

bool PlanPolisher::OutOfBudget(const PolishLimits& limits) const {
  if (limits.max_evaluations > 0 && evaluations_ >= limits.max_evaluations) return true;
  return std::chrono::steady_clock::now() >= limits.deadline;
}

int PlanPolisher::InFlight(int m, int num_stages, int stage, int v_option) const {
  return ChunkForwardsInFlight(tables_.schedule, num_stages, stage, tables_.num_microbatches[m],
                               tables_.virtual_stages[v_option]);
}

double PlanPolisher::InFlightMicrobatches(int m, int num_stages, int stage, int v_option) const {
  return static_cast<double>(InFlight(m, num_stages, stage, v_option)) /
         tables_.virtual_stages[v_option];
}

TermScalars PlanPolisher::StageScalars(int k, int m, int first_layer, int last_layer, bool first,
                                       bool last, int previous_group, int next_group,
                                       int v_option) const {
  TermScalars x = !tables_.cross_overhead.empty()
                      ? tables_.OverheadBetween(k, m, first, last, previous_group, next_group)
                      : tables_.Overhead(k, m, first, last, v_option);
  for (int c = 0; c < tables_.num_classes; ++c) {
    const int n = tables_.ClassCount(first_layer, last_layer, c);
    if (n > 0) AddScaled(&x, tables_.Layer(c, k, m), n);
  }
  return x;
}

DiscreteCost PlanPolisher::Cost(const DiscretePlan& plan) {
  ++evaluations_;
  DiscreteCost cost;
  const int S = plan.NumStages();
  const int m = plan.microbatch_option;
  if (S < tables_.min_stages || S > tables_.max_stages) return cost;
  if (static_cast<int>(plan.boundaries.size()) != S + 1 || plan.boundaries[0] != 0 ||
      plan.boundaries[S] != tables_.num_layers)
    return cost;
  if (m < 0 || m >= tables_.num_microbatch_options) return cost;
  const int vi = plan.virtual_option;
  if (vi < 0 || vi >= tables_.NumVirtualStageOptions()) return cost;
  const int v = tables_.virtual_stages[vi];
  // Interleaving (InterleavePlan) needs two ranks and a layer for each of a rank's chunks.
  if (v > 1) {
    if (S < 2) return cost;
    for (int s = 0; s < S; ++s)
      if (plan.boundaries[s + 1] - plan.boundaries[s] < v) return cost;
  }
  int devices = 0;
  // Heterogeneous clusters: each group's budget, and the groups in runs.
  std::vector<int> group_devices(tables_.num_groups, 0), groups;
  for (int k : plan.configs) {
    if (!tables_.Valid(k, m)) return cost;
    devices += tables_.configs[k].NumDevices();
    group_devices[tables_.configs[k].node_group] += tables_.configs[k].NumDevices();
    groups.push_back(tables_.configs[k].node_group);
  }
  if (devices > tables_.num_devices) return cost;
  if (tables_.num_groups > 1) {
    for (int g = 0; g < tables_.num_groups; ++g)
      if (group_devices[g] > tables_.group_devices[g]) return cost;
    if (!SearchSpace::GroupsInRuns(groups)) return cost;
  }
  double sum_t = 0, max_t = 0, max_e = 0, sum_c = 0, overflow = 0;
  for (int s = 0; s < S; ++s) {
    if (plan.boundaries[s] >= plan.boundaries[s + 1]) return cost;
    const TermScalars x = StageScalars(
        plan.configs[s], m, plan.boundaries[s], plan.boundaries[s + 1], s == 0, s == S - 1,
        s > 0 ? groups[s - 1] : -1, s + 1 < S ? groups[s + 1] : -1, vi);
    sum_t += x.microbatch_seconds;
    max_t = std::max(max_t, x.microbatch_seconds);
    max_e = std::max(max_e, x.TailSeconds());
    sum_c += x.one_time_seconds;
    const double peak = x.state_bytes + InFlightMicrobatches(m, S, s, vi) * x.activation_bytes +
                        x.working_bytes;
    if (peak > capacity_[plan.configs[s]]) overflow += peak - capacity_[plan.configs[s]];
  }
  cost.valid = true;
  cost.overflow_bytes = overflow;
  cost.iteration_seconds =
      PipelineSeconds(sum_t, max_t, max_e, sum_c, tables_.num_microbatches[m], v);
  return cost;
}

Plan PlanPolisher::ToPlan(const DiscretePlan& plan) const {
  Plan out;
  out.global_batch_size = tables_.global_batch_size;
  out.num_microbatches = tables_.num_microbatches[plan.microbatch_option];
  out.schedule = tables_.schedule;
  for (int s = 0; s < plan.NumStages(); ++s) {
    StagePlan stage;
    stage.first_layer = plan.boundaries[s];
    stage.last_layer = plan.boundaries[s + 1];
    stage.config = tables_.configs[plan.configs[s]];
    out.stages.push_back(stage);
  }
  const int v = tables_.virtual_stages[plan.virtual_option];
  if (v == 1) return out;
  std::optional<Plan> interleaved = InterleavePlan(out, v);
  STRATOS_CHECK(interleaved.has_value(), "a plan of {} stages cannot run {} virtual stages",
                plan.NumStages(), v);
  return *interleaved;
}

DiscretePlan PlanPolisher::FromPlan(const Plan& plan) const {
  DiscretePlan out;
  out.microbatch_option = tables_.FindMicrobatchOption(plan.num_microbatches);
  if (out.microbatch_option < 0)
    ThrowInputError("plan", "num_microbatches", plan.num_microbatches,
                    "is not an option of the search space");
  const auto v = std::find(tables_.virtual_stages.begin(), tables_.virtual_stages.end(),
                           plan.virtual_stages);
  if (v == tables_.virtual_stages.end())
    ThrowInputError("plan", "virtual_stages", plan.virtual_stages,
                    "is not a count the search space offers for this problem");
  out.virtual_option = static_cast<int>(v - tables_.virtual_stages.begin());
  // Rank s of p runs the chunks s, s + p, ...: its plain stage has all their layers.
  const int p = plan.NumPipelineRanks();
  out.boundaries.push_back(0);
  for (int s = 0; s < p; ++s) {
    const int k = tables_.FindConfig(plan.stages[s].config);
    if (k < 0)
      ThrowInputError("plan", fmt::format("stages[{}].config", s), plan.stages[s].config.Label(),
                      "is not a config of the search space");
    out.configs.push_back(k);
    int layers = 0;
    for (int chunk = s; chunk < plan.NumStages(); chunk += p)
      layers += plan.stages[chunk].NumLayers();
    out.boundaries.push_back(out.boundaries.back() + layers);
  }
  return out;
}

int PlanPolisher::NearestValidConfig(int k, int m, int max_devices) const {
  const StageConfig& a = tables_.configs[k];
  if (tables_.Valid(k, m) && (max_devices <= 0 || a.NumDevices() <= max_devices)) return k;
  int* cached = nullptr;
  if (max_devices <= 0) {  // the common query: memoized per (k, m)
    cached = &nearest_valid_[static_cast<size_t>(k) * tables_.num_microbatch_options + m];
    if (*cached != -2) return *cached;
  }
  int best = -1;
  double best_distance = 0;
  for (int j = 0; j < tables_.num_configs; ++j) {
    if (!tables_.Valid(j, m)) continue;
    const StageConfig& b = tables_.configs[j];
    if (b.node_group != a.node_group) continue;
    if (max_devices > 0 && b.NumDevices() > max_devices) continue;
    // Prefer the same mesh size (then smaller over larger), then TP, recompute, ZeRO.
    const double mesh = std::abs(Log2(a.NumDevices()) - Log2(b.NumDevices())) +
                        (b.NumDevices() > a.NumDevices() ? 0.5 : 0.0);
    const double distance = 100.0 * mesh +
                            10.0 * std::abs(Log2(a.tensor_parallel) - Log2(b.tensor_parallel)) +
                            3.0 * std::abs(RecomputeIndex(a.recompute) - RecomputeIndex(b.recompute)) +
                            std::abs(a.zero_stage - b.zero_stage);
    if (best < 0 || distance < best_distance) {
      best = j;
      best_distance = distance;
    }
  }
  if (cached) *cached = best;
  return best;
}

int PlanPolisher::WithMesh(int k, int mesh_index, int m) const {
  const StageConfig& a = tables_.configs[k];
  if (m < 0) {  // any microbatch count
    for (int tp = std::min(a.tensor_parallel, 1 << (num_tp_slots_ - 1)); tp >= 1; tp /= 2) {
      int j = Lookup(a.node_group, mesh_index, tp, a.zero_stage, RecomputeIndex(a.recompute));
      if (j < 0) j = Lookup(a.node_group, mesh_index, tp, 0, RecomputeIndex(a.recompute));
      if (j >= 0) return j;
    }
    return -1;
  }
  for (int tp = std::min(a.tensor_parallel, 1 << (num_tp_slots_ - 1)); tp >= 1; tp /= 2) {
    int j = Lookup(a.node_group, mesh_index, tp, a.zero_stage, RecomputeIndex(a.recompute));
    if (j < 0) j = Lookup(a.node_group, mesh_index, tp, 0, RecomputeIndex(a.recompute));
    if (j >= 0) {
      if (tables_.Valid(j, m)) return j;
      // Same mesh, nearest valid for m.
      const int n = NearestValidConfig(j, m, mesh_sizes_[mesh_index]);
      if (n >= 0 && config_mesh_index_[n] == mesh_index) return n;
      return -1;
    }
  }
  return -1;
}

int PlanPolisher::HalfMeshSameDp(int k, int m) const {
  const StageConfig& a = tables_.configs[k];
  if (a.tensor_parallel < 2) return -1;
  const int j = Lookup(a.node_group, config_mesh_index_[k] - 1, a.tensor_parallel / 2,
                       a.zero_stage, RecomputeIndex(a.recompute));
  if (j < 0 || tables_.configs[j].data_parallel != a.data_parallel) return -1;
  return m < 0 || tables_.Valid(j, m) ? j : -1;
}

bool PlanPolisher::FixMemory(DiscretePlan* plan, bool every_stage) const {
  const int S = plan->NumStages();
  const int m = plan->microbatch_option;
  const int vi = plan->virtual_option;
  bool all_fit = true;
  for (int s = 0; s < S; ++s) {
    auto peak_of = [&](int k, double* seconds) {
      const TermScalars x = StageScalars(k, m, plan->boundaries[s], plan->boundaries[s + 1],
                                         s == 0, s == S - 1, -1, -1, vi);
      *seconds = x.microbatch_seconds + (x.TailSeconds() + x.one_time_seconds) /
                                            std::max(1, tables_.num_microbatches[m]);
      return x.state_bytes + InFlightMicrobatches(m, S, s, vi) * x.activation_bytes +
             x.working_bytes;
    };
    double seconds = 0;
    const int current = plan->configs[s];
    if (!every_stage && peak_of(current, &seconds) <= capacity_[current]) continue;
    // The choice depends only on (layer range, mesh, m, first, last, in-flight count): memoized.
    const std::uint64_t b0 = static_cast<std::uint64_t>(plan->boundaries[s]);
    const std::uint64_t b1 = static_cast<std::uint64_t>(plan->boundaries[s + 1]);
    const std::uint64_t mesh = static_cast<std::uint64_t>(MeshKey(current));
    const std::uint64_t in_flight = static_cast<std::uint64_t>(InFlight(m, S, s, vi));
    const bool cacheable = b1 < (1u << 16) && mesh < (1u << 8) && m < (1 << 8) &&
                           in_flight < (1u << 11) && vi < (1 << 3);
    const std::uint64_t key = ((((((b0 << 16 | b1) << 8 | mesh) << 8 |
                                  static_cast<std::uint64_t>(m))
                                 << 1 | (s == 0 ? 1u : 0u))
                                << 1 | (s == S - 1 ? 1u : 0u))
                                   << 11 |
                               in_flight)
                                  << 3 |
                              static_cast<std::uint64_t>(vi);
    int best = -1;
    auto cached = cacheable ? fix_memory_cache_.find(key) : fix_memory_cache_.end();
    if (cached != fix_memory_cache_.end()) {
      best = cached->second;
    } else {
      double best_seconds = 0;
      for (int j : mesh_configs_[mesh]) {
        if (!tables_.Valid(j, m)) continue;
        if (peak_of(j, &seconds) > capacity_[j]) continue;
        if (best < 0 || seconds < best_seconds) {
          best = j;
          best_seconds = seconds;
        }
      }
      if (cacheable) {
        if (fix_memory_cache_.size() > 1000000) fix_memory_cache_.clear();
        fix_memory_cache_.emplace(key, best);
      }
    }
    if (best >= 0) {
      plan->configs[s] = best;
    } else {
      all_fit = false;
    }
  }
  return all_fit;
}

bool PlanPolisher::Repair(DiscretePlan* plan) {
  const int L = tables_.num_layers;
  if (plan->microbatch_option < 0 || plan->microbatch_option >= tables_.num_microbatch_options)
    plan->microbatch_option = 0;
  int m = plan->microbatch_option;
  // Configs valid for m; if some config has no valid neighbour at this m, try other m.
  auto make_valid = [&](int option) {
    for (int& k : plan->configs) {
      const int j = NearestValidConfig(k, option);
      if (j < 0) return false;
      k = j;
    }
    return true;
  };
  std::vector<int> saved = plan->configs;
  if (!make_valid(m)) {
    bool ok = false;
    for (int option = 0; option < tables_.num_microbatch_options && !ok; ++option) {
      plan->configs = saved;
      if (make_valid(option)) {
        plan->microbatch_option = m = option;
        ok = true;
      }
    }
    if (!ok) return false;
  }
  // Stage count: split the stage with the most layers until min_stages; merge the two smallest
  // neighbours while above max_stages.
  while (plan->NumStages() < tables_.min_stages) {
    int widest = -1;
    for (int s = 0; s < plan->NumStages(); ++s)
      if (plan->boundaries[s + 1] - plan->boundaries[s] >= 2 &&
          (widest < 0 || plan->boundaries[s + 1] - plan->boundaries[s] >
                             plan->boundaries[widest + 1] - plan->boundaries[widest]))
        widest = s;
    if (widest < 0) return false;
    const int mid = (plan->boundaries[widest] + plan->boundaries[widest + 1]) / 2;
    plan->boundaries.insert(plan->boundaries.begin() + widest + 1, mid);
    plan->configs.insert(plan->configs.begin() + widest, plan->configs[widest]);
  }
  auto merge_smallest = [&]() {
    int best = -1;
    for (int s = 0; s + 1 < plan->NumStages(); ++s)
      if (best < 0 || plan->boundaries[s + 2] - plan->boundaries[s] <
                          plan->boundaries[best + 2] - plan->boundaries[best])
        best = s;
    plan->boundaries.erase(plan->boundaries.begin() + best + 1);
    plan->configs.erase(plan->configs.begin() + best + 1);
  };
  while (plan->NumStages() > tables_.max_stages) merge_smallest();
  (void)L;
  // Device budget: shrink the largest mesh one size at a time; merge if everything is minimal.
  // On a heterogeneous cluster, of a group over its own budget.
  for (;;) {
    int devices = 0;
    std::vector<int> group_devices(tables_.num_groups, 0);
    for (int k : plan->configs) {
      devices += tables_.configs[k].NumDevices();
      group_devices[tables_.configs[k].node_group] += tables_.configs[k].NumDevices();
    }
    int over = -1;  // a group over its budget (-1: none; any group on a homogeneous cluster)
    for (int g = 0; g < tables_.num_groups && tables_.num_groups > 1 && over < 0; ++g)
      if (group_devices[g] > tables_.group_devices[g]) over = g;
    if (devices <= tables_.num_devices && (tables_.num_groups == 1 || over < 0)) break;
    int largest = -1;
    for (int s = 0; s < plan->NumStages(); ++s)
      if (config_mesh_index_[plan->configs[s]] > 0 &&
          (over < 0 || tables_.configs[plan->configs[s]].node_group == over) &&
          (largest < 0 || tables_.configs[plan->configs[s]].NumDevices() >
                              tables_.configs[plan->configs[largest]].NumDevices()))
        largest = s;
    int smaller = -1;
    if (largest >= 0) {
      smaller = WithMesh(plan->configs[largest], config_mesh_index_[plan->configs[largest]] - 1, m);
      if (smaller < 0)
        smaller = NearestValidConfig(plan->configs[largest], m,
                                     tables_.configs[plan->configs[largest]].NumDevices() / 2);
    }
    if (smaller >= 0) {
      plan->configs[largest] = smaller;
    } else if (plan->NumStages() > tables_.min_stages) {
      merge_smallest();
    } else {
      return false;
    }
  }
  FixMemory(plan);
  return Cost(*plan).valid;
}

bool PlanPolisher::Rebalance(DiscretePlan* plan) const {
  const int S = plan->NumStages();
  const int L = tables_.num_layers;
  const int C = tables_.num_classes;
  const int m = plan->microbatch_option;
  const int vi = plan->virtual_option;
  const int min_layers = tables_.virtual_stages[vi];
  if (S < 1 || S * min_layers > L) return false;
  std::string key(reinterpret_cast<const char*>(plan->configs.data()), sizeof(int) * S);
  key.append(reinterpret_cast<const char*>(&m), sizeof(int));
  key.append(reinterpret_cast<const char*>(&vi), sizeof(int));
  if (auto it = rebalance_cache_.find(key); it != rebalance_cache_.end()) {
    if (it->second.empty()) return false;
    plan->boundaries = it->second;
    return true;
  }
  if (rebalance_cache_.size() > 200000) rebalance_cache_.clear();
  std::vector<int>& cached = rebalance_cache_[key];
  // Per stage: overhead and per-class layer time and memory.
  std::vector<double> base_t(S), base_mem(S), layer_t(static_cast<size_t>(S) * C),
      layer_mem(static_cast<size_t>(S) * C), capacity(S);
  double hi = 0, lowest_total = std::numeric_limits<double>::infinity();
  for (int s = 0; s < S; ++s) {
    const int k = plan->configs[s];
    const double in_flight = InFlightMicrobatches(m, S, s, vi);
    capacity[s] = capacity_[k];
    const TermScalars& o =
        tables_.cross_overhead.empty()
            ? tables_.Overhead(k, m, s == 0, s == S - 1, vi)
            : tables_.OverheadBetween(k, m, s == 0, s == S - 1,
                                      s > 0 ? tables_.configs[plan->configs[s - 1]].node_group : -1,
                                      s + 1 < S ? tables_.configs[plan->configs[s + 1]].node_group
                                                : -1);
    base_t[s] = o.microbatch_seconds;
    base_mem[s] = o.state_bytes + in_flight * o.activation_bytes + o.working_bytes;
    double total = base_t[s];
    for (int c = 0; c < C; ++c) {
      const TermScalars& x = tables_.Layer(c, k, m);
      layer_t[s * C + c] = x.microbatch_seconds;
      layer_mem[s * C + c] = x.state_bytes + in_flight * x.activation_bytes + x.working_bytes;
      total += x.microbatch_seconds * tables_.ClassCount(0, L, c);
    }
    hi = std::max(hi, total);
    lowest_total = std::min(lowest_total, total);
  }
  std::vector<int> bounds(S + 1);
  auto fill = [&](double t_max, bool check_memory) {
    int l = 0;
    bounds[0] = 0;
    for (int s = 0; s < S; ++s) {
      // Each stage takes at least one layer per virtual stage (InterleavePlan).
      const int max_end = L - (S - 1 - s) * min_layers;
      double t = base_t[s], mem = base_mem[s];
      int end = l;
      while (end < max_end) {
        const int c = tables_.layer_class[end];
        const double nt = t + layer_t[s * C + c], nm = mem + layer_mem[s * C + c];
        const bool must = end - l < min_layers || s == S - 1;
        if (!must && (nt > t_max || (check_memory && nm > capacity[s]))) break;
        t = nt;
        mem = nm;
        ++end;
      }
      if (s == S - 1 && end != L) return false;
      if (t > t_max || (check_memory && mem > capacity[s])) return false;
      bounds[s + 1] = end;
      l = end;
    }
    return true;
  };
  bool check_memory = true;
  if (!fill(hi * 1.000001, true)) {
    check_memory = false;
    if (!fill(hi * 1.000001, false)) return false;
  }
  double lo = lowest_total / S * 0.999;
  hi *= 1.000001;
  for (int i = 0; i < 60 && hi - lo > 1e-7 * hi; ++i) {
    const double mid = 0.5 * (lo + hi);
    if (fill(mid, check_memory)) {
      hi = mid;
    } else {
      lo = mid;
    }
  }
  if (!fill(hi, check_memory)) return false;
  plan->boundaries = bounds;
  cached = bounds;
  return true;
}

void PlanPolisher::Neighbors(const DiscretePlan& plan, bool extended,
                             std::vector<DiscretePlan>* out) const {
  const int S = plan.NumStages();
  const int L = tables_.num_layers;
  const int m = plan.microbatch_option;
  auto push = [&](const DiscretePlan& p) { out->push_back(p); };
  // The extended neighbourhood picks the microbatch count (and valid configs) afterwards.
  const int any_m = extended ? -1 : m;
  // A structural move, also rebalanced, and with overflowing stages moved to the fastest
  // config of the same mesh that fits (then rebalanced again).
  auto push_balanced = [&](DiscretePlan p) {
    out->push_back(p);
    DiscretePlan balanced = p;
    if (Rebalance(&balanced)) out->push_back(balanced);
    for (bool every_stage : {false, true}) {
      DiscretePlan fixed = p;
      FixMemory(&fixed, every_stage);
      if (fixed.configs != p.configs) {
        out->push_back(fixed);
        if (Rebalance(&fixed)) {
          FixMemory(&fixed, every_stage);
          out->push_back(std::move(fixed));
        }
      }
    }
  };
  // Structural moves; in the extended neighbourhood combined with every microbatch count.
  auto push_structural = [&](const DiscretePlan& p) {
    if (!extended) {
      push_balanced(p);
      return;
    }
    for (int option = 0; option < tables_.num_microbatch_options; ++option) {
      DiscretePlan q = p;
      q.microbatch_option = option;
      bool ok = true;
      for (int& k : q.configs) {
        k = NearestValidConfig(k, option);
        ok = ok && k >= 0;
      }
      if (ok) push_balanced(q);
    }
  };

  // Boundary moves.
  for (int i = 1; i < S && !extended; ++i)
    for (int d = 1; d < L; d = d < 4 ? d + 1 : d * 2)
      for (int sign : {-1, 1}) {
        const int b = plan.boundaries[i] + sign * d;
        if (b <= plan.boundaries[i - 1] || b >= plan.boundaries[i + 1]) continue;
        DiscretePlan p = plan;
        p.boundaries[i] = b;
        push(p);
      }
  // One stage's config, one or two dimensions at a time.
  for (int s = 0; s < S && !extended; ++s)
    for (int j : config_neighbors_[plan.configs[s]]) {
      if (!tables_.Valid(j, m)) continue;
      DiscretePlan p = plan;
      p.configs[s] = j;
      push(p);
    }
  // The same change on every stage: set TP / ZeRO / recompute, or move the mesh one size; on a
  // heterogeneous cluster also on every stage of one node group (the groups' stages differ, so
  // what one group's stages need together the others' may not).
  std::set<std::vector<int>> seen;
  std::vector<int> groups{-1};  // -1: every stage
  if (tables_.num_groups > 1)
    for (int g = 0; g < tables_.num_groups; ++g) groups.push_back(g);
  auto push_global = [&](auto&& transform) {
    for (int group : groups) {
      DiscretePlan p = plan;
      bool changed = false;
      for (int& k : p.configs) {
        if (group >= 0 && tables_.configs[k].node_group != group) continue;
        const int j = transform(k);
        if (j >= 0 && j != k && (extended || tables_.Valid(j, m))) {
          k = j;
          changed = true;
        }
      }
      if (changed && seen.insert(p.configs).second) push_structural(p);
    }
  };
  for (int tp = 1; tp < (1 << num_tp_slots_); tp *= 2)
    push_global([&](int k) {
      const StageConfig& c = tables_.configs[k];
      return Lookup(c.node_group, config_mesh_index_[k], tp, c.zero_stage,
                    RecomputeIndex(c.recompute));
    });
  for (int zero = 0; zero < 4; ++zero)
    push_global([&](int k) {
      const StageConfig& c = tables_.configs[k];
      return Lookup(c.node_group, config_mesh_index_[k], c.tensor_parallel, zero,
                    RecomputeIndex(c.recompute));
    });
  for (int r = 0; r < 3; ++r)
    push_global([&](int k) {
      const StageConfig& c = tables_.configs[k];
      return Lookup(c.node_group, config_mesh_index_[k], c.tensor_parallel, c.zero_stage, r);
    });
  for (int delta : {-1, 1})
    push_global([&](int k) { return WithMesh(k, config_mesh_index_[k] + delta, any_m); });
  // Every stage takes one stage's config.
  for (int s = 0; s < S; ++s) {
    DiscretePlan p = plan;
    std::fill(p.configs.begin(), p.configs.end(), plan.configs[s]);
    if (seen.insert(p.configs).second) push_structural(p);
  }
  // Another microbatch count (configs moved to the nearest valid one, memory fixed).
  for (int option = 0; option < tables_.num_microbatch_options && !extended; ++option) {
    if (option == m) continue;
    DiscretePlan p = plan;
    p.microbatch_option = option;
    bool ok = true;
    for (int& k : p.configs) {
      k = NearestValidConfig(k, option);
      ok = ok && k >= 0;
    }
    if (!ok) continue;
    push_balanced(p);
  }
  // Another number of virtual stages per rank (rebalanced, memory fixed).
  for (int option = 0; option < tables_.NumVirtualStageOptions() && !extended; ++option) {
    if (option == plan.virtual_option) continue;
    DiscretePlan p = plan;
    p.virtual_option = option;
    push_balanced(p);
  }
  // Merge two neighbouring stages.
  if (S > tables_.min_stages) {
    for (int s = 0; s + 1 < S; ++s) {
      std::set<int> options{plan.configs[s], plan.configs[s + 1]};
      for (int k : {plan.configs[s], plan.configs[s + 1]}) {
        const int bigger = WithMesh(k, config_mesh_index_[k] + 1, any_m);
        if (bigger >= 0) options.insert(bigger);
      }
      for (int k : options) {
        DiscretePlan p = plan;
        p.boundaries.erase(p.boundaries.begin() + s + 1);
        p.configs.erase(p.configs.begin() + s + 1);
        p.configs[s] = k;
        push_structural(p);
      }
    }
  }
  // Split a stage in two (same config, or both on half the mesh).
  if (S < tables_.max_stages) {
    for (int s = 0; s < S; ++s) {
      if (plan.boundaries[s + 1] - plan.boundaries[s] < 2) continue;
      const int k = plan.configs[s];
      std::set<int> options{k};
      const int half = WithMesh(k, config_mesh_index_[k] - 1, any_m);
      if (half >= 0) options.insert(half);
      for (int j : options) {
        DiscretePlan p = plan;
        const int mid = (plan.boundaries[s] + plan.boundaries[s + 1]) / 2;
        p.boundaries.insert(p.boundaries.begin() + s + 1, mid);
        p.configs[s] = j;
        p.configs.insert(p.configs.begin() + s, j);
        push_structural(p);
      }
    }
  }
  // Split every stage in two, both halves on half its mesh (a stage that cannot be halved stays
  // whole): the pipeline twice as deep on the same devices, each group keeping its share, which
  // one split at a time cannot reach when the stages must stay balanced. The halves keep the
  // stage's TP (half the DP) or its DP (half the TP); on a heterogeneous cluster also the stages
  // of one node group alone.
  if (S < tables_.max_stages) {
    for (int group : groups)
      for (bool same_dp : {false, true}) {
        DiscretePlan p = plan;
        p.boundaries.assign(1, 0);
        p.configs.clear();
        for (int s = 0; s < S; ++s) {
          const int k = plan.configs[s];
          const bool in_group = group < 0 || tables_.configs[k].node_group == group;
          const int half = !in_group ? -1
                           : same_dp ? HalfMeshSameDp(k, any_m)
                                     : WithMesh(k, config_mesh_index_[k] - 1, any_m);
          const int first = plan.boundaries[s], last = plan.boundaries[s + 1];
          const bool split = half >= 0 && last - first >= 2 &&
                             p.NumStages() + 2 + (S - s - 1) <= tables_.max_stages;
          if (split) {
            p.boundaries.push_back((first + last) / 2);
            p.configs.push_back(half);
          }
          p.boundaries.push_back(last);
          p.configs.push_back(split ? half : k);
        }
        if (p.NumStages() > S && seen.insert(p.configs).second) push_structural(p);
      }
  }
  // Another stage count with uniform stages: the widest stage's config, its mesh scaled so that
  // the stages share the devices.
  {
    int widest = 0;
    for (int s = 0; s < S; ++s)
      if (plan.boundaries[s + 1] - plan.boundaries[s] >
          plan.boundaries[widest + 1] - plan.boundaries[widest])
        widest = s;
    const int base = plan.configs[widest];
    std::set<int> counts;
    for (int target : {S - 1, S + 1, S / 2, S * 2, (S * 3) / 2, (S * 2) / 3})
      if (target >= tables_.min_stages && target <= tables_.max_stages && target != S &&
          target <= L)
        counts.insert(target);
    for (int target : counts) {
      const int budget = tables_.group_devices[tables_.configs[base].node_group] / target;
      for (int mi = static_cast<int>(mesh_sizes_.size()) - 1; mi >= 0; --mi) {
        if (mesh_sizes_[mi] > budget) continue;
        const int k = WithMesh(base, mi, any_m);
        if (k < 0) continue;
        DiscretePlan p;
        p.microbatch_option = m;
        p.virtual_option = plan.virtual_option;
        p.configs.assign(target, k);
        p.boundaries.resize(target + 1);
        for (int s = 0; s <= target; ++s) p.boundaries[s] = static_cast<int>(
                                              static_cast<long>(s) * L / target);
        push_structural(p);
        break;
      }
    }
  }
  // Rebalance as is.
  {
    DiscretePlan p = plan;
    if (Rebalance(&p) && !(p == plan)) push(p);
  }
}

std::string PlanPolisher::Key(const DiscretePlan& plan) {
  std::string key;
  key.reserve(sizeof(int) * (plan.boundaries.size() + plan.configs.size() + 2));
  key.append(reinterpret_cast<const char*>(&plan.microbatch_option), sizeof(int));
  key.append(reinterpret_cast<const char*>(&plan.virtual_option), sizeof(int));
  key.append(reinterpret_cast<const char*>(plan.boundaries.data()),
             sizeof(int) * plan.boundaries.size());
  key.append(reinterpret_cast<const char*>(plan.configs.data()), sizeof(int) * plan.configs.size());
  return key;
}

DiscreteCost PlanPolisher::Polish(DiscretePlan* plan, const PolishLimits& limits,
                                  const std::function<void(double)>& on_improvement) {
  DiscreteCost current = Cost(*plan);
  DiscretePlan best_plan = *plan;
  DiscreteCost best = current;
  std::vector<DiscretePlan> neighbors;
  std::mt19937_64 rng(limits.seed);

  auto improve = [&](const DiscretePlan& p, const DiscreteCost& cost) {
    if (cost.BetterThan(best)) {
      best = cost;
      best_plan = p;
      if (on_improvement && best.Fits()) on_improvement(best.iteration_seconds);
    }
  };
  // The descent from a plan is deterministic, so every plan on a finished descent path is
  // remembered with the local optimum it leads to; a later descent that reaches one of them
  // (another start, a kick) jumps there without re-scanning the neighbourhoods.
  std::vector<std::string> path;
  // Returns the index of the local optimum reached in local_optima_, -1 if cut short.
  auto descend = [&](DiscretePlan* p, DiscreteCost* cost) -> int {
    path.clear();
    for (;;) {
      if (OutOfBudget(limits)) return -1;
      std::string key = Key(*p);
      if (auto it = descent_memo_.find(key); it != descent_memo_.end()) {
        const int index = it->second;
        *p = local_optima_[index].first;
        *cost = local_optima_[index].second;
        improve(*p, *cost);
        for (std::string& k : path) descent_memo_.emplace(std::move(k), index);
        return index;
      }
      path.push_back(std::move(key));
      int chosen = -1;
      DiscreteCost chosen_cost = *cost;
      // Variable neighbourhood descent: the extended neighbourhood only at a local optimum.
      for (bool extended : {false, true}) {
        neighbors.clear();
        Neighbors(*p, extended, &neighbors);
        for (int i = 0; i < static_cast<int>(neighbors.size()); ++i) {
          const DiscreteCost c = Cost(neighbors[i]);
          // Improvements must be real, not rounding noise.
          if (c.BetterThan(chosen_cost) &&
              (c.overflow_bytes < chosen_cost.overflow_bytes ||
               c.iteration_seconds < chosen_cost.iteration_seconds * (1 - 1e-12))) {
            chosen = i;
            chosen_cost = c;
          }
        }
        if (chosen >= 0 || OutOfBudget(limits)) break;
      }
      if (chosen < 0) {
        if (OutOfBudget(limits)) return -1;  // not known to be a local optimum
        const int index = static_cast<int>(local_optima_.size());
        local_optima_.emplace_back(*p, *cost);
        kicked_.push_back(0);
        for (std::string& k : path) descent_memo_.emplace(std::move(k), index);
        return index;
      }
      *p = neighbors[chosen];
      *cost = chosen_cost;
      improve(*p, *cost);
    }
  };
  if (best.Fits() && on_improvement) on_improvement(best.iteration_seconds);
  const int reached = descend(plan, &current);
  // Kicks from a local optimum that an earlier Polish call already kicked from are skipped:
  // the restarts often converge to the same plan.
  int kicks = limits.kicks;
  if (reached >= 0 && best_plan == local_optima_[reached].first) {
    if (kicked_[reached]) kicks = 0;
    kicked_[reached] = 1;
  }
  for (int kick = 0; kick < kicks && !OutOfBudget(limits); ++kick) {
    DiscretePlan p = best_plan;
    for (int step = 0; step < 2; ++step) {
      neighbors.clear();
      Neighbors(p, /*extended=*/false, &neighbors);
      if (neighbors.empty()) break;
      p = neighbors[std::uniform_int_distribution<size_t>(0, neighbors.size() - 1)(rng)];
    }
    DiscreteCost c = Cost(p);
    if (!c.valid) continue;
    descend(&p, &c);
  }
  *plan = best_plan;
  return best;
}

}  // namespace stratos
