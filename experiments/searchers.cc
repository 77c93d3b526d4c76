#include "experiments/searchers.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <sstream>

#include "baselines/dp_searcher.h"
#include "baselines/exhaustive_searcher.h"
#include "baselines/grid_searcher.h"
#include "costmodel/compression.h"
#include "costmodel/error.h"
#include "search/interleaving_searcher.h"

namespace stratos {

std::vector<std::string> SearcherNames() {
  return {"relax", "dp", "ilp", "mcmc", "grid", "local", "exhaustive"};
}

std::unique_ptr<Searcher> MakeSearcher(const std::string& name) {
  return SearcherSetup(name).MakeSearcher();
}

std::vector<std::string> ExpandAlgorithms(const std::vector<std::string>& names) {
  std::vector<std::string> out;
  auto add = [&out](const std::string& name) {
    if (std::find(out.begin(), out.end(), name) == out.end()) out.push_back(name);
  };
  for (const std::string& name : names) {
    if (name == "all") {
      for (const std::string& each : SearcherNames()) add(each);
    } else if (!name.empty()) {
      SearcherSetup check(name);  // validates
      add(name);
    }
  }
  if (out.empty()) ThrowInputError("command line", "--algo", "\"\"", "names no algorithm");
  return out;
}

namespace {

template <class T>
std::string JoinList(const std::vector<T>& items, const std::function<std::string(const T&)>& f) {
  std::vector<std::string> parts;
  for (const T& item : items) parts.push_back(f(item));
  return fmt::format("{}", fmt::join(parts, ","));
}

std::vector<std::string> SplitList(const std::string& text) {
  std::vector<std::string> parts;
  std::stringstream stream(text);
  std::string part;
  while (std::getline(stream, part, ','))
    if (!part.empty()) parts.push_back(part);
  return parts;
}

// The integers of a comma list given to option `name`, each read as OptionTable reads an
// integer (its errors name `where` and the option).
std::vector<int> ParseIntList(const std::string& name, const std::string& text,
                              const std::string& where) {
  std::vector<int> values;
  for (const std::string& part : SplitList(text)) {
    OptionTable one;
    int value = 0;
    one.Int(name, &value, "");
    one.Set(name, part, where);
    values.push_back(value);
  }
  return values;
}

}  // namespace

SearcherSetup::SearcherSetup(const std::string& algorithm, const std::string& where)
    : algorithm_(algorithm) {
  bool known = false;
  for (const std::string& name : SearcherNames()) known = known || name == algorithm;
  if (!known) {
    const std::string rule =
        fmt::format("unknown algorithm (known: {}, all)", fmt::join(SearcherNames(), ", "));
    if (where == "--algo") ThrowInputError("command line", "--algo", algorithm, rule);
    throw InputError(fmt::format("{} = \"{}\": {}", where, algorithm, rule));
  }

  OptionTable& t = table_;
  t.Double("search.time_limit_seconds", &search_.time_limit_seconds, "wall-clock budget, > 0");
  t.Long("search.max_evaluations", &search_.max_evaluations, "evaluation budget; 0 = unbounded");
  t.Double("search.memory_limit_bytes", &search_.memory_limit_bytes,
           "memory budget of a searcher's tables, bytes; 0 = half the physical memory");
  t.Int("search.seed", &search_.seed, "random seed");
  t.Int("search.threads", &search_.threads, "threads, >= 1");
  SpaceOptions& space = search_.space;
  t.Int("space.min_stages", &space.min_stages, "fewest pipeline stages, >= 1");
  t.Int("space.max_stages", &space.max_stages, "most pipeline stages; 0 = min(layers, devices, 16)");
  t.Int("space.max_tensor_parallel", &space.max_tensor_parallel,
        "largest TP; 0 = GPUs per node; above it, TP groups of whole nodes too");
  t.Int("space.max_data_parallel", &space.max_data_parallel, "largest DP; 0 = unbounded");
  t.Bool("space.allow_zero", &space.allow_zero, "ZeRO 1-3 as options");
  t.Int("space.max_num_microbatches", &space.max_num_microbatches,
        "largest microbatch count; 0 = the global batch");
  t.Text(
      "space.num_microbatches",
      [&space] { return JoinList<int>(space.num_microbatches, [](const int& m) { return std::to_string(m); }); },
      [&space](const std::string& text, const std::string& where) {
        space.num_microbatches = ParseIntList("space.num_microbatches", text, where);
      },
      "comma list of microbatch counts; empty = every divisor of the global batch");
  t.Text(
      "space.virtual_stages",
      [&space] { return JoinList<int>(space.virtual_stages, [](const int& v) { return std::to_string(v); }); },
      [&space](const std::string& text, const std::string& where) {
        space.virtual_stages = ParseIntList("space.virtual_stages", text, where);
        std::sort(space.virtual_stages.begin(), space.virtual_stages.end());
        space.virtual_stages.erase(
            std::unique(space.virtual_stages.begin(), space.virtual_stages.end()),
            space.virtual_stages.end());
      },
      "comma list of model chunks per pipeline rank, e.g. 1,2,4 (> 1: interleaved 1F1B); 1 = "
      "plain pipelines");
  t.Text(
      "space.recompute",
      [&space] { return JoinList<Recompute>(space.recompute, [](const Recompute& r) { return std::string(RecomputeName(r)); }); },
      [&space](const std::string& text, const std::string& where) {
        space.recompute.clear();
        for (const std::string& part : SplitList(text))
          space.recompute.push_back(ParseRecompute(part, where + ": space.recompute"));
      },
      "comma list of none, selective, full");
  t.Text(
      "space.grad_compressions",
      [&space] { return JoinList<CompressionSpec>(space.grad_compressions, [](const CompressionSpec& c) { return std::string(GradCompressionName(c.kind)); }); },
      [&space](const std::string& text, const std::string& where) {
        space.grad_compressions = ParseCompressionList(text, where, "space.grad_compressions");
      },
      "comma list of none, bf16, fp16, topk, powersgd, terngrad, sign");
  t.Text(
      "space.node_groups",
      [&space] { return JoinList<std::string>(space.node_groups, [](const std::string& g) { return g; }); },
      [&space](const std::string& text, const std::string&) { space.node_groups = SplitList(text); },
      "comma list of node group names the stages may use (e.g. the fastest); empty = every group");

  if (algorithm == "relax") {
    RelaxOptions& r = relax_;
    t.Text(
        "relax.relaxation", [&r] { return std::string(RelaxRelaxationName(r.relaxation)); },
        [&r](const std::string& text, const std::string& where) {
          r.relaxation = ParseRelaxRelaxation(text, where + ": relax.relaxation");
        },
        "smoothed-dp | cuts");
    t.Double("relax.initial_gibbs_temperature", &r.initial_gibbs_temperature, "smoothed DP: tau / iteration-time scale at the start, > 0");
    t.Double("relax.final_gibbs_temperature", &r.final_gibbs_temperature, "at the end, (0, initial]");
    t.Double("relax.prune_microbatch_ratio", &r.prune_microbatch_ratio, "smoothed DP: from a quarter of the steps, stop a track whose best plan is over this x the best; 0 = never, else >= 1");
    t.Int("relax.price_starts", &r.price_starts, "smoothed DP: dual-ascent tracks per microbatch count, prices 10^-k apart, >= 1");
    t.Int("relax.coarse_layers", &r.coarse_layers, "smoothed DP: annealed phase on coarser cuts above this many layers; 0 = never, else >= 2");
    t.Int("relax.heterogeneous_coarse_layers", &r.heterogeneous_coarse_layers, "smoothed DP: coarse_layers on heterogeneous clusters; 0 = never, else >= 2");
    t.Bool("relax.coarse_room_for_max_stages", &r.coarse_room_for_max_stages, "smoothed DP: coarse cut stride at most max(2, layers / max_stages), so the most stages fit (slower)");
    t.Bool("relax.extend_groups", &r.extend_groups, "heterogeneous: after the polish, decode the orders that add an unused group at every layer boundary");
    t.Int("relax.extend_max_decodes", &r.extend_max_decodes, "heterogeneous: exact decodes the group extension runs at most (a work bound), >= 1");
    t.Bool("relax.device_decode", &r.device_decode, "smoothed DP: final decode with the device budget as a DP dimension");
    t.Int("relax.level_search_options", &r.level_search_options, "smoothed DP: level search around the best plans of the best N microbatch options, >= 0 (0: none; default: every one)");
    t.Int("relax.refine_options", &r.refine_options, "smoothed DP, models over coarse_layers: refine the best N options' coarse plans at every layer boundary, >= 1");
    t.Int("relax.level_search_max_probes", &r.level_search_max_probes, "smoothed DP: probes one level-search pass decodes at most (a work bound: the same search on a loaded machine), >= 1");
    t.Int("relax.late_decodes", &r.late_decodes, "smoothed DP: device decodes also from the last N distinct decoded plans' levels, >= 0");
    t.Int("relax.decode_orders", &r.decode_orders, "smoothed DP, heterogeneous clusters: device decodes and level search on the best N node-group orders per microbatch option, >= 1");
    t.Double("relax.device_decode_max_work", &r.device_decode_max_work, "largest device decode (stages x layer ranges x free-device units), >= 0");
    t.Int("relax.restarts", &r.restarts, "restarts optimized together, >= 1");
    t.Int("relax.iterations", &r.iterations, "Adam steps, >= 1");
    t.Double("relax.learning_rate", &r.learning_rate, "Adam learning rate, > 0");
    t.Double("relax.initial_temperature", &r.initial_temperature, "softmax temperature at the start, > 0");
    t.Double("relax.final_temperature", &r.final_temperature, "at the end, (0, initial]");
    t.Double("relax.initial_smoothmax_tau", &r.initial_smoothmax_tau, "smooth-max tau / mean stage time at the start, >= 0");
    t.Double("relax.final_smoothmax_tau", &r.final_smoothmax_tau, "at the end, [0, initial]");
    t.Bool("relax.gumbel_noise", &r.gumbel_noise, "Gumbel-softmax noise on the logits");
    t.Bool("relax.straight_through", &r.straight_through, "straight-through estimator");
    t.Double("relax.memory_penalty_weight", &r.memory_penalty_weight, ">= 0");
    t.Double("relax.device_penalty_weight", &r.device_penalty_weight, ">= 0");
    t.Double("relax.stage_count_penalty_weight", &r.stage_count_penalty_weight, ">= 0");
    t.Int("relax.discretize_every", &r.discretize_every, "discretize every N steps too; 0 = only at the end");
    t.Text(
        "relax.polish", [&r] { return std::string(RelaxPolishName(r.polish)); },
        [&r](const std::string& text, const std::string& where) {
          r.polish = ParseRelaxPolish(text, where + ": relax.polish");
        },
        "none (argmax + repair only) | descent | iterated");
    t.Int("relax.max_polish_starts", &r.max_polish_starts, "restart results polished, >= 1");
    t.Int("relax.heterogeneous_max_polish_starts", &r.heterogeneous_max_polish_starts, "max_polish_starts on heterogeneous clusters, >= 1");
    t.Int("relax.polish_kicks", &r.polish_kicks, "iterated-local-search kicks per start, >= 0");
    t.Bool("relax.double_precision", &r.double_precision, "surrogate in float64");
    t.Double("relax.min_config_probability", &r.min_config_probability, "configs below it skipped, [0, 1)");
    t.Bool("relax.prune_dominated_configs", &r.prune_dominated_configs, "surrogate over undominated configs only");
  } else if (algorithm == "mcmc") {
    McmcOptions& m = mcmc_;
    t.Double("mcmc.beta", &m.beta, "inverse temperature on the relative cost change, > 0");
    t.Int("mcmc.max_boundary_shift", &m.max_boundary_shift, "largest boundary move; 0 = layers / 8");
    t.Long("mcmc.restart_patience", &m.restart_patience, "proposals without improvement before a restart, >= 1");
    t.Long("mcmc.convergence_patience", &m.convergence_patience, "proposals without improvement before stopping; 0 = never");
    t.Double("mcmc.memory_penalty", &m.memory_penalty, ">= 0");
    t.Long("mcmc.max_initial_evaluations", &m.max_initial_evaluations, "uniform plans priced for the first state, >= 1");
  } else if (algorithm == "local") {
    t.Int("local.starts", &local_.starts, "random starts; 0 = until the time limit");
    t.Int("local.kicks", &local_.kicks, "iterated-local-search kicks per start, >= 0");
  } else if (algorithm == "ilp") {
    t.Bool("ilp.solver_log", &ilp_.solver_log, "print CBC's log");
  }
}

bool SearcherSetup::Has(const std::string& name) const { return table_.Has(name); }

void SearcherSetup::Set(const std::string& name, const std::string& value,
                        const std::string& where) {
  table_.Set(name.find('.') == std::string::npos ? algorithm_ + "." + name : name, value, where);
}

void SearcherSetup::Validate(const std::string& where) const {
  try {
    search_.Validate();
    if (algorithm_ == "relax") relax_.Validate();
    if (algorithm_ == "mcmc") mcmc_.Validate();
    if (algorithm_ == "local") local_.Validate();
  } catch (const InputError& e) {
    throw InputError(fmt::format("{}: {}", where, e.what()));
  }
}

std::unique_ptr<Searcher> SearcherSetup::MakeSearcher() const {
  // The grid enumerates the interleaved forms of every uniform plan itself, the exhaustive search
  // those of every plan, and the DP and the ILP search the virtual stages where they price them
  // exactly (wrapping themselves elsewhere, dp_searcher.h, ilp_searcher.h). Relax (its polish),
  // local and MCMC search them there too; the wrapper offers their plain plans interleaved
  // elsewhere (search/interleaving_searcher.h).
  if (algorithm_ == "grid") return std::make_unique<GridSearcher>();
  if (algorithm_ == "dp") return std::make_unique<DpSearcher>();
  if (algorithm_ == "exhaustive") return std::make_unique<ExhaustiveSearcher>();
  if (algorithm_ == "ilp") return std::make_unique<IlpSearcher>(ilp_);
  std::unique_ptr<Searcher> searcher;
  if (algorithm_ == "relax") searcher = std::make_unique<RelaxSearcher>(relax_);
  else if (algorithm_ == "mcmc") searcher = std::make_unique<McmcSearcher>(mcmc_);
  else if (algorithm_ == "local") searcher = std::make_unique<LocalSearcher>(local_);
  else STRATOS_CHECK(false, "no searcher named {}", algorithm_);
  if (!search_.space.OffersInterleaving()) return searcher;
  return std::make_unique<InterleavingSearcher>(std::move(searcher));
}

nlohmann::json SearcherSetup::ToJson() const {
  return {{"algorithm", algorithm_}, {"options", table_.Values()}};
}

std::vector<std::string> SearcherSetup::Help() const { return table_.Help(); }

void ApplyOptionAssignments(const std::vector<std::string>& assignments,
                            std::vector<std::unique_ptr<SearcherSetup>>& setups,
                            const std::string& flag) {
  for (const std::string& assignment : assignments) {
    const auto [name, value] = SplitAssignment(assignment, "command line: " + flag);
    const std::string where = fmt::format("command line: {} {}", flag, assignment);
    const size_t dot = name.find('.');
    const std::string prefix = dot == std::string::npos ? "" : name.substr(0, dot);
    if (prefix == "search" || prefix == "space") {
      for (auto& setup : setups) setup->Set(name, value, where);
      continue;
    }
    bool applied = false;
    for (auto& setup : setups) {
      if (setup->algorithm() != prefix) continue;
      setup->Set(name, value, where);
      applied = true;
    }
    if (!applied) {
      bool known = false;
      for (const std::string& algorithm : SearcherNames()) known = known || algorithm == prefix;
      throw InputError(fmt::format(
          "{}: {}", where,
          known ? fmt::format("{} is not among the searchers run (--algo)", prefix)
                : fmt::format("must be <algorithm>.<field>, search.<field> or space.<field> "
                              "(algorithms: {})",
                              fmt::join(SearcherNames(), ", "))));
    }
  }
}

}  // namespace stratos
