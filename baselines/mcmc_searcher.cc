#include "baselines/mcmc_searcher.h"

#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <limits>
#include <memory>
#include <optional>
#include <random>
#include <string>
#include <vector>

#include "baselines/stage_frontier.h"
#include "costmodel/error.h"
#include "costmodel/evaluate.h"
#include "costmodel/interleaved_cost_model.h"
#include "costmodel/plan.h"

namespace stratos {

void McmcOptions::Validate() const {
  // Named as in specs and --option (experiments/searchers.h).
  if (!(beta > 0) || !std::isfinite(beta))
    ThrowOptionError("mcmc.beta", beta, "must be > 0 and finite");
  if (max_boundary_shift < 0)
    ThrowOptionError("mcmc.max_boundary_shift", max_boundary_shift,
                     "must be >= 0 (0 = num_layers / 8)");
  if (restart_patience < 1)
    ThrowOptionError("mcmc.restart_patience", restart_patience, "must be >= 1");
  if (convergence_patience < 0)
    ThrowOptionError("mcmc.convergence_patience", convergence_patience, "must be >= 0 (0 = never)");
  if (!(memory_penalty >= 0) || !std::isfinite(memory_penalty))
    ThrowOptionError("mcmc.memory_penalty", memory_penalty, "must be >= 0");
  if (max_initial_evaluations < 1)
    ThrowOptionError("mcmc.max_initial_evaluations", max_initial_evaluations, "must be >= 1");
}

namespace {

constexpr double kInf = std::numeric_limits<double>::infinity();
// Consecutive proposals that leave the space before the chain is declared stuck.
constexpr long kMaxConsecutiveRejections = 10000;

struct Stage {
  int first = 0;   // inclusive
  int last = 0;    // exclusive
  int config = 0;  // index into SearchSpace::configs
};

struct State {
  int m_index = 0;  // index into SearchSpace::num_microbatches
  int v_index = 0;  // index into Chain's virtual stage counts (0: a plain pipeline)
  std::vector<Stage> stages;
};

struct Priced {
  double cost = kInf;     // what the chain minimizes (T, penalized when over memory)
  double seconds = kInf;  // T, the Evaluate()d iteration time
  bool fits = false;
  double overflow = 0;    // worst stage's bytes over capacity / capacity (0 when it fits)
};

enum class Mutation {
  kBoundary,
  kMesh,
  kSplitDpTp,
  kZero,
  kRecompute,
  kMicrobatches,
  kSplitStage,
  kMergeStages,
  kGroup
};
constexpr Mutation kMutations[] = {Mutation::kBoundary,    Mutation::kBoundary,
                                   Mutation::kMesh,        Mutation::kSplitDpTp,
                                   Mutation::kZero,        Mutation::kRecompute,
                                   Mutation::kMicrobatches, Mutation::kSplitStage,
                                   Mutation::kMergeStages};
// On a heterogeneous cluster the chain also moves a stage to another node group.
constexpr Mutation kHeterogeneousMutations[] = {
    Mutation::kBoundary,     Mutation::kBoundary,   Mutation::kMesh,        Mutation::kSplitDpTp,
    Mutation::kZero,         Mutation::kRecompute,  Mutation::kMicrobatches, Mutation::kSplitStage,
    Mutation::kMergeStages,  Mutation::kGroup,      Mutation::kGroup};

// Prices states and proposes their neighbours; owns the per-m stage tables and the RNG.
class Chain {
 public:
  // `virtual_stages`: the counts SpaceOptions::virtual_stages offers; the chain searches them
  // where a rank of v chunks prices as its plain stage with v virtual stages (plan.h
  // InterleavesExactly, one node group), and plain pipelines only elsewhere.
  Chain(const CostModel& cost_model, const SearchSpace& space, const McmcOptions& options,
        int max_stages, int seed, const std::vector<int>& virtual_stages)
      : cost_model_(cost_model),
        space_(space),
        options_(options),
        schedule_(cost_model.problem().training.schedule),
        num_layers_(cost_model.problem().NumLayers()),
        max_stages_(max_stages),
        capacity_(cost_model.DeviceMemoryCapacityBytes()),
        rng_(static_cast<std::uint64_t>(seed) * 0x9E3779B97F4A7C15ULL + 0x5EED) {
    max_shift_ = options.max_boundary_shift > 0 ? options.max_boundary_shift
                                                : std::max(1, num_layers_ / 8);
    virtual_stages_ = ExactVirtualStages(cost_model.problem(), virtual_stages);
    for (size_t i = 1; i < virtual_stages_.size(); ++i)
      models_.emplace_back(cost_model.problem(), virtual_stages_[i]);
    tables_.resize(space.num_microbatches.size() * virtual_stages_.size());
  }

  std::mt19937_64& rng() { return rng_; }

  // The stage terms for microbatch option m_index, of a rank with virtual_stages_[v_index]
  // chunks (its plain stage's terms with that many virtual stages).
  const StageTable& Table(int m_index, int v_index = 0) {
    std::unique_ptr<StageTable>& table = tables_[m_index * virtual_stages_.size() + v_index];
    if (!table)
      table = std::make_unique<StageTable>(v_index == 0 ? cost_model_
                                                        : models_[v_index - 1].cost_model(),
                                           space_.configs, space_.num_microbatches[m_index]);
    return *table;
  }

  // Same sums as Evaluate() (StageTable is bit-identical), so `seconds` equals
  // Evaluate(plan).iteration_seconds and `fits` equals Estimate::Fits(). On a heterogeneous
  // cluster, Evaluate() itself (a stage's sends depend on its neighbours' groups).
  Priced Price(const State& state) {
    if (space_.Heterogeneous()) {
      const Estimate estimate = Evaluate(cost_model_, ToPlan(state));
      Priced priced;
      priced.seconds = estimate.iteration_seconds;
      priced.fits = estimate.Fits();
      for (const StageEstimate& stage : estimate.stages)
        if (stage.MemoryHeadroomBytes() < 0)
          priced.overflow = std::max(priced.overflow,
                                     -stage.MemoryHeadroomBytes() / stage.memory_capacity_bytes);
      priced.cost = priced.fits ? priced.seconds
                                : priced.seconds *
                                      (1.0 + options_.memory_penalty * (0.05 + priced.overflow));
      return priced;
    }
    const StageTable& table = Table(state.m_index, state.v_index);
    const int m = space_.num_microbatches[state.m_index];
    const int v = virtual_stages_[state.v_index];
    const int p = static_cast<int>(state.stages.size());
    std::vector<double> t(p), e(p), c(p);
    Priced priced;
    priced.fits = true;
    for (int s = 0; s < p; ++s) {
      const Stage& stage = state.stages[s];
      const StageTerms terms = table.Terms(stage.first, stage.last, stage.config);
      t[s] = terms.MicrobatchSeconds();
      e[s] = terms.ExposedTailSeconds();
      c[s] = terms.OneTimeSeconds();
      const double peak = terms.PeakMemoryBytes(
          static_cast<double>(ChunkForwardsInFlight(schedule_, p, s, m, v)) / v);
      const double headroom = capacity_ - peak;
      if (headroom < 0) {
        priced.fits = false;
        priced.overflow = std::max(priced.overflow, -headroom / capacity_);
      }
    }
    priced.seconds = PipelineObjective(t, e, c, m, v);
    priced.cost = priced.fits ? priced.seconds
                              : priced.seconds *
                                    (1.0 + options_.memory_penalty * (0.05 + priced.overflow));
    return priced;
  }

  Plan ToPlan(const State& state) const {
    Plan plan;
    plan.global_batch_size = cost_model_.problem().training.global_batch_size;
    plan.num_microbatches = space_.num_microbatches[state.m_index];
    plan.schedule = schedule_;
    for (const Stage& stage : state.stages)
      plan.stages.push_back({stage.first, stage.last, space_.configs[stage.config]});
    const int v = virtual_stages_[state.v_index];
    if (v == 1) return plan;
    std::optional<Plan> interleaved = InterleavePlan(plan, v);
    STRATOS_CHECK(interleaved.has_value(),
                  "a chain state of {} stages cannot run {} virtual stages", state.stages.size(),
                  v);
    return *interleaved;
  }

  int Devices(const State& state) const {
    int devices = 0;
    for (const Stage& stage : state.stages) devices += space_.configs[stage.config].NumDevices();
    return devices;
  }

  // A uniform plan: `num_stages` equal stages sharing `config`.
  State Uniform(int m_index, int num_stages, int config) const {
    State state;
    state.m_index = m_index;
    for (auto [first, last] : SplitLayersEvenly(num_layers_, num_stages))
      state.stages.push_back({first, last, config});
    return state;
  }

  // Every valid uniform (m, stages, configuration) within the device budget.
  std::vector<State> AllUniform() {
    std::vector<State> states;
    for (int mi = 0; mi < static_cast<int>(space_.num_microbatches.size()); ++mi)
      for (int p = space_.min_stages; p <= max_stages_; ++p)
        for (int c : Table(mi).ValidConfigs())
          if (p * space_.configs[c].NumDevices() <=
              space_.group_devices[space_.configs[c].node_group])
            states.push_back(Uniform(mi, p, c));
    return states;
  }

  // Applies one random mutation; false if it leaves the space (nothing to evaluate). With
  // virtual stages to search, one proposal in ten changes their count.
  bool Mutate(State& state) {
    if (!space_.Heterogeneous()) {
      if (virtual_stages_.size() > 1 && RandomInt(0, 9) == 0) {
        int target = RandomInt(0, static_cast<int>(virtual_stages_.size()) - 2);
        if (target >= state.v_index) ++target;
        state.v_index = target;
        return Interleavable(state);
      }
      return Apply(kMutations[RandomInt(0, static_cast<int>(std::size(kMutations)) - 1)], state) &&
             Interleavable(state);
    }
    const Mutation kind = kHeterogeneousMutations[RandomInt(
        0, static_cast<int>(std::size(kHeterogeneousMutations)) - 1)];
    return Apply(kind, state) && WithinGroups(state);
  }

 private:
  // Whether the state's ranks can run its virtual stages (InterleavePlan): two ranks at least,
  // each with a layer per chunk.
  bool Interleavable(const State& state) const {
    const int v = virtual_stages_[state.v_index];
    if (v == 1) return true;
    if (state.stages.size() < 2) return false;
    for (const Stage& stage : state.stages)
      if (stage.last - stage.first < v) return false;
    return true;
  }

  bool Apply(Mutation kind, State& state) {
    switch (kind) {
      case Mutation::kBoundary:
        return MoveBoundary(state);
      case Mutation::kMesh:
        return ChangeConfig(state, Mutation::kMesh);
      case Mutation::kSplitDpTp:
        return ChangeConfig(state, Mutation::kSplitDpTp);
      case Mutation::kZero:
        return ChangeConfig(state, Mutation::kZero);
      case Mutation::kRecompute:
        return ChangeConfig(state, Mutation::kRecompute);
      case Mutation::kMicrobatches:
        return ChangeMicrobatches(state);
      case Mutation::kSplitStage:
        return SplitStage(state);
      case Mutation::kMergeStages:
        return MergeStages(state);
      case Mutation::kGroup:
        return ChangeGroup(state);
    }
    return false;
  }

  // Whether the stages keep to each node group's devices and visit the groups in runs.
  bool WithinGroups(const State& state) const {
    std::vector<int> used(space_.group_devices.size(), 0), groups;
    for (const Stage& stage : state.stages) {
      const StageConfig& config = space_.configs[stage.config];
      used[config.node_group] += config.NumDevices();
      groups.push_back(config.node_group);
    }
    for (size_t g = 0; g < used.size(); ++g)
      if (used[g] > space_.group_devices[g]) return false;
    return SearchSpace::GroupsInRuns(groups);
  }

  // Moves one stage to another node group (its closest configuration there): an end stage of the
  // pipeline or of a run, the only ones whose move can keep the groups in runs.
  bool ChangeGroup(State& state) {
    const int groups = static_cast<int>(space_.group_devices.size());
    const int p = static_cast<int>(state.stages.size());
    std::vector<int> ends = {0, p - 1};
    for (int s = 1; s < p; ++s)
      if (space_.configs[state.stages[s].config].node_group !=
          space_.configs[state.stages[s - 1].config].node_group) {
        ends.push_back(s - 1);
        ends.push_back(s);
      }
    const int s = ends[RandomInt(0, static_cast<int>(ends.size()) - 1)];
    const StageConfig current = space_.configs[state.stages[s].config];
    int target = RandomInt(0, groups - 2);
    if (target >= current.node_group) ++target;
    const int chosen = Closest(state.m_index, current,
                               [&](const StageConfig& c) { return c.node_group == target; });
    if (chosen < 0) return false;
    state.stages[s].config = chosen;
    return true;
  }

  int RandomInt(int lo, int hi) { return std::uniform_int_distribution<int>(lo, hi)(rng_); }

  static bool SameMesh(const StageConfig& a, const StageConfig& b) {
    return a.mesh_nodes == b.mesh_nodes && a.mesh_gpus_per_node == b.mesh_gpus_per_node;
  }

  // Attributes (mesh, DP x TP, ZeRO, recompute) in which two configurations differ.
  static int Distance(const StageConfig& a, const StageConfig& b) {
    return (SameMesh(a, b) ? 0 : 1) + (a.tensor_parallel != b.tensor_parallel ? 1 : 0) +
           (a.zero_stage != b.zero_stage ? 1 : 0) + (a.recompute != b.recompute ? 1 : 0) +
           (a.node_group != b.node_group ? 1 : 0);
  }

  // The valid configuration (for m_index) accepted by `accept` that is closest to `reference`,
  // ties broken at random; -1 if none.
  template <typename Accept>
  int Closest(int m_index, const StageConfig& reference, Accept accept) {
    int best = -1, best_distance = 0, ties = 0;
    for (int c : Table(m_index).ValidConfigs()) {
      const StageConfig& config = space_.configs[c];
      if (!accept(config)) continue;
      const int distance = Distance(reference, config);
      if (best < 0 || distance < best_distance) {
        best = c;
        best_distance = distance;
        ties = 1;
      } else if (distance == best_distance && RandomInt(0, ties++) == 0) {
        best = c;
      }
    }
    return best;
  }

  bool MoveBoundary(State& state) {
    const int p = static_cast<int>(state.stages.size());
    if (p < 2) return false;
    const int b = RandomInt(1, p - 1);  // boundary between stages b - 1 and b
    const int shift = RandomInt(1, max_shift_) * (RandomInt(0, 1) == 0 ? -1 : 1);
    const int lo = state.stages[b - 1].first + 1;
    const int hi = state.stages[b].last - 1;
    const int moved = std::clamp(state.stages[b].first + shift, lo, hi);
    if (moved == state.stages[b].first) return false;
    state.stages[b - 1].last = moved;
    state.stages[b].first = moved;
    return true;
  }

  bool ChangeConfig(State& state, Mutation kind) {
    const int s = RandomInt(0, static_cast<int>(state.stages.size()) - 1);
    const StageConfig current = space_.configs[state.stages[s].config];
    int chosen = -1;
    if (kind == Mutation::kMesh) {
      const auto& sizes = space_.mesh_sizes;
      const int here = static_cast<int>(
          std::lower_bound(sizes.begin(), sizes.end(), current.NumDevices()) - sizes.begin());
      int target = here + (RandomInt(0, 1) == 0 ? -1 : 1);
      if (target < 0 || target >= static_cast<int>(sizes.size())) target = 2 * here - target;
      if (target < 0 || target >= static_cast<int>(sizes.size())) return false;
      const int devices = sizes[target];
      chosen = Closest(state.m_index, current,
                       [&](const StageConfig& c) { return c.NumDevices() == devices; });
    } else if (kind == Mutation::kSplitDpTp) {
      chosen = Closest(state.m_index, current, [&](const StageConfig& c) {
        return SameMesh(c, current) && c.tensor_parallel != current.tensor_parallel;
      });
    } else if (kind == Mutation::kZero) {
      chosen = Closest(state.m_index, current, [&](const StageConfig& c) {
        return SameMesh(c, current) && c.tensor_parallel == current.tensor_parallel &&
               c.zero_stage != current.zero_stage;
      });
    } else {
      chosen = Closest(state.m_index, current, [&](const StageConfig& c) {
        return SameMesh(c, current) && c.tensor_parallel == current.tensor_parallel &&
               c.zero_stage == current.zero_stage && c.recompute != current.recompute;
      });
    }
    if (chosen < 0) return false;
    const int devices =
        Devices(state) - current.NumDevices() + space_.configs[chosen].NumDevices();
    if (devices > space_.num_devices) return false;
    state.stages[s].config = chosen;
    return true;
  }

  bool ChangeMicrobatches(State& state) {
    const int count = static_cast<int>(space_.num_microbatches.size());
    if (count < 2) return false;
    int target;
    if (RandomInt(0, 4) > 0) {  // mostly a neighbour, sometimes a jump
      target = state.m_index + (RandomInt(0, 1) == 0 ? -1 : 1);
      if (target < 0 || target >= count) target = 2 * state.m_index - target;
    } else {
      target = RandomInt(0, count - 2);
      if (target >= state.m_index) ++target;
    }
    const StageTable& table = Table(target);
    for (Stage& stage : state.stages) {
      if (table.Valid(stage.config)) continue;
      const StageConfig current = space_.configs[stage.config];
      const int replacement = Closest(
          target, current, [&](const StageConfig& c) { return SameMesh(c, current); });
      if (replacement < 0) return false;
      stage.config = replacement;
    }
    state.m_index = target;
    return true;
  }

  bool SplitStage(State& state) {
    const int p = static_cast<int>(state.stages.size());
    if (p + 1 > max_stages_) return false;
    std::vector<int> splittable;
    for (int s = 0; s < p; ++s)
      if (state.stages[s].last - state.stages[s].first >= 2) splittable.push_back(s);
    if (splittable.empty()) return false;
    const int s = splittable[RandomInt(0, static_cast<int>(splittable.size()) - 1)];
    const Stage old = state.stages[s];
    const int cut = RandomInt(old.first + 1, old.last - 1);
    const StageConfig& current = space_.configs[old.config];
    int config = old.config;
    if (Devices(state) + current.NumDevices() > space_.num_devices) {
      // Both halves on half the mesh.
      const int half = current.NumDevices() / 2;
      if (half < 1 || 2 * half != current.NumDevices()) return false;
      config = Closest(state.m_index, current,
                       [&](const StageConfig& c) { return c.NumDevices() == half; });
      if (config < 0) return false;
    }
    state.stages[s] = {old.first, cut, config};
    state.stages.insert(state.stages.begin() + s + 1, Stage{cut, old.last, config});
    return true;
  }

  bool MergeStages(State& state) {
    const int p = static_cast<int>(state.stages.size());
    if (p < 2 || p - 1 < space_.min_stages) return false;
    const int b = RandomInt(0, p - 2);
    const Stage left = state.stages[b];
    const Stage right = state.stages[b + 1];
    std::vector<int> options = {left.config, right.config};
    const StageConfig& reference = space_.configs[left.config];
    const int combined = reference.NumDevices() + space_.configs[right.config].NumDevices();
    const int joined = Closest(state.m_index, reference,
                               [&](const StageConfig& c) { return c.NumDevices() == combined; });
    if (joined >= 0) options.push_back(joined);
    const int config = options[RandomInt(0, static_cast<int>(options.size()) - 1)];
    state.stages[b] = {left.first, right.last, config};
    state.stages.erase(state.stages.begin() + b + 1);
    return true;
  }

  const CostModel& cost_model_;
  const SearchSpace& space_;
  const McmcOptions& options_;
  const Schedule schedule_;
  const int num_layers_;
  const int max_stages_;
  const double capacity_;
  int max_shift_ = 1;
  std::mt19937_64 rng_;
  std::vector<int> virtual_stages_{1};  // the counts searched, ascending
  std::vector<InterleavedCostModel> models_;  // (virtual_stages_ - 1): each count above 1
  // Per (microbatch count, virtual stage count), built lazily.
  std::vector<std::unique_ptr<StageTable>> tables_;
};

}  // namespace

SearchResult McmcSearcher::Search(const Problem& problem, const SearchOptions& options) {
  options.Validate();
  mcmc_options_.Validate();
  SearchRun run(Name(), options);
  const SearchSpace space = SearchSpace::Build(problem, options.space);
  const CostModel cost_model(problem);
  const int L = problem.NumLayers();
  const int max_stages = std::min(space.max_stages, L);
  const McmcOptions& mo = mcmc_options_;

  SearchResult& result = run.Result();
  SearchSummary& summary = run.Summary();

  Chain chain(cost_model, space, mo, max_stages, options.seed, options.space.virtual_stages);
  std::mt19937_64& rng = chain.rng();
  std::uniform_real_distribution<double> unit(0.0, 1.0);

  double best = kInf;
  State best_state;
  double least_overflow = kInf;
  State least_overflow_state;
  long since_improvement = 0;  // proposals since the best improved
  long accepted = 0;
  long restarts = 0;

  auto budget_left = [&] { return !run.OutOfEvaluations(summary.evaluations); };
  auto time_left = [&] { return !run.OutOfTime(); };
  // Prices a state, records the best feasible plan and the least memory-hungry one.
  auto price = [&](const State& state) {
    const Priced priced = chain.Price(state);
    ++summary.evaluations;
    if (priced.fits && priced.seconds < best) {
      best = priced.seconds;
      best_state = state;
      since_improvement = 0;
      run.NoteImprovement(best);
    } else if (!priced.fits && priced.overflow < least_overflow) {
      least_overflow = priced.overflow;
      least_overflow_state = state;
    }
    return priced;
  };

  // First state: the best uniform plan (all of them, or a random sample).
  std::vector<State> uniform = chain.AllUniform();
  bool stopped_by_time = false;
  State current;
  Priced current_priced;
  if (!uniform.empty()) {
    const long scan = std::min<long>(static_cast<long>(uniform.size()), mo.max_initial_evaluations);
    std::uniform_int_distribution<size_t> any(0, uniform.size() - 1);
    const bool sample = scan < static_cast<long>(uniform.size());
    for (long k = 0; k < scan; ++k) {
      if (!budget_left()) break;
      if (!time_left()) {
        stopped_by_time = true;
        break;
      }
      const State& state = sample ? uniform[any(rng)] : uniform[k];
      const Priced priced = price(state);
      if (priced.cost < current_priced.cost) {
        current = state;
        current_priced = priced;
      }
    }
  }

  // The chain.
  enum class Stop { kNone, kEvaluations, kTime, kConverged, kStuck };
  Stop stop = Stop::kNone;
  if (stopped_by_time) stop = Stop::kTime;
  if (std::isfinite(current_priced.cost)) {
    double chain_best = current_priced.cost;
    long since_chain_improvement = 0;
    long consecutive_rejections = 0;
    while (stop == Stop::kNone) {
      if (!budget_left()) {
        stop = Stop::kEvaluations;
        break;
      }
      if (!time_left()) {
        stop = Stop::kTime;
        break;
      }
      if (mo.convergence_patience > 0 && since_improvement >= mo.convergence_patience) {
        stop = Stop::kConverged;
        break;
      }
      if (since_chain_improvement >= mo.restart_patience) {
        // Alternate: from the best plan, then from a random uniform plan.
        ++restarts;
        if ((restarts % 2 == 1 && std::isfinite(best)) || uniform.empty()) {
          current = best_state;
        } else {
          current = uniform[std::uniform_int_distribution<size_t>(0, uniform.size() - 1)(rng)];
        }
        current_priced = price(current);
        chain_best = current_priced.cost;
        since_chain_improvement = 0;
        continue;
      }
      ++summary.iterations;
      ++since_improvement;
      ++since_chain_improvement;
      State proposal = current;
      if (!chain.Mutate(proposal)) {
        if (++consecutive_rejections >= kMaxConsecutiveRejections) stop = Stop::kStuck;
        continue;
      }
      consecutive_rejections = 0;
      const Priced priced = price(proposal);
      const double relative =
          (priced.cost - current_priced.cost) / std::max(current_priced.cost, 1e-300);
      if (relative <= 0 || unit(rng) < std::exp(-mo.beta * relative)) {
        current = std::move(proposal);
        current_priced = priced;
        ++accepted;
        if (current_priced.cost < chain_best) {
          chain_best = current_priced.cost;
          since_chain_improvement = 0;
        }
      }
    }
  }

  const std::string stop_text =
      stop == Stop::kEvaluations
          ? fmt::format("stopped by the evaluation limit ({})", options.max_evaluations)
      : stop == Stop::kTime ? fmt::format("stopped by the time limit ({:.6g} s)",
                                          options.time_limit_seconds)
      : stop == Stop::kConverged
          ? fmt::format("converged: no improvement in {} proposals", mo.convergence_patience)
      : stop == Stop::kStuck
          ? fmt::format("converged: {} consecutive proposals left the space",
                        kMaxConsecutiveRejections)
          : std::string("no valid starting plan");
  const std::string work = fmt::format(
      "{} evaluations, {} proposals ({:.1f} % accepted), {} restarts", summary.evaluations,
      summary.iterations,
      summary.iterations > 0 ? 100.0 * accepted / summary.iterations : 0.0, restarts);

  if (std::isfinite(best)) {
    result.plan = chain.ToPlan(best_state);
    const Estimate estimate = Evaluate(cost_model, *result.plan);
    STRATOS_CHECK(estimate.Fits() && std::abs(estimate.iteration_seconds - best) <=
                                         1e-12 * std::abs(best),
                  "MCMC priced {} at {:.12g} s, Evaluate() says {:.12g} s", result.plan->Summary(),
                  best, estimate.iteration_seconds);
    summary.best_iteration_seconds = estimate.iteration_seconds;
    summary.termination = stop == Stop::kEvaluations ? TerminationType::kEvaluationLimit
                          : stop == Stop::kTime      ? TerminationType::kTimeLimit
                                                     : TerminationType::kConverged;
    summary.message = fmt::format("{}; best {:.9g} s; {}; {}", stop_text, best, work,
                                  result.plan->Summary());
  } else {
    summary.termination = TerminationType::kInfeasible;
    if (std::isfinite(least_overflow)) {
      const Plan plan = chain.ToPlan(least_overflow_state);
      summary.message = fmt::format(
          "no feasible plan found ({}; {}): the least memory-hungry plan seen, {}, has {}",
          stop_text, work, plan.Summary(), Evaluate(cost_model, plan).MemoryViolation());
    } else if (uniform.empty()) {
      summary.message = fmt::format(
          "no feasible plan: no configuration is valid for any microbatch count with {} to {} "
          "stages on {} devices",
          space.min_stages, max_stages, space.num_devices);
    } else {
      summary.message = fmt::format("no feasible plan found ({}; {}): no plan was priced",
                                    stop_text, work);
    }
  }
  SearchResult finished = run.Finish();
  if (options.progress) std::fprintf(stderr, "[mcmc %8.2fs] %s\n", summary.wall_seconds,
                                     summary.message.c_str());
  return finished;
}

}  // namespace stratos
