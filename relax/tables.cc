#include "relax/tables.h"

#include <algorithm>
#include <map>

#include "costmodel/error.h"
#include "costmodel/interleaved_cost_model.h"
#include "costmodel/plan.h"
#include "costmodel/stage_table.h"

namespace stratos {

TermScalars TermScalars::From(const StageTerms& terms) {
  TermScalars s;
  s.microbatch_seconds = terms.MicrobatchSeconds();
  s.additive_tail_seconds = terms.AdditiveTailSeconds();
  s.bucketed_sync_seconds = terms.dp_bucketed_sync_seconds;
  s.backward_window_seconds = terms.dp_backward_window_seconds;
  s.last_bucket_seconds = terms.dp_last_bucket_seconds;
  s.one_time_seconds = terms.OneTimeSeconds();
  s.state_bytes = terms.state_bytes;
  s.activation_bytes = terms.activation_bytes;
  s.working_bytes = terms.working_bytes;
  return s;
}

int RelaxTables::FindConfig(const StageConfig& config) const {
  for (int k = 0; k < num_configs; ++k)
    if (configs[k] == config) return k;
  return -1;
}

const TermScalars& RelaxTables::OverheadBetween(int k, int m, bool first, bool last,
                                                int previous_group, int next_group) const {
  const int own = configs[k].node_group;
  const int p = previous_group < 0 || previous_group == own ? 0 : previous_group + 1;
  const int n = next_group < 0 || next_group == own ? 0 : next_group + 1;
  if (p == 0 && n == 0) return Overhead(k, m, first, last);
  const size_t G1 = static_cast<size_t>(num_groups) + 1;
  return cross_overhead[((((static_cast<size_t>(k) * num_microbatch_options + m) * 2 +
                           (first ? 1 : 0)) * 2 + (last ? 1 : 0)) * G1 + p) * G1 + n];
}

int RelaxTables::FindMicrobatchOption(int m) const {
  for (int i = 0; i < num_microbatch_options; ++i)
    if (num_microbatches[i] == m) return i;
  return -1;
}

namespace {

// Whether every entry of `a` is <= the same entry of `b`; of the bucketed DP reduction S, S - W
// and b, in which the tail is nondecreasing (BucketedDpExposedSeconds).
bool NoWorse(const TermScalars& a, const TermScalars& b) {
  return a.microbatch_seconds <= b.microbatch_seconds &&
         a.additive_tail_seconds <= b.additive_tail_seconds &&
         a.bucketed_sync_seconds <= b.bucketed_sync_seconds &&
         a.bucketed_sync_seconds - a.backward_window_seconds <=
             b.bucketed_sync_seconds - b.backward_window_seconds &&
         a.last_bucket_seconds <= b.last_bucket_seconds &&
         a.one_time_seconds <= b.one_time_seconds && a.state_bytes <= b.state_bytes &&
         a.activation_bytes <= b.activation_bytes && a.working_bytes <= b.working_bytes;
}

bool Equal(const TermScalars& a, const TermScalars& b) { return NoWorse(a, b) && NoWorse(b, a); }

// Whether config a dominates config b (same mesh size assumed). `strict` is set when a is better
// somewhere (ties are broken by the caller by index).
bool Dominates(const RelaxTables& t, int a, int b, bool* strict) {
  *strict = false;
  for (int m = 0; m < t.num_microbatch_options; ++m) {
    if (!t.Valid(b, m)) {
      if (t.Valid(a, m)) *strict = true;
      continue;
    }
    if (!t.Valid(a, m)) return false;
    for (int c = 0; c < t.num_classes; ++c) {
      if (!NoWorse(t.Layer(c, a, m), t.Layer(c, b, m))) return false;
      if (!Equal(t.Layer(c, a, m), t.Layer(c, b, m))) *strict = true;
    }
    for (int f = 0; f < 2; ++f)
      for (int l = 0; l < 2; ++l)
        for (int p = -1; p < t.num_groups; ++p)
          for (int n = -1; n < t.num_groups; ++n) {
            if ((p >= 0 || n >= 0) && t.cross_overhead.empty()) continue;
            const TermScalars& x = t.OverheadBetween(a, m, f, l, p, n);
            const TermScalars& y = t.OverheadBetween(b, m, f, l, p, n);
            if (!NoWorse(x, y)) return false;
            if (!Equal(x, y)) *strict = true;
          }
    for (int v = 1; v < t.NumVirtualStageOptions(); ++v)
      for (int f = 0; f < 2; ++f)
        for (int l = 0; l < 2; ++l) {
          const TermScalars& x = t.Overhead(a, m, f, l, v);
          const TermScalars& y = t.Overhead(b, m, f, l, v);
          if (!NoWorse(x, y)) return false;
          if (!Equal(x, y)) *strict = true;
        }
  }
  return true;
}

}  // namespace

RelaxTables BuildRelaxTables(const CostModel& cost_model, const SearchSpace& space,
                             const std::vector<int>& virtual_stages) {
  const Problem& problem = cost_model.problem();
  const ModelSpec& model = problem.model;
  if (model.layers.empty())
    ThrowInputError(model.source.empty() ? std::string("model") : model.source, "layers", 0,
                    "a model needs at least one layer to partition");
  RelaxTables t;
  t.num_layers = model.NumLayers();
  t.configs = space.configs;
  t.num_configs = static_cast<int>(space.configs.size());
  t.num_microbatches = space.num_microbatches;
  t.num_microbatch_options = static_cast<int>(space.num_microbatches.size());
  t.min_stages = space.min_stages;
  t.max_stages = std::min(space.max_stages, t.num_layers);
  t.num_devices = space.num_devices;
  t.global_batch_size = problem.training.global_batch_size;
  t.schedule = problem.training.schedule;
  t.memory_capacity_bytes = cost_model.DeviceMemoryCapacityBytes();
  t.num_groups = static_cast<int>(space.group_devices.size());
  t.group_devices = space.group_devices;
  for (int g = 0; g < t.num_groups; ++g)
    t.group_capacity_bytes.push_back(cost_model.DeviceMemoryCapacityBytes(g));
  STRATOS_CHECK(t.num_configs > 0 && t.num_microbatch_options > 0, "empty search space");

  std::map<int, int> dense;  // cost_class -> dense index
  t.layer_class.resize(t.num_layers);
  for (int l = 0; l < t.num_layers; ++l) {
    auto [it, inserted] = dense.emplace(model.layers[l].cost_class, static_cast<int>(dense.size()));
    if (inserted) t.class_representative.push_back(l);
    t.layer_class[l] = it->second;
  }
  t.num_classes = static_cast<int>(dense.size());
  const int C = t.num_classes, K = t.num_configs, M = t.num_microbatch_options;
  t.class_prefix.assign(static_cast<size_t>(t.num_layers + 1) * C, 0);
  for (int l = 0; l < t.num_layers; ++l)
    for (int c = 0; c < C; ++c)
      t.class_prefix[static_cast<size_t>(l + 1) * C + c] =
          t.class_prefix[static_cast<size_t>(l) * C + c] + (t.layer_class[l] == c ? 1 : 0);

  t.valid.assign(static_cast<size_t>(K) * M, 0);
  t.layer.assign(static_cast<size_t>(C) * K * M, TermScalars{});
  t.overhead.assign(static_cast<size_t>(K) * M * 4, TermScalars{});
  const size_t G1 = static_cast<size_t>(t.num_groups) + 1;
  if (t.num_groups > 1)
    t.cross_overhead.assign(static_cast<size_t>(K) * M * 4 * G1 * G1, TermScalars{});
  double largest_seconds = 0;
  for (int m = 0; m < M; ++m) {
    // The stage terms every searcher prices from (costmodel/stage_table.h), with the overheads
    // towards neighbours in other node groups on a heterogeneous cluster.
    const StageTable table(cost_model, space.configs, space.num_microbatches[m], -1, -1,
                           /*every_neighbour_group=*/t.num_groups > 1);
    for (int k = 0; k < K; ++k) {
      if (!table.Valid(k)) continue;
      t.valid[static_cast<size_t>(k) * M + m] = 1;
      for (int c = 0; c < C; ++c) {
        TermScalars s = TermScalars::From(table.Layer(t.class_representative[c], k));
        t.layer[(static_cast<size_t>(c) * K + k) * M + m] = s;
        largest_seconds = std::max(
            largest_seconds, s.microbatch_seconds + s.TailSeconds() + s.one_time_seconds);
      }
      for (int f = 0; f < 2; ++f)
        for (int l = 0; l < 2; ++l) {
          TermScalars s = TermScalars::From(table.Overhead(k, f == 1, l == 1));
          t.overhead[((static_cast<size_t>(k) * M + m) * 2 + f) * 2 + l] = s;
          largest_seconds = std::max(
              largest_seconds, s.microbatch_seconds + s.TailSeconds() + s.one_time_seconds);
          // Neighbours in other groups (index 0: the own group, as above; index own + 1 is
          // never read: OverheadBetween maps the own group to 0).
          const size_t own = static_cast<size_t>(space.configs[k].node_group) + 1;
          for (size_t p = 0; p < G1 && t.num_groups > 1; ++p)
            for (size_t n = 0; n < G1; ++n)
              if (p != own && n != own)
                t.cross_overhead[((((static_cast<size_t>(k) * M + m) * 2 + f) * 2 + l) * G1 + p) *
                                   G1 +
                               n] = TermScalars::From(table.OverheadBetween(
                    k, f == 1, l == 1, static_cast<int>(p) - 1, static_cast<int>(n) - 1));
        }
    }
  }
  // Ranks of v chunks: the same stage overheads priced with v virtual pipeline stages.
  t.virtual_stages = ExactVirtualStages(problem, virtual_stages);
  const int V = t.NumVirtualStageOptions();
  t.interleaved_overhead.assign(static_cast<size_t>(V - 1) * K * M * 4, TermScalars{});
  for (int vi = 1; vi < V; ++vi) {
    const InterleavedCostModel interleaved(problem, t.virtual_stages[vi]);
    const CostModel& model = interleaved.cost_model();
    for (int k = 0; k < K; ++k)
      for (int m = 0; m < M; ++m) {
        if (!t.Valid(k, m)) continue;
        for (int f = 0; f < 2; ++f)
          for (int l = 0; l < 2; ++l)
            t.interleaved_overhead[(((static_cast<size_t>(vi - 1) * K + k) * M + m) * 2 + f) * 2 +
                                   l] =
                TermScalars::From(model.StageOverhead(space.configs[k], space.num_microbatches[m],
                                                      f == 1, l == 1));
      }
  }
  // An invalid (config, m) costs as if every layer took 10x the slowest valid entry.
  t.invalid_seconds = 10.0 * (largest_seconds > 0 ? largest_seconds : 1.0);
  for (int k = 0; k < K; ++k)
    for (int m = 0; m < M; ++m) {
      if (t.Valid(k, m)) continue;
      for (int c = 0; c < C; ++c)
        t.layer[(static_cast<size_t>(c) * K + k) * M + m].microbatch_seconds = t.invalid_seconds;
      for (int i = 0; i < 4; ++i)
        t.overhead[(static_cast<size_t>(k) * M + m) * 4 + i].microbatch_seconds =
            t.invalid_seconds;
      for (int vi = 1; vi < V; ++vi)
        for (int i = 0; i < 4; ++i)
          t.interleaved_overhead[((static_cast<size_t>(vi - 1) * K + k) * M + m) * 4 + i]
              .microbatch_seconds = t.invalid_seconds;
    }

  for (int b = 0; b < K; ++b) {
    bool dominated = false;
    bool any_valid = false;
    for (int m = 0; m < M; ++m) any_valid = any_valid || t.Valid(b, m);
    if (!any_valid) continue;
    for (int a = 0; a < K && !dominated; ++a) {
      if (a == b || t.configs[a].NumDevices() != t.configs[b].NumDevices() ||
          t.configs[a].node_group != t.configs[b].node_group)
        continue;
      bool strict = false;
      if (Dominates(t, a, b, &strict) && (strict || a < b)) dominated = true;
    }
    if (!dominated) t.undominated_configs.push_back(b);
  }
  return t;
}

}  // namespace stratos
