#include "search/relax_searcher.h"

#include <ATen/CPUGeneratorImpl.h>
#include <fmt/format.h>
#include <torch/torch.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <functional>
#include <limits>
#include <map>
#include <memory>
#include <numeric>
#include <set>
#include <tuple>
#include <random>

#include "costmodel/error.h"
#include "costmodel/evaluate.h"
#include "relax/polish.h"
#include "relax/smoothed_dp.h"
#include "relax/surrogate.h"
#include "relax/tables.h"

namespace stratos {

void RelaxOptions::Validate() const {
  // Named as in specs and --option (experiments/searchers.h).
  const auto fail = [](const char* field, const auto& value, const std::string& rule) {
    ThrowOptionError(std::string("relax.") + field, value, rule);
  };
  if (restarts < 1) fail("restarts", restarts, "must be >= 1");
  if (price_starts < 1) fail("price_starts", price_starts, "must be >= 1");
  if (late_decodes < 0) fail("late_decodes", late_decodes, "must be >= 0");
  if (decode_orders < 1) fail("decode_orders", decode_orders, "must be >= 1");
  if (level_search_options < 0) fail("level_search_options", level_search_options, "must be >= 0");
  if (refine_options < 1) fail("refine_options", refine_options, "must be >= 1");
  if (level_search_max_probes < 1)
    fail("level_search_max_probes", level_search_max_probes, "must be >= 1");
  if (coarse_layers != 0 && coarse_layers < 2)
    fail("coarse_layers", coarse_layers, "must be 0 (never) or >= 2");
  if (extend_max_decodes < 1) fail("extend_max_decodes", extend_max_decodes, "must be >= 1");
  if (heterogeneous_coarse_layers != 0 && heterogeneous_coarse_layers < 2)
    fail("heterogeneous_coarse_layers", heterogeneous_coarse_layers,
         "must be 0 (never) or >= 2");
  if (!(device_decode_max_work >= 0))
    fail("device_decode_max_work", device_decode_max_work, "must be >= 0");
  if (iterations < 1) fail("iterations", iterations, "must be >= 1");
  if (!(learning_rate > 0)) fail("learning_rate", learning_rate, "must be > 0");
  if (!(initial_temperature > 0)) fail("initial_temperature", initial_temperature, "must be > 0");
  if (!(final_temperature > 0) || final_temperature > initial_temperature)
    fail("final_temperature", final_temperature,
         fmt::format("must be > 0 and <= relax.initial_temperature = {}", initial_temperature));
  if (!(initial_smoothmax_tau >= 0))
    fail("initial_smoothmax_tau", initial_smoothmax_tau, "must be >= 0");
  if (!(final_smoothmax_tau >= 0) || final_smoothmax_tau > initial_smoothmax_tau)
    fail(
        "final_smoothmax_tau", final_smoothmax_tau,
        fmt::format("must be >= 0 and <= relax.initial_smoothmax_tau = {}", initial_smoothmax_tau));
  if (!(memory_penalty_weight >= 0))
    fail("memory_penalty_weight", memory_penalty_weight, "must be >= 0");
  if (!(device_penalty_weight >= 0))
    fail("device_penalty_weight", device_penalty_weight, "must be >= 0");
  if (!(stage_count_penalty_weight >= 0))
    fail("stage_count_penalty_weight", stage_count_penalty_weight, "must be >= 0");
  if (discretize_every < 0)
    fail("discretize_every", discretize_every, "must be >= 0 (0 = only at the end)");
  if (max_polish_starts < 1) fail("max_polish_starts", max_polish_starts, "must be >= 1");
  if (heterogeneous_max_polish_starts < 1)
    fail("heterogeneous_max_polish_starts", heterogeneous_max_polish_starts, "must be >= 1");
  if (polish_kicks < 0) fail("polish_kicks", polish_kicks, "must be >= 0");
  if (!(initial_gibbs_temperature > 0))
    fail("initial_gibbs_temperature", initial_gibbs_temperature, "must be > 0");
  if (!(final_gibbs_temperature > 0) || final_gibbs_temperature > initial_gibbs_temperature)
    fail("final_gibbs_temperature", final_gibbs_temperature,
         fmt::format("must be > 0 and <= relax.initial_gibbs_temperature = {}",
                     initial_gibbs_temperature));
  if (!(prune_microbatch_ratio == 0 || prune_microbatch_ratio >= 1))
    fail("prune_microbatch_ratio", prune_microbatch_ratio, "must be 0 (never) or >= 1");
  if (!(min_config_probability >= 0 && min_config_probability < 1))
    fail("min_config_probability", min_config_probability, "must be >= 0 and < 1");
}

const char* RelaxPolishName(RelaxOptions::Polish polish) {
  switch (polish) {
    case RelaxOptions::Polish::kNone:
      return "none";
    case RelaxOptions::Polish::kDescent:
      return "descent";
    case RelaxOptions::Polish::kIterated:
      return "iterated";
  }
  return "unknown";
}

const char* RelaxRelaxationName(RelaxOptions::Relaxation relaxation) {
  return relaxation == RelaxOptions::Relaxation::kSmoothedDp ? "smoothed-dp" : "cuts";
}

RelaxOptions::Relaxation ParseRelaxRelaxation(const std::string& text, const std::string& where) {
  for (RelaxOptions::Relaxation r :
       {RelaxOptions::Relaxation::kSmoothedDp, RelaxOptions::Relaxation::kCuts})
    if (text == RelaxRelaxationName(r)) return r;
  throw InputError(fmt::format("{} = \"{}\": must be smoothed-dp or cuts", where, text));
}

RelaxOptions::Polish ParseRelaxPolish(const std::string& text, const std::string& where) {
  for (RelaxOptions::Polish p : {RelaxOptions::Polish::kNone, RelaxOptions::Polish::kDescent,
                                 RelaxOptions::Polish::kIterated})
    if (text == RelaxPolishName(p)) return p;
  throw InputError(fmt::format("{} = \"{}\": must be none, descent or iterated", where, text));
}

namespace {

double Geometric(double from, double to, double fraction) {
  if (from <= 0 || to <= 0) return from + (to - from) * fraction;
  return from * std::pow(to / from, fraction);
}

torch::Tensor FromHost(std::vector<double>& data, std::vector<int64_t> shape, torch::Dtype dtype) {
  return torch::from_blob(data.data(), shape, torch::kFloat64).to(dtype, false, true);
}

// Discrete plans of every restart: layer l to argmax_s P[l, s] (kept nondecreasing), the
// argmax config of each used stage, the argmax microbatch option.
std::vector<DiscretePlan> Discretize(const SurrogateTensors& tensors,
                                     const SurrogateProbabilities& probabilities) {
  torch::NoGradGuard no_grad;
  torch::Tensor p = StageLayerProbabilities(probabilities.cut, tensors.max_stages).contiguous();
  torch::Tensor stage_of = p.argmax(2).contiguous();                         // (R, L)
  torch::Tensor config_of = probabilities.config.argmax(2).contiguous();     // (R, S)
  torch::Tensor m_of = probabilities.microbatch.argmax(1).contiguous();      // (R)
  const int64_t R = p.size(0), L = p.size(1), S = p.size(2);
  const int64_t* stage = stage_of.data_ptr<int64_t>();
  const int64_t* config = config_of.data_ptr<int64_t>();
  const int64_t* m = m_of.data_ptr<int64_t>();
  std::vector<DiscretePlan> plans;
  for (int64_t r = 0; r < R; ++r) {
    DiscretePlan plan;
    plan.microbatch_option = static_cast<int>(m[r]);
    plan.boundaries.push_back(0);
    int64_t current = stage[r * L];
    plan.configs.push_back(tensors.config_indices[config[r * S + current]]);
    for (int64_t l = 1; l < L; ++l) {
      const int64_t s = stage[r * L + l];
      if (s > current) {
        current = s;
        plan.boundaries.push_back(static_cast<int>(l));
        plan.configs.push_back(tensors.config_indices[config[r * S + s]]);
      }
    }
    plan.boundaries.push_back(static_cast<int>(L));
    plans.push_back(std::move(plan));
  }
  return plans;
}

// Everything a gradient phase reads and what it reports back.
struct GradientPhase {
  const Problem& problem;
  const SearchOptions& options;
  const RelaxOptions& ro;
  const RelaxTables& tables;
  const SearchSpace& space;
  SearchClock::time_point start;  // of the search
  SearchClock::time_point deadline;
  SearchSummary* summary;
  std::function<void(double)> note;
  PlanPolisher* polisher;  // exact table cost of decoded plans
  long surrogate_evaluations = 0;
  std::string no_start_reason;  // why the phase produced no start, if it knows
  bool time_limited = false;
  bool evaluation_limited = false;
  // Smoothed DP, heterogeneous: each group order's least value V^0 over the annealing's DPs at
  // their final levels (the group extension tries the orders in this order).
  std::map<std::vector<int>, double> order_values;
  long level_probes = 0;          // level-search probes decoded (smoothed DP)
  bool level_search_cut = false;  // a pass stopped at level_search_max_probes
  bool OutOfEvaluations() const {
    return options.max_evaluations > 0 && surrogate_evaluations >= options.max_evaluations;
  }
};

// The cut relaxation (relax.relaxation = "cuts", surrogate.h): Adam on the cut, config and
// microbatch logits of R restarts; the restarts' argmax plans (every discretize_every steps and
// at the end) are the polish's starts.
std::vector<DiscretePlan> CutRelaxationStarts(GradientPhase* ph) {
  const RelaxOptions& ro = ph->ro;
  const RelaxTables& tables = ph->tables;
  // --- 1. Surrogate tensors and initial logits. ---
  std::vector<int> surrogate_configs;
  if (ro.prune_dominated_configs) surrogate_configs = tables.undominated_configs;
  if (surrogate_configs.empty())
    for (int k = 0; k < tables.num_configs; ++k) surrogate_configs.push_back(k);
  const torch::Dtype dtype = ro.double_precision ? torch::kFloat64 : torch::kFloat32;
  const SurrogateTensors tensors =
      MakeSurrogateTensors(tables, surrogate_configs, torch::kCPU, dtype);
  const int R = ro.restarts, L = tables.num_layers, S = tables.max_stages;
  const int K = static_cast<int>(surrogate_configs.size()), M = tables.num_microbatch_options;
  std::mt19937_64 rng(static_cast<std::uint64_t>(ph->options.seed) * 0x9E3779B97F4A7C15ULL + 1);
  std::normal_distribution<double> noise(0.0, 1.0);
  std::vector<double> cut_init(static_cast<size_t>(R) * std::max(0, L - 1));
  std::vector<double> config_init(static_cast<size_t>(R) * S * K);
  std::vector<double> microbatch_init(static_cast<size_t>(R) * M);
  for (int r = 0; r < R; ++r) {
    const double fraction = R > 1 ? static_cast<double>(r) / (R - 1) : 0.5;
    const int stages = std::clamp(
        static_cast<int>(std::lround(Geometric(tables.min_stages, S, fraction))),
        tables.min_stages, S);
    std::vector<char> is_cut(std::max(0, L - 1), 0);
    for (int s = 1; s < stages; ++s) is_cut[static_cast<size_t>(s) * L / stages - 1] = 1;
    for (int j = 0; j + 1 < L; ++j)
      cut_init[static_cast<size_t>(r) * (L - 1) + j] = (is_cut[j] ? 3.0 : -3.0) + 0.5 * noise(rng);
    // Favour the mesh that shares the devices evenly among the initial stages.
    int even_mesh = 0;
    for (int k : surrogate_configs) {
      const int n = tables.configs[k].NumDevices();
      if (n * stages <= tables.num_devices) even_mesh = std::max(even_mesh, n);
    }
    for (int s = 0; s < S; ++s)
      for (int i = 0; i < K; ++i)
        config_init[(static_cast<size_t>(r) * S + s) * K + i] =
            (tables.configs[surrogate_configs[i]].NumDevices() == even_mesh ? 2.0 : 0.0) +
            0.5 * noise(rng);
    for (int m = 0; m < M; ++m) microbatch_init[static_cast<size_t>(r) * M + m] = 0.5 * noise(rng);
  }
  SurrogateLogits logits{FromHost(cut_init, {R, std::max(0, L - 1)}, dtype),
                         FromHost(config_init, {R, S, K}, dtype),
                         FromHost(microbatch_init, {R, M}, dtype)};
  std::vector<torch::Tensor> parameters{logits.config, logits.microbatch};
  if (L > 1) parameters.push_back(logits.cut);
  for (torch::Tensor& p : parameters) p.requires_grad_(true);
  torch::optim::Adam adam(parameters, torch::optim::AdamOptions(ro.learning_rate));
  at::Generator generator = at::detail::createCPUGenerator(static_cast<uint64_t>(ph->options.seed));

  SurrogateSettings settings;
  settings.memory_penalty_weight = ro.memory_penalty_weight;
  settings.device_penalty_weight = ro.device_penalty_weight;
  settings.stage_count_penalty_weight = ro.stage_count_penalty_weight;
  settings.min_config_probability = ro.min_config_probability;
  double tau_scale = 0;
  {
    torch::NoGradGuard no_grad;
    SurrogateResult initial = EvaluateSurrogate(
        tensors, SurrogateProbabilitiesFromLogits(logits, ro.initial_temperature, false, false),
        settings);
    ++ph->surrogate_evaluations;
    const double scale = initial.iteration_seconds.min().item<double>();
    settings.penalty_scale_seconds = scale > 0 && std::isfinite(scale) ? scale : 1.0;
    // Typical stage time: the expected bottleneck stage, over restarts and microbatch options.
    tau_scale = std::get<0>(initial.stage_seconds.max(1)).mean().item<double>();
    if (!(tau_scale > 0) || !std::isfinite(tau_scale)) tau_scale = settings.penalty_scale_seconds;
  }

  // --- 2. Adam on the logits, annealed. ---
  std::vector<DiscretePlan> starts;
  auto collect = [&](double temperature) {
    torch::NoGradGuard no_grad;
    for (DiscretePlan& plan : Discretize(
             tensors, SurrogateProbabilitiesFromLogits(logits, temperature, false, false)))
      starts.push_back(std::move(plan));
  };
  double temperature = ro.initial_temperature;
  for (int it = 0; it < ro.iterations; ++it) {
    if (SearchClock::now() >= ph->deadline) {
      ph->time_limited = true;
      break;
    }
    if (ph->OutOfEvaluations()) {
      ph->evaluation_limited = true;
      break;
    }
    const double fraction = ro.iterations > 1 ? static_cast<double>(it) / (ro.iterations - 1) : 1.0;
    temperature = Geometric(ro.initial_temperature, ro.final_temperature, fraction);
    settings.smoothmax_tau_seconds =
        tau_scale * Geometric(ro.initial_smoothmax_tau, ro.final_smoothmax_tau, fraction);
    SurrogateProbabilities probabilities = SurrogateProbabilitiesFromLogits(
        logits, temperature, ro.gumbel_noise, ro.straight_through, &generator);
    SurrogateResult value = EvaluateSurrogate(tensors, probabilities, settings);
    torch::Tensor loss = value.objective.sum() / settings.penalty_scale_seconds;
    adam.zero_grad();
    loss.backward();
    adam.step();
    ++ph->surrogate_evaluations;
    ++ph->summary->iterations;
    if (ro.discretize_every > 0 && (it + 1) % ro.discretize_every == 0 && it + 1 < ro.iterations)
      collect(temperature);
  }
  collect(temperature);

  return starts;
}

// The smoothed DP (relax.relaxation = "smoothed-dp", relax/smoothed_dp.h): for every microbatch
// option m, Adam descends V^tau in log theta and log phi and ascends it in log lambda (the dual
// of the device budget), with tau annealed geometrically relative to the iteration-time scale.
// Every evaluation's decoded mode is a start; the last one is decoded at tau = 0 (exact).
std::vector<DiscretePlan> SmoothedDpStarts(GradientPhase* ph) {
  const RelaxOptions& ro = ph->ro;
  const RelaxTables& tables = ph->tables;
  std::vector<int> configs;
  if (ro.prune_dominated_configs) configs = tables.undominated_configs;
  if (configs.empty())
    for (int k = 0; k < tables.num_configs; ++k) configs.push_back(k);
  // The exact decodes' units: a microbatch option and, on a heterogeneous cluster, an order of
  // node groups (the device decodes follow one order; the annealing spans them all).
  struct Unit {
    std::shared_ptr<SmoothedStageDp> dp;  // shared by the units of one microbatch option
    std::vector<int> order;               // empty on a homogeneous cluster
  };
  std::vector<Unit> units;
  std::map<std::pair<const SmoothedStageDp*, std::vector<int>>, int> unit_index;
  auto unit_of = [&](const std::shared_ptr<SmoothedStageDp>& dp, const std::vector<int>& order) {
    const auto [it, inserted] =
        unit_index.try_emplace({dp.get(), order}, static_cast<int>(units.size()));
    if (inserted) units.push_back({dp, order});
    return it->second;
  };
  // On a heterogeneous cluster, the orders the annealing spans: every order of every subset of
  // the groups with a budget.
  const bool heterogeneous = ph->space.Heterogeneous();
  const std::vector<std::vector<int>> orders = ph->space.GroupOrders();
  auto order_of = [&](const DiscretePlan& plan) {
    return heterogeneous ? PlanRunOrder(tables, plan) : std::vector<int>{};
  };
  // Adam's variables: log theta, log phi, and the log price of each group (index 2 + g).
  constexpr int kVariables = 2 + kMaxRelaxGroups;
  struct Track {
    std::shared_ptr<SmoothedStageDp> dp;  // the tracks of one DP are consecutive
    double log_x[kVariables] = {};
    double moment1[kVariables] = {}, moment2[kVariables] = {};
    double scale_seconds = 1;     // iteration-time scale: M_m theta_0
    bool alive = true;
    double best_seconds = std::numeric_limits<double>::infinity();  // best decoded plan that fits
    DiscretePlan best_plan;
    // Heterogeneous: the best decoded plan that fits of each group order decoded.
    std::map<std::vector<int>, std::pair<double, DiscretePlan>> best_by_order;
    std::vector<DiscretePlan> late_plans;  // distinct decoded plans of the last quarter
  };
  // Long models: every DP cuts only at the coarse positions (each repeated block's start, else
  // every stride-th boundary); the last pass decodes near the best coarse plans at every layer
  // boundary. Levels and prices are in seconds, so they carry over between resolutions.
  const std::vector<int> coarse_cuts =
      CoarseCutPositions(tables, heterogeneous ? ro.heterogeneous_coarse_layers : ro.coarse_layers,
                         ro.coarse_room_for_max_stages ? ph->space.max_stages : 0);
  std::vector<Track> tracks;
  for (int m = 0; m < tables.num_microbatch_options; ++m) {
    Track track;
    track.dp = std::make_shared<SmoothedStageDp>(tables, m, configs, coarse_cuts);
    if (track.dp->num_configs() == 0) continue;
    const double theta = track.dp->BalancedStageSeconds();
    if (!(theta > 0) || !std::isfinite(theta)) continue;
    const double mc = track.dp->num_microbatches();
    track.scale_seconds = mc * theta;
    track.log_x[0] = std::log(theta);
    track.log_x[1] = std::log(theta);
    // The marginal value of a device at a balanced plan: d(iteration)/dD ~ iteration / D.
    for (int g = 0; g < kMaxRelaxGroups; ++g)
      track.log_x[2 + g] = std::log(track.scale_seconds / tables.num_devices);
    // Further tracks start the dual ascent from prices 10x, 100x, ... lower (the balanced
    // estimate can sit far above the price at which plans use the budget).
    for (int k = 1; k < ro.price_starts; ++k) {
      Track other = track;
      for (int g = 0; g < kMaxRelaxGroups; ++g) other.log_x[2 + g] -= k * std::log(10.0);
      tracks.push_back(std::move(other));
    }
    tracks.push_back(std::move(track));
  }
  std::vector<DiscretePlan> starts;
  auto point_of = [](const Track& t) {
    SmoothedDpPoint x{std::exp(t.log_x[0]), std::exp(t.log_x[1]), {}};
    for (int g = 0; g < kMaxRelaxGroups; ++g) x.lambda_seconds[g] = std::exp(t.log_x[2 + g]);
    return x;
  };
  const double beta1 = 0.9, beta2 = 0.999, epsilon = 1e-8;
  for (int it = 0; it < ro.iterations; ++it) {
    const double fraction = ro.iterations > 1 ? static_cast<double>(it) / (ro.iterations - 1) : 1.0;
    const double relative_tau =
        Geometric(ro.initial_gibbs_temperature, ro.final_gibbs_temperature, fraction);
    // The alive tracks of one DP (microbatch option) are evaluated together (one pass over its
    // terms).
    for (size_t first = 0; first < tracks.size();) {
      size_t last = first + 1;
      while (last < tracks.size() && tracks[last].dp == tracks[first].dp) ++last;
      std::vector<Track*> group;
      for (size_t a = first; a < last; ++a)
        if (tracks[a].alive) group.push_back(&tracks[a]);
      first = last;
      if (group.empty()) continue;
      if (SearchClock::now() >= ph->deadline) {
        ph->time_limited = true;
        return starts;
      }
      if (ph->OutOfEvaluations()) {
        ph->evaluation_limited = true;
        return starts;
      }
      if (ph->options.max_evaluations > 0)  // no more evaluations than the budget left
        group.resize(std::min<size_t>(
            group.size(), ph->options.max_evaluations - ph->surrogate_evaluations));
      std::vector<SmoothedDpPoint> points;
      std::vector<double> taus;
      for (const Track* t : group) {
        points.push_back(point_of(*t));
        taus.push_back(relative_tau * t->scale_seconds);
      }
      const std::vector<SmoothedDpValue> values =
          group.front()->dp->EvaluateOrders(points, taus, orders);
      for (size_t g = 0; g < group.size(); ++g) {
        Track& t = *group[g];
        const SmoothedDpPoint& x = points[g];
        const SmoothedDpValue& v = values[g];
        ++ph->surrogate_evaluations;
        if (!std::isfinite(v.value)) {
          t.alive = false;  // nothing fits at this m
          continue;
        }
        if (!v.decoded.configs.empty()) {
          starts.push_back(v.decoded);
          const DiscreteCost cost = ph->polisher->Cost(v.decoded);
          if (cost.Fits() && cost.iteration_seconds < t.best_seconds) {
            t.best_seconds = cost.iteration_seconds;
            t.best_plan = v.decoded;
          }
          if (heterogeneous && cost.Fits()) {
            auto& best = t.best_by_order
                             .try_emplace(order_of(v.decoded),
                                          std::numeric_limits<double>::infinity(), DiscretePlan{})
                             .first->second;
            if (cost.iteration_seconds < best.first) best = {cost.iteration_seconds, v.decoded};
          }
          const int late = ro.late_decodes;
          if (late > 0 && 4 * it >= 3 * ro.iterations &&
              std::find(t.late_plans.begin(), t.late_plans.end(), v.decoded) ==
                  t.late_plans.end()) {
            t.late_plans.push_back(v.decoded);
            if (static_cast<int>(t.late_plans.size()) > late)
              t.late_plans.erase(t.late_plans.begin());
          }
        }
        // Descent in theta and phi, ascent in each group's lambda; gradients in log space,
        // scale-free.
        double grad[kVariables] = {v.d_theta * x.theta_seconds / t.scale_seconds,
                                   v.d_phi * x.phi_seconds / t.scale_seconds};
        for (int g = 0; g < tables.num_groups; ++g)
          grad[2 + g] = -v.d_lambda[g] * x.lambda_seconds[g] / t.scale_seconds;
        for (int c = 0; c < 2 + tables.num_groups; ++c) {
          t.moment1[c] = beta1 * t.moment1[c] + (1 - beta1) * grad[c];
          t.moment2[c] = beta2 * t.moment2[c] + (1 - beta2) * grad[c] * grad[c];
          const double m_hat = t.moment1[c] / (1 - std::pow(beta1, it + 1));
          const double v_hat = t.moment2[c] / (1 - std::pow(beta2, it + 1));
          t.log_x[c] -= ro.learning_rate * m_hat / (std::sqrt(v_hat) + epsilon);
        }
      }
    }
    ++ph->summary->iterations;
    // From a quarter of the steps on, microbatch options whose best decoded plan is more than
    // ro.prune_microbatch_ratio x the best one stop (their DP is most of the cost).
    if (ro.prune_microbatch_ratio > 0 && 4 * (it + 1) >= ro.iterations) {
      double best = std::numeric_limits<double>::infinity();
      for (const Track& t : tracks) best = std::min(best, t.best_seconds);
      if (std::isfinite(best))
        for (Track& t : tracks)
          if (t.alive && std::isfinite(t.best_seconds) &&
              t.best_seconds > ro.prune_microbatch_ratio * best)
            t.alive = false;
    }
  }
  if (starts.empty() && !tracks.empty() &&
      std::none_of(tracks.begin(), tracks.end(), [](const Track& t) { return t.alive; }))
    ph->no_start_reason =
        "no plan fits in memory: at every microbatch count, no stage config fits any layer "
        "range with its in-flight microbatches";
  // Majorize-minimize at tau = 0 with the device budget exact: decode the plan p minimizing
  // f_p(theta, phi, 0) within D devices, move the levels to p's own (max t_s, max e_s), where
  // f_p = iteration(p), and repeat. V^0 never increases (V^0(x') <= f_p(x') = iteration(p) <=
  // f_p(x) = V^0(x)), so it stops at a fixed point in a few steps. On long models the DPs are
  // coarse (coarse_cuts), and a last pass decodes near the best coarse plans at every layer
  // boundary (DecodeNearPlan, within `radius` layers of each cut): the same majorize-minimize,
  // with each decode's window around the plan before it.
  int radius = 0;
  for (size_t a = 1; a < coarse_cuts.size(); ++a)
    radius = std::max(radius, coarse_cuts[a] - coarse_cuts[a - 1]);
  // Levels already decoded, per unit (microbatch option, group order) and window (the
  // boundaries of the plan it is around; none for the decodes over the DP's cut positions): a
  // path that reaches one follows a path already taken (the decode is deterministic), so it
  // stops there.
  std::set<std::tuple<int, double, double, std::vector<int>>> decoded_levels;
  // The best fitting plan that the device decodes found, per unit.
  std::map<int, std::pair<double, DiscretePlan>> best_by_unit;
  // Returns whether the path found a plan that fits and beats best_by_unit's. near: decode near
  // `around` (then near each decoded plan in turn), else over the DP's cut positions.
  // hint: a plan that fits, to bound the decodes while best_by_unit has none for the unit.
  auto device_decodes = [&](int unit, SmoothedDpPoint x, bool near, DiscretePlan around,
                            const DiscretePlan* hint = nullptr) {
    const SmoothedStageDp& dp = *units[unit].dp;
    x.lambda_seconds = {};
    bool improved = false;
    for (int step = 0; step < 16; ++step) {
      if (SearchClock::now() >= ph->deadline) {
        ph->time_limited = true;
        break;
      }
      if (!decoded_levels
               .emplace(unit, x.theta_seconds, x.phi_seconds,
                        near ? around.boundaries : std::vector<int>{})
               .second)
        break;
      // The best plan known for this unit bounds the decode (DecodeWithinDevices' `known`).
      const auto known = best_by_unit.find(unit);
      const DiscretePlan* bound = known != best_by_unit.end() ? &known->second.second : hint;
      DiscretePlan plan = near ? dp.DecodeNearPlan(x, around, radius, ro.device_decode_max_work)
                               : dp.DecodeWithinDevices(x, ro.device_decode_max_work, bound,
                                                        units[unit].order);
      ++ph->surrogate_evaluations;
      if (plan.configs.empty()) break;
      const SmoothedDpPoint y = dp.PlanLevels(plan);
      const DiscreteCost cost = ph->polisher->Cost(plan);
      const auto best = best_by_unit.try_emplace(
          unit, std::numeric_limits<double>::infinity(), DiscretePlan{}).first;
      if (cost.Fits() && cost.iteration_seconds < best->second.first) {
        best->second = {cost.iteration_seconds, plan};
        improved = true;
      }
      starts.push_back(plan);
      if (y.theta_seconds == x.theta_seconds && y.phi_seconds == x.phi_seconds &&
          (!near || plan.boundaries == around.boundaries))
        break;
      x = y;
      around = std::move(plan);
    }
    return improved;
  };
  // The units with a track alive at the end.
  std::set<int> final_units;
  std::map<int, std::pair<double, DiscretePlan>> fallback;
  // The exact mode at the final point (tau = 0).
  for (Track& t : tracks) {
    if (!t.alive) continue;
    if (SearchClock::now() >= ph->deadline) {
      ph->time_limited = true;
      break;
    }
    const SmoothedStageDp& dp = *t.dp;
    const SmoothedDpValue v = t.dp->EvaluateOrders({point_of(t)}, {0.0}, orders).front();
    ++ph->surrogate_evaluations;
    for (size_t o = 0; o < v.order_values.size() && o < orders.size(); ++o) {
      const auto [it, inserted] = ph->order_values.try_emplace(orders[o], v.order_values[o]);
      if (!inserted) it->second = std::min(it->second, v.order_values[o]);
    }
    if (!v.decoded.configs.empty()) starts.push_back(v.decoded);
    // The orders whose device decodes run: on a heterogeneous cluster, those the annealing
    // decoded fitting plans of (by their best plan), then the others by their value at the
    // final levels (at tau = 0, prices included), until relax.decode_orders of them have a
    // fitting plan.
    std::vector<std::tuple<bool, double, std::vector<int>>> chosen;  // (no plan yet, key, order)
    if (!heterogeneous) {
      chosen.emplace_back(false, t.best_seconds, std::vector<int>{});
    } else {
      for (const auto& [order, best] : t.best_by_order)
        chosen.emplace_back(false, best.first, order);
      for (size_t o = 0; o < orders.size(); ++o)
        if (!t.best_by_order.count(orders[o]) && o < v.order_values.size() &&
            std::isfinite(v.order_values[o]))
          chosen.emplace_back(true, v.order_values[o], orders[o]);
      std::sort(chosen.begin(), chosen.end());
    }
    int decoded_orders = 0;
    for (const auto& [unknown, order_best, order] : chosen) {
      if (decoded_orders >= ro.decode_orders) break;
      const int unit = unit_of(t.dp, order);
      final_units.insert(unit);
      const DiscretePlan* hint = nullptr;
      if (!heterogeneous) {
        hint = t.best_plan.configs.empty() ? nullptr : &t.best_plan;
      } else if (t.best_by_order.count(order)) {
        hint = &t.best_by_order.at(order).second;
      }
      if (!ro.device_decode) continue;
      device_decodes(unit, point_of(t), false, {}, hint);
      if (hint != nullptr) device_decodes(unit, dp.PlanLevels(*hint), false, {}, hint);
      for (const DiscretePlan& plan : t.late_plans)
        if (order_of(plan) == order) device_decodes(unit, dp.PlanLevels(plan), false, {}, hint);
      // Where the device decodes found nothing -- over their work budget: on 16,384 GPUs the
      // device dimension has 16,385 units -- the level search and the refinement start from
      // the annealing's best decoded plan.
      if (hint != nullptr) {
        auto& best = fallback.try_emplace(unit, std::numeric_limits<double>::infinity(),
                                          DiscretePlan{}).first->second;
        if (order_best < best.first) best = {order_best, *hint};
      }
      if (hint != nullptr || best_by_unit.count(unit)) ++decoded_orders;
    }
  }
  for (const auto& [unit, best] : fallback)
    if (!best_by_unit.count(unit)) best_by_unit[unit] = best;
  if (!ro.device_decode) return starts;
  // The units (microbatch options, with group orders) by their best decoded plan, the best
  // `count`.
  auto best_units = [&](int count) {
    std::vector<std::pair<double, int>> ranked;
    for (int unit : final_units) {
      const auto it = best_by_unit.find(unit);
      if (it != best_by_unit.end() && std::isfinite(it->second.first))
        ranked.emplace_back(it->second.first, unit);
    }
    std::sort(ranked.begin(), ranked.end());
    if (static_cast<int>(ranked.size()) > count) ranked.resize(static_cast<size_t>(count));
    return ranked;
  };
  // Level search: the majorize-minimize stops at a fixed point of V^0 that is often not its
  // minimum -- a plan's region of levels is about 1% wide in theta (f_p's slope below a stage
  // time is M - 1) and wide in phi (slope 1), and the optimum often trades a few % more
  // bottleneck for a lower tail (and its microbatch count's best plan can be 6% above another
  // count's). From the best plan of each of the best level_search_options microbatch options,
  // probe the levels around its own (theta, phi) -- theta alone, phi alone, and both in
  // opposite directions -- majorize-minimize from each probe, move to the first improvement and
  // probe again, until no probe improves or the pass has decoded level_search_max_probes.
  std::vector<std::pair<double, double>> probes;  // relative steps (theta, phi)
  for (double a : {0.01, 0.02, 0.04, 0.08}) probes.insert(probes.end(), {{-a, 0}, {a, 0}});
  for (double b : {0.05, 0.1, 0.2, 0.4}) probes.insert(probes.end(), {{0, -b}, {0, b}});
  for (double a : {0.01, 0.02, 0.04})
    for (double b : {0.1, 0.2, 0.4}) probes.insert(probes.end(), {{a, -b}, {-a, b}});
  // `options`: the units searched, in order (best first, so that the pass's probe budget goes to
  // the best).
  auto level_search = [&](bool near, const std::vector<std::pair<double, int>>& options) {
    long pass_probes = 0;
    for (const auto& ranked_option : options) {
      const int unit = ranked_option.second;
      const SmoothedStageDp& dp = *units[unit].dp;
      for (bool improved = true; improved;) {
        improved = false;
        const DiscretePlan& best = best_by_unit.at(unit).second;
        const SmoothedDpPoint x0 = dp.PlanLevels(best);
        for (const auto& [a, b] : probes) {
          if (SearchClock::now() >= ph->deadline) break;  // the search's time limit
          if (pass_probes >= ro.level_search_max_probes) {
            ph->level_search_cut = true;
            break;
          }
          ++pass_probes;
          ++ph->level_probes;
          SmoothedDpPoint x = x0;
          x.theta_seconds *= 1 + a;
          x.phi_seconds *= 1 + b;
          if ((improved = device_decodes(unit, x, near, best))) break;
        }
      }
    }
  };
  // The options refined at full resolution on long models: the best refine_options by their
  // plans before the level search. Ranked after it instead, GPT-3 13B at operator granularity
  // on h100=2,a100=2,v100=4 (experiments/specs/hetero-ladder.toml) ended 0.87% above the DP's
  // best, where this ranking (or refining every option, 1.4x the time) reaches it.
  const std::vector<std::pair<double, int>> refined = best_units(ro.refine_options);
  level_search(false, best_units(ro.level_search_options));
  if (coarse_cuts.empty()) return starts;
  // Full resolution near their best coarse plans: majorize-minimize from each one's levels, then
  // the level search.
  for (const auto& ranked_option : refined) {
    const int unit = ranked_option.second;
    const DiscretePlan best = best_by_unit.at(unit).second;
    device_decodes(unit, units[unit].dp->PlanLevels(best), true, best);
  }
  if (ro.level_search_options > 0) level_search(true, refined);
  return starts;
}

// The group extension (RelaxOptions::extend_groups): the plans that fit and beat `best`
// (best_seconds) among the exact decodes at every layer boundary, at best's microbatch option
// and then the others nearest it in log(count), along the orders that add one node group unused
// by `best` to its order and whose value in the annealing (`values`: V^0 at its final levels) is
// below best_seconds, best value first. Along each, majorize-minimizes from best's levels (the
// bottleneck scaled to the option's microbatch) with theta scaled by 0.95, 0.9, 0.85, 0.8 while
// the best plan decoded improves. Best first; stops after `max_decodes` decodes or at
// `deadline`.
std::vector<DiscretePlan> GroupExtensionPlans(const RelaxTables& tables, const SearchSpace& space,
                                              const std::map<std::vector<int>, double>& values,
                                              const DiscretePlan& best, double best_seconds,
                                              PlanPolisher& polisher, double max_work,
                                              int max_decodes, SearchClock::time_point deadline) {
  const std::vector<int> order = PlanRunOrder(tables, best);
  std::vector<std::pair<double, std::vector<int>>> extended;
  for (const std::vector<int>& candidate : space.GroupOrders()) {
    if (candidate.size() != order.size() + 1) continue;
    const auto value = values.find(candidate);
    if (value == values.end() || !(value->second < best_seconds)) continue;
    // `order` is `candidate` less one group.
    for (size_t skip = 0; skip < candidate.size(); ++skip) {
      std::vector<int> rest = candidate;
      rest.erase(rest.begin() + static_cast<long>(skip));
      if (rest == order) {
        extended.emplace_back(value->second, candidate);
        break;
      }
    }
  }
  if (extended.empty()) return {};
  std::sort(extended.begin(), extended.end());
  // The undominated configs (as the annealing's DPs), and best's own (the polish uses any).
  std::vector<int> configs = tables.undominated_configs;
  if (configs.empty()) {
    configs.resize(tables.num_configs);
    std::iota(configs.begin(), configs.end(), 0);
  }
  configs.insert(configs.end(), best.configs.begin(), best.configs.end());
  std::sort(configs.begin(), configs.end());
  configs.erase(std::unique(configs.begin(), configs.end()), configs.end());
  std::vector<std::pair<double, DiscretePlan>> found;
  // best's microbatch option first, then the others by their distance to it in log(count): an
  // added group adds stages, whose bubble more microbatches shrink (GPT-3 13B on
  // h100=2,a100=2,v100=4: best at 32 microbatches, the optimum's added V100 stages at 128).
  std::vector<std::pair<double, int>> options;
  const double best_count = tables.num_microbatches[best.microbatch_option];
  for (int m = 0; m < tables.num_microbatch_options; ++m)
    options.emplace_back(m == best.microbatch_option
                             ? -1
                             : std::abs(std::log(tables.num_microbatches[m] / best_count)),
                         m);
  std::sort(options.begin(), options.end());
  SmoothedDpPoint best_levels;  // set by the first option, best's own
  int decodes = 0;
  const auto more = [&]() { return decodes < max_decodes && SearchClock::now() < deadline; };
  for (const auto& [distance, option] : options) {
    if (!more()) break;
    const SmoothedStageDp dp(tables, option, configs);
    if (option == best.microbatch_option) best_levels = dp.PlanLevels(best);
    // best's levels, the bottleneck scaled to this option's microbatch (a stage's time per
    // microbatch is about proportional to the microbatch size).
    SmoothedDpPoint from = best_levels;
    from.theta_seconds *= best_count / tables.num_microbatches[option];
    // Majorize-minimizes along `target` from `from` with theta scaled; returns the best cost it
    // decoded (infinity: none fits).
    const auto descend = [&](const std::vector<int>& target, double scale) {
      SmoothedDpPoint x = from;
      x.theta_seconds *= scale;
      double least = std::numeric_limits<double>::infinity();
      for (int step = 0; step < 16 && more(); ++step) {
        const DiscretePlan plan = dp.DecodeWithinDevices(x, max_work, nullptr, target);
        ++decodes;
        if (plan.configs.empty()) break;
        const DiscreteCost cost = polisher.Cost(plan);
        if (cost.Fits()) least = std::min(least, cost.iteration_seconds);
        if (cost.Fits() && cost.iteration_seconds < best_seconds &&
            std::none_of(found.begin(), found.end(),
                         [&](const auto& f) { return f.second == plan; }))
          found.emplace_back(cost.iteration_seconds, plan);
        const SmoothedDpPoint y = dp.PlanLevels(plan);
        if (y.theta_seconds == x.theta_seconds && y.phi_seconds == x.phi_seconds) break;
        x = y;
      }
      return least;
    };
    for (const auto& [value, target] : extended) {
      double previous = std::numeric_limits<double>::infinity();
      for (int k = 1; k <= 4 && more(); ++k) {
        const double least = descend(target, 1 - 0.05 * k);
        if (!(least < previous)) break;
        previous = least;
      }
    }
  }
  std::sort(found.begin(), found.end(),
            [](const auto& a, const auto& b) { return a.first < b.first; });
  std::vector<DiscretePlan> plans;
  for (auto& [seconds, plan] : found) plans.push_back(std::move(plan));
  return plans;
}

}  // namespace

SearchResult RelaxSearcher::Search(const Problem& problem, const SearchOptions& options) {
  options.Validate();
  relax_options_.Validate();
  const RelaxOptions& ro = relax_options_;
  SearchRun run("relax", options);
  const SearchClock::time_point start = run.Start(), deadline = run.End();
  auto elapsed = [&]() { return run.Elapsed(); };
  SearchResult& result = run.Result();
  SearchSummary& summary = run.Summary();

  const SearchSpace space = SearchSpace::Build(problem, options.space);
  // Heterogeneous clusters: the smoothed DP over the group orders, not the cut relaxation.
  const bool heterogeneous = space.Heterogeneous();
  if (heterogeneous && (ro.relaxation != RelaxOptions::Relaxation::kSmoothedDp ||
                        space.group_devices.size() > static_cast<size_t>(kMaxRelaxGroups))) {
    return run.Finish(
        TerminationType::kDeclined,
        fmt::format("relax takes heterogeneous clusters of at most {} node groups with "
                    "relax.relaxation = smoothed-dp ({} groups, {}); dp, exhaustive, grid, ilp "
                    "and mcmc take any",
                    kMaxRelaxGroups, space.group_devices.size(),
                    RelaxRelaxationName(ro.relaxation)));
  }
  const CostModel cost_model(problem);
  const RelaxTables tables =
      BuildRelaxTables(cost_model, space, options.space.virtual_stages);
  PlanPolisher polisher(tables);
  bool time_limited = false;
  bool evaluation_limited = false;
  long surrogate_evaluations = 0;

  // Anytime trace over fitting plans (table cost = Evaluate by additivity).
  auto note = [&](double seconds) { run.NoteImprovement(seconds); };

  // --- 1-2. The gradient phase: discrete starts for the polish. ---
  GradientPhase phase{problem, options,  ro,        tables, space, start, deadline,
                      &summary, note,   &polisher, 0,      {},    false, false, {}};
  std::vector<DiscretePlan> starts = ro.relaxation == RelaxOptions::Relaxation::kSmoothedDp
                                         ? SmoothedDpStarts(&phase)
                                         : CutRelaxationStarts(&phase);
  surrogate_evaluations = phase.surrogate_evaluations;
  time_limited = phase.time_limited;
  evaluation_limited = phase.evaluation_limited;
  const double gradient_seconds = elapsed();

  // --- 3. Repair every start, polish the best distinct ones. ---
  struct Candidate {
    DiscretePlan plan;
    DiscreteCost cost;
  };
  std::vector<Candidate> candidates;
  for (DiscretePlan& plan : starts) {
    if (!heterogeneous && !polisher.Repair(&plan)) continue;
    const DiscreteCost cost = polisher.Cost(plan);
    if (!cost.valid) continue;
    bool duplicate = false;
    for (const Candidate& c : candidates) duplicate = duplicate || c.plan == plan;
    if (!duplicate) candidates.push_back({plan, cost});
  }
  std::stable_sort(candidates.begin(), candidates.end(), [](const Candidate& a, const Candidate& b) {
    return a.cost.BetterThan(b.cost);
  });
  for (const Candidate& c : candidates)
    if (c.cost.Fits()) {
      note(c.cost.iteration_seconds);
      break;
    }
  const int polish_starts =
      heterogeneous ? ro.heterogeneous_max_polish_starts : ro.max_polish_starts;
  if (ro.polish != RelaxOptions::Polish::kNone &&
      static_cast<int>(candidates.size()) > polish_starts)
    candidates.resize(polish_starts);
  PolishLimits limits;
  limits.deadline = deadline;
  limits.kicks = ro.polish == RelaxOptions::Polish::kIterated ? ro.polish_kicks : 0;
  if (options.max_evaluations > 0)
    limits.max_evaluations = std::max<long>(1, options.max_evaluations - surrogate_evaluations);
  bool polish_cut_short = false;
  const size_t polished = ro.polish == RelaxOptions::Polish::kNone ? 0 : candidates.size();
  for (size_t i = 0; i < polished; ++i) {
    if (polisher.OutOfBudget(limits)) {
      polish_cut_short = true;
      break;
    }
    limits.seed = static_cast<std::uint64_t>(options.seed) * 1000003ULL + i;
    candidates[i].cost = polisher.Polish(&candidates[i].plan, limits, note);
  }
  if (polisher.OutOfBudget(limits)) polish_cut_short = true;
  if (polish_cut_short) {
    if (SearchClock::now() >= deadline) {
      time_limited = true;
    } else {
      evaluation_limited = true;
    }
  }
  std::stable_sort(candidates.begin(), candidates.end(), [](const Candidate& a, const Candidate& b) {
    return a.cost.BetterThan(b.cost);
  });

  // --- 3b. The group extension (heterogeneous): the unused groups that the coarse cuts hid. ---
  int extension_plans = 0;
  if (heterogeneous && ro.extend_groups &&
      ro.relaxation == RelaxOptions::Relaxation::kSmoothedDp && !candidates.empty() &&
      candidates.front().cost.Fits() && SearchClock::now() < deadline) {
    const std::vector<DiscretePlan> extended = GroupExtensionPlans(
        tables, space, phase.order_values, candidates.front().plan,
        candidates.front().cost.iteration_seconds, polisher, ro.device_decode_max_work,
        ro.extend_max_decodes, deadline);
    extension_plans = static_cast<int>(extended.size());
    if (!extended.empty()) {
      Candidate c{extended.front(), {}};
      limits.seed = static_cast<std::uint64_t>(options.seed) * 1000003ULL + polished;
      c.cost = ro.polish == RelaxOptions::Polish::kNone ? polisher.Cost(c.plan)
                                                         : polisher.Polish(&c.plan, limits, note);
      if (c.cost.Fits()) note(c.cost.iteration_seconds);
      candidates.insert(candidates.begin(), c);
      std::stable_sort(candidates.begin(), candidates.end(),
                       [](const Candidate& a, const Candidate& b) {
                         return a.cost.BetterThan(b.cost);
                       });
    }
  }

  // --- 4. The best plan that Evaluate() confirms. ---
  summary.evaluations = surrogate_evaluations + polisher.evaluations();
  std::string why_not;
  for (const Candidate& c : candidates) {
    Plan plan = polisher.ToPlan(c.plan);
    ValidatePlan(problem, plan, "relax plan");
    const Estimate estimate = Evaluate(cost_model, plan);
    ++summary.evaluations;
    if (!estimate.Fits()) {
      if (why_not.empty()) why_not = estimate.MemoryViolation() + " (" + plan.Summary() + ")";
      continue;
    }
    summary.best_iteration_seconds = estimate.iteration_seconds;
    if (!std::isfinite(summary.initial_iteration_seconds))
      summary.initial_iteration_seconds = estimate.iteration_seconds;
    result.plan = plan;
    break;
  }
  const double wall_seconds = elapsed();
  if (!result.plan) {
    summary.termination = TerminationType::kInfeasible;
    summary.message =
        candidates.empty() && !phase.no_start_reason.empty() ? phase.no_start_reason
        : candidates.empty()
            ? "no restart could be repaired to a valid plan (device budget, stage counts or "
              "microbatch divisibility)"
            : "no plan found fits in memory; closest: " + why_not;
    if (time_limited) summary.message += " (time limit reached)";
    return run.Finish();
  }
  if (time_limited) {
    summary.termination = TerminationType::kTimeLimit;
    summary.message = "time limit reached; best plan so far";
  } else if (evaluation_limited) {
    summary.termination = TerminationType::kEvaluationLimit;
    summary.message = "evaluation budget reached; best plan so far";
  } else {
    summary.termination = TerminationType::kConverged;
    summary.message = fmt::format(
        "{}: {} x {} Adam steps ({:.3f} s){}, {} plans polished ({}) ({:.3f} s){}",
        RelaxRelaxationName(ro.relaxation),
        ro.relaxation == RelaxOptions::Relaxation::kCuts
            ? fmt::format("{} restarts", ro.restarts)
        : heterogeneous
            ? fmt::format("{} microbatch options over {} node-group orders",
                          tables.num_microbatch_options, space.GroupOrders().size())
            : fmt::format("{} microbatch options", tables.num_microbatch_options),
        summary.iterations, gradient_seconds,
        phase.level_probes > 0
            ? fmt::format(", level search {} probes{}", phase.level_probes,
                          phase.level_search_cut ? " (a pass stopped at its probe budget)" : "")
            : "",
        polished, RelaxPolishName(ro.polish),
        wall_seconds - gradient_seconds,
        extension_plans > 0
            ? fmt::format("; the group extension found {} better plans", extension_plans)
            : "");
  }
  return run.Finish();
}

}  // namespace stratos
