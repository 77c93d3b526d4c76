#include "baselines/stage_frontier.h"

#include <algorithm>
#include <limits>

#include "costmodel/error.h"

namespace stratos {

namespace {
constexpr double kInf = std::numeric_limits<double>::infinity();
}  // namespace

std::vector<int> StageFrontier::LevelsOfStages(int num_stages) const {
  std::vector<int> levels(num_stages + 1, 0);
  for (int s = 1; s <= num_stages; ++s) {
    const int need = ChunkForwardsInFlight(schedule, num_stages, num_stages - s, m,
                                           virtual_stages);
    const auto it = std::lower_bound(inflight.begin(), inflight.end(), need);
    STRATOS_CHECK(it != inflight.end() && *it == need, "in-flight count {} not in the frontier",
                  need);
    levels[s] = static_cast<int>(it - inflight.begin() + 1);
  }
  return levels;
}

StageFrontier BuildStageFrontier(const CostModel& cost_model, const SearchSpace& space,
                                 int max_stages, int m, const Deadline* deadline,
                                 int previous_group, int next_group) {
  const Problem& problem = cost_model.problem();
  const int L = problem.NumLayers();
  const int N = static_cast<int>(space.mesh_sizes.size());
  const StageTable table(cost_model, space.configs, m, previous_group, next_group);

  const int v = problem.training.virtual_pipeline_stages;
  const Schedule schedule = problem.training.schedule;
  STRATOS_CHECK(v == 1 || max_stages >= 2, "{} virtual stages with at most {} stage", v,
                max_stages);
  StageFrontier frontier;
  frontier.m = m;
  frontier.schedule = schedule;
  frontier.virtual_stages = v;
  frontier.num_layers = L;
  frontier.num_meshes = N;
  // A stage with s stages from it to the end of a plan of p: rank p - s.
  for (int p = v == 1 ? max_stages : 2; p <= max_stages; ++p)
    for (int s = 1; s <= p; ++s)
      frontier.inflight.push_back(ChunkForwardsInFlight(schedule, p, p - s, m, v));
  std::sort(frontier.inflight.begin(), frontier.inflight.end());
  frontier.inflight.erase(std::unique(frontier.inflight.begin(), frontier.inflight.end()),
                          frontier.inflight.end());
  frontier.level_of_stages = frontier.LevelsOfStages(max_stages);
  const int num_levels = static_cast<int>(frontier.inflight.size());

  std::vector<int> mesh_of_config(space.configs.size());
  for (size_t c = 0; c < space.configs.size(); ++c)
    mesh_of_config[c] =
        static_cast<int>(std::lower_bound(space.mesh_sizes.begin(), space.mesh_sizes.end(),
                                          space.configs[c].NumDevices()) -
                         space.mesh_sizes.begin());

  // Lower bounds on the bottleneck stage time and on the longest tail, for x = t and x = e (its
  // additive part, StageTerms::AdditiveTailSeconds, below e with DP buckets): every
  // stage's x is at least the sum of its layers' x (when overheads and layers are >= 0), so
  // sum_s n_s x_s >= sum_l min_c n_c x(l, c) and max_s x_s >= that / num_devices; and
  // max_s x_s >= max_l min_c x(l, c).
  auto max_lower_bound = [&](auto&& x) {
    double volume = 0.0, single = 0.0;
    bool valid = !table.ValidConfigs().empty();
    for (int c : table.ValidConfigs())
      for (int f = 0; f < 2; ++f)
        for (int g = 0; g < 2; ++g)
          if (!(x(table.Overhead(c, f, g)) >= 0)) valid = false;
    for (int l = 0; l < L && valid; ++l) {
      double min_volume = kInf, min_value = kInf;
      for (int c : table.ValidConfigs()) {
        const double v = x(table.Layer(l, c));
        if (!(v >= 0)) valid = false;
        min_volume = std::min(min_volume, v * space.configs[c].NumDevices());
        min_value = std::min(min_value, v);
      }
      volume += min_volume;
      single = std::max(single, min_value);
    }
    // Shrunk by 1e-9 so that rounding never excludes the true candidate.
    return valid ? (1.0 - 1e-9) * std::max(volume / space.num_devices, single) : 0.0;
  };
  frontier.t_lower_bound =
      max_lower_bound([](const StageTerms& terms) { return terms.MicrobatchSeconds(); });
  frontier.e_lower_bound =
      max_lower_bound([](const StageTerms& terms) { return terms.AdditiveTailSeconds(); });

  // Group 0: the empty frontier (cells with j <= i, and cells where nothing fits).
  frontier.cell_group.assign(frontier.NumCells(), 0);
  frontier.group_offsets.assign(2, 0);
  // Cell (i, j, n) is priced exactly like (i - 1, j - 1, n) (the same overhead, then layers of the
  // same cost classes in the same order, so bit-identical terms) when neither is a first stage
  // (i >= 2), neither is a last one (j < L) and class(i + k) == class(i - 1 + k) for k < j - i;
  // it then shares that cell's group. run_end[x] = least y >= x with class(y) != class(y - 1).
  std::vector<int> run_end(L + 1, L);
  for (int x = L - 1; x >= 1; --x)
    run_end[x] = problem.model.layers[x].cost_class != problem.model.layers[x - 1].cost_class
                     ? x
                     : run_end[x + 1];
  std::vector<std::vector<FrontierEntry>> bucket(static_cast<size_t>(L + 1) * N);
  // Configurations whose layers never free memory (every layer's memory terms >= 0).
  std::vector<char> memory_monotone(space.configs.size(), 0);
  for (int c : table.ValidConfigs()) {
    bool monotone = true;
    for (int l = 0; l < L; ++l) {
      const StageTerms& lt = table.Layer(l, c);
      monotone =
          monotone && lt.state_bytes >= 0 && lt.activation_bytes >= 0 && lt.working_bytes >= 0;
    }
    memory_monotone[c] = monotone;
  }
  for (int i = 0; i < L; ++i) {
    if (deadline != nullptr) deadline->Check();
    // Cells (i, j) with j <= shared_end copy row i - 1.
    const int shared_end = i >= 2 ? std::min(L - 1, run_end[i]) : i;
    for (int j = i + 1; j <= shared_end; ++j)
      for (int n = 0; n < N; ++n)
        frontier.cell_group[frontier.Cell(i, j, n)] =
            frontier.cell_group[frontier.Cell(i - 1, j - 1, n)];
    for (auto& b : bucket) b.clear();
    for (int c : table.ValidConfigs()) {
      const int n = mesh_of_config[c];
      const double capacity = cost_model.DeviceMemoryCapacityBytes(space.configs[c].node_group);
      bool skip_to_last = false;
      StageTerms inner = table.Overhead(c, i == 0, false);
      // Only the last stage is new when every other cell of the row is shared.
      for (int j = shared_end >= L - 1 ? L : i + 1; j <= L; ++j) {
        if (j < L && skip_to_last) j = L;
        StageTerms terms;
        if (j < L) {
          inner += table.Layer(j - 1, c);
          if (j <= shared_end) continue;
          terms = inner;
        } else {
          terms = table.Terms(i, L, c);  // a last stage's overhead differs
        }
        if (j - i < v) continue;  // InterleavePlan gives each of the v chunks a layer
        // Memory: Evaluate's rule, capacity - peak >= 0, for each needed in-flight count.
        int level = 0;
        {
          int lo = 0, hi = num_levels;  // fits inflight[0 .. level)
          while (lo < hi) {
            const int mid = (lo + hi) / 2;
            if (!(capacity -
                      terms.PeakMemoryBytes(static_cast<double>(frontier.inflight[mid]) / v) <
                  0))
              lo = mid + 1;
            else
              hi = mid;
          }
          level = lo;
        }
        if (level == 0) {
          // Memory only grows with more layers (for j < L; a last stage has other overheads).
          if (j < L && memory_monotone[c]) skip_to_last = true;
          continue;
        }
        const double t = terms.MicrobatchSeconds();
        bucket[static_cast<size_t>(j) * N + n].push_back(
            {t, t / v + terms.OneTimeSeconds(), terms.ExposedTailSeconds(), level, c});
      }
    }
    for (int j = shared_end + 1; j <= L; ++j) {
      for (int n = 0; n < N; ++n) {
        std::vector<FrontierEntry>& cell = bucket[static_cast<size_t>(j) * N + n];
        if (cell.empty()) continue;  // group 0
        std::sort(cell.begin(), cell.end(), [](const FrontierEntry& x, const FrontierEntry& y) {
          if (x.t != y.t) return x.t < y.t;
          if (x.a != y.a) return x.a < y.a;
          if (x.e != y.e) return x.e < y.e;
          return x.level > y.level;
        });
        // In this order a dominating entry precedes the ones it dominates: a later entry is
        // dropped if a kept one (t no larger) has no larger a and e and at least its level.
        const size_t group_begin = frontier.entries.size();
        for (const FrontierEntry& e : cell) {
          bool dominated = false;
          for (size_t k = group_begin; k < frontier.entries.size() && !dominated; ++k) {
            const FrontierEntry& kept = frontier.entries[k];
            dominated = kept.a <= e.a && kept.e <= e.e && kept.level >= e.level;
          }
          if (!dominated) frontier.entries.push_back(e);
        }
        STRATOS_CHECK(frontier.entries.size() < std::numeric_limits<std::uint32_t>::max(),
                      "{} frontier entries", frontier.entries.size());
        frontier.cell_group[frontier.Cell(i, j, n)] =
            static_cast<std::uint32_t>(frontier.group_offsets.size() - 1);
        frontier.group_offsets.push_back(static_cast<std::uint32_t>(frontier.entries.size()));
      }
    }
  }
  auto distinct_sorted = [&](double FrontierEntry::*field) {
    std::vector<double> values;
    values.reserve(frontier.entries.size());
    for (const FrontierEntry& e : frontier.entries) values.push_back(e.*field);
    std::sort(values.begin(), values.end());
    values.erase(std::unique(values.begin(), values.end()), values.end());
    return values;
  };
  frontier.t_candidates = distinct_sorted(&FrontierEntry::t);
  frontier.e_candidates = distinct_sorted(&FrontierEntry::e);
  return frontier;
}

}  // namespace stratos
