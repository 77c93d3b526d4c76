#include "experiments/experiment_spec.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <map>
#include <set>
#include <sstream>

#include "costmodel/data_dir.h"
#include "costmodel/error.h"
#include "costmodel/generators.h"
#include "costmodel/model_io.h"
#include "costmodel/synthetic.h"
#include "costmodel/toml_reader.h"
#include "experiments/output.h"
#include "experiments/problem_loader.h"
#include "experiments/searchers.h"

namespace stratos {

namespace {

// A TOML value as the text an option parser reads: numbers and booleans as written, strings
// as they are, arrays comma-joined.
std::string OptionText(const toml::node& node) {
  if (const auto* s = node.as_string()) return s->get();
  if (const auto* b = node.as_boolean()) return b->get() ? "true" : "false";
  if (const auto* i = node.as_integer()) return std::to_string(i->get());
  if (const auto* f = node.as_floating_point()) return fmt::format("{}", f->get());
  if (const auto* a = node.as_array()) {
    std::vector<std::string> parts;
    for (const toml::node& item : *a) parts.push_back(OptionText(item));
    return fmt::format("{}", fmt::join(parts, ","));
  }
  return "";
}

// Flattens `table` into (dotted name, text) pairs.
void FlattenOptions(const toml::table& table, const std::string& prefix,
                    std::vector<std::pair<std::string, std::string>>* out) {
  for (const auto& [key, node] : table) {
    const std::string name = prefix.empty() ? std::string(key.str()) : prefix + "." + std::string(key.str());
    if (const auto* t = node.as_table()) {
      FlattenOptions(*t, name, out);
    } else {
      out->emplace_back(name, OptionText(node));
    }
  }
}

// An array of strings at `key` (a single string is a list of one); nullopt when absent.
std::optional<std::vector<std::string>> StringList(const TomlTableReader& r, std::string_view key) {
  const toml::node* node = r.Find(key);
  if (node == nullptr) return std::nullopt;
  std::vector<std::string> out;
  if (const auto* s = node->as_string()) return std::vector<std::string>{s->get()};
  const auto* array = node->as_array();
  if (array == nullptr || array->empty()) r.Fail(key, "must be a non-empty list of strings");
  for (const toml::node& item : *array) {
    if (!item.is_string()) r.Fail(key, "must be a non-empty list of strings");
    out.push_back(item.as_string()->get());
  }
  return out;
}

// An array of integers >= min at `key` (a single integer is a list of one).
std::optional<std::vector<long long>> IntList(const TomlTableReader& r, std::string_view key,
                                              long long min, long long max = INT_MAX) {
  const toml::node* node = r.Find(key);
  if (node == nullptr) return std::nullopt;
  std::vector<long long> out;
  auto check = [&](const toml::node& item) {
    if (!item.is_integer())
      r.Fail(key, fmt::format("must be a non-empty list of integers >= {}", min));
    const long long v = item.as_integer()->get();
    if (v < min || v > max) r.Fail(key, fmt::format("every entry must be in [{}, {}]", min, max));
    out.push_back(v);
  };
  if (const auto* array = node->as_array()) {
    if (array->empty()) r.Fail(key, fmt::format("must be a non-empty list of integers >= {}", min));
    for (const toml::node& item : *array) check(item);
  } else {
    check(*node);
  }
  return out;
}

std::vector<int> ToInts(const std::vector<long long>& v) { return {v.begin(), v.end()}; }

// The `nodes` list: node counts of the first node group (integers >= 1) or, for heterogeneous
// clusters, counts per group as --nodes takes them ("h100=4,a100=4"); a single entry is a list of
// one. Each entry as JSON (an integer or a string), as cells record it.
std::optional<std::vector<nlohmann::json>> NodesList(const TomlTableReader& r) {
  const toml::node* node = r.Find("nodes");
  if (node == nullptr) return std::nullopt;
  const std::string rule =
      "must be a non-empty list of node counts >= 1 or per-group counts such as \"a100=4,v100=8\"";
  std::vector<nlohmann::json> out;
  auto check = [&](const toml::node& item) {
    if (const auto* count = item.as_integer()) {
      if (count->get() < 1 || count->get() > INT_MAX) r.Fail("nodes", rule);
      out.push_back(static_cast<int>(count->get()));
    } else if (const auto* groups = item.as_string()) {
      if (groups->get().find('=') == std::string::npos) r.Fail("nodes", rule);
      out.push_back(groups->get());
    } else {
      r.Fail("nodes", rule);
    }
  };
  if (const auto* array = node->as_array()) {
    if (array->empty()) r.Fail("nodes", rule);
    for (const toml::node& item : *array) check(item);
  } else {
    check(*node);
  }
  return out;
}

// The family's `training` table (ExperimentSpec's keys), its values checked, as JSON.
nlohmann::json ReadTraining(const TomlTableReader& family) {
  const toml::node* node = family.Find("training");
  if (node == nullptr) return nlohmann::json::object();
  if (!node->is_table())
    family.Fail("training", "must be a table, e.g. { dp_overlap = 1, dp_bucket_MiB = 25 }");
  TomlTableReader r(*node->as_table(), family.KeyPath("training"), family.Where());
  r.AllowOnly({"dp_overlap", "dp_bucket_MiB", "tp_comm_overlap", "pp_comm_overlap",
               "sequence_parallel", "zero_reduce_every_microbatch", "zero3_gather"});
  nlohmann::json out = nlohmann::json::object();
  for (const char* key : {"dp_overlap", "tp_comm_overlap", "pp_comm_overlap"}) {
    if (const auto v = r.Number(key)) {
      if (!(*v >= 0.0 && *v <= 1.0)) r.Fail(key, "must be in [0, 1]");
      out[key] = *v;
    }
  }
  if (const auto v = r.NonNegative("dp_bucket_MiB")) out["dp_bucket_MiB"] = *v;
  for (const char* key : {"sequence_parallel", "zero_reduce_every_microbatch"})
    if (const auto v = r.Bool(key)) out[key] = *v;
  if (const auto v = r.String("zero3_gather")) {
    const std::vector<std::string> units = Zero3GatherNames();
    if (std::find(units.begin(), units.end(), *v) == units.end())
      r.Fail("zero3_gather", Zero3GatherRule());
    out["zero3_gather"] = *v;
  }
  return out;
}

ExperimentFamily ReadFamily(const toml::table& table, int index, const std::string& where) {
  const std::string path = fmt::format("family[{}]", index);
  TomlTableReader r(table, path, where);
  r.AllowOnly({"name", "generator", "models", "clusters", "nodes", "global_batches",
               "seq_lengths", "layers", "instances", "instance_seeds", "rows", "spread_decades",
               "schedule", "zip", "training"});
  ExperimentFamily f;
  f.generator = r.String("generator").value_or("");
  if (f.generator != "" && f.generator != "nonuniform" && f.generator != "operator" &&
      f.generator != "seed-cases")
    r.Fail("generator", "must be nonuniform, operator or seed-cases (or absent: models as given)");
  f.name = r.String("name").value_or(f.generator.empty() ? fmt::format("family{}", index) : f.generator);
  if (auto v = StringList(r, "models")) f.models = *v;
  if (auto v = StringList(r, "clusters")) f.clusters = *v;
  if (auto v = NodesList(r)) f.nodes = *v;
  if (auto v = IntList(r, "global_batches", 1)) f.global_batches = ToInts(*v);
  if (auto v = IntList(r, "seq_lengths", 1)) f.seq_lengths = ToInts(*v);
  if (auto v = IntList(r, "layers", 1, 1 << 20)) f.layers = ToInts(*v);
  if (auto v = IntList(r, "rows", 0)) f.rows = ToInts(*v);
  if (auto v = IntList(r, "instance_seeds", 0, LLONG_MAX))
    f.instance_seeds.assign(v->begin(), v->end());
  if (auto n = r.Int("instances", 1, 100000)) {
    if (!f.instance_seeds.empty()) r.Fail("instances", "give only one of instances, instance_seeds");
    for (long long s = 0; s < *n; ++s) f.instance_seeds.push_back(static_cast<std::uint64_t>(s));
  }
  f.spread_decades = r.Number("spread_decades", 0.0).value_or(1.5);
  f.schedule = r.String("schedule").value_or("1f1b");
  ParseSchedule(f.schedule, fmt::format("{}: {}.schedule", where, path));
  f.zip = r.Bool("zip").value_or(false);
  f.training = ReadTraining(r);

  const bool needs_models = f.generator.empty() || f.generator == "operator";
  if (needs_models && f.models.empty()) r.Missing("models");
  if (!needs_models && !f.models.empty())
    r.Fail("models", fmt::format("not used by generator \"{}\"", f.generator));
  if (f.generator != "seed-cases" && f.clusters.empty()) r.Missing("clusters");
  if (f.generator == "seed-cases" && !f.training.empty())
    r.Fail("training", "not used by generator \"seed-cases\" (each case fixes its problem)");
  if (f.generator == "seed-cases" && !f.clusters.empty())
    r.Fail("clusters", "not used by generator \"seed-cases\" (each case fixes its devices)");
  if (f.generator == "nonuniform") {
    if (f.layers.empty()) r.Missing("layers");
    if (f.instance_seeds.empty()) r.Missing("instances");
  } else {
    if (!f.layers.empty()) r.Fail("layers", "only generator \"nonuniform\" takes layers");
    if (!f.instance_seeds.empty() && f.generator != "nonuniform")
      r.Fail(r.Find("instances") ? "instances" : "instance_seeds",
             "only generator \"nonuniform\" takes instance seeds");
  }
  if (f.generator != "seed-cases" && !f.rows.empty())
    r.Fail("rows", "only generator \"seed-cases\" takes rows");
  if (f.zip) {
    size_t n = 1;
    for (size_t size : {f.models.size(), f.clusters.size(), f.nodes.size(),
                        f.global_batches.size(), f.seq_lengths.size(), f.layers.size()})
      if (size > 1) {
        if (n > 1 && size != n)
          r.Fail("zip", "zipped lists must have equal lengths (or length 1)");
        n = size;
      }
  }
  return f;
}

ExperimentSearcher ReadSearcher(const toml::table& table, int index, const std::string& where) {
  const std::string path = fmt::format("searcher[{}]", index);
  TomlTableReader r(table, path, where);
  r.AllowOnly({"name", "algorithm", "options", "time_limit_seconds"});
  ExperimentSearcher s;
  s.algorithm = r.RequireString("algorithm");
  s.name = r.String("name").value_or(s.algorithm);
  if (s.name.empty() || s.name.find_first_of(",\"\n") != std::string::npos)
    r.Fail("name", "must be non-empty, without commas, quotes or newlines");
  SearcherSetup setup(s.algorithm, fmt::format("{}: {}.algorithm", where, path));
  if (const toml::node* node = r.Find("options")) {
    if (!node->is_table()) r.Fail("options", "must be a table, e.g. { iterations = 1 }");
    FlattenOptions(*node->as_table(), "", &s.options);
    for (const auto& [name, value] : s.options)
      setup.Set(name, value, fmt::format("{}: {}.options", where, path));
  }
  setup.Validate(fmt::format("{}: {}.options", where, path));
  if (auto t = r.Number("time_limit_seconds")) {
    if (!(*t > 0)) r.Fail("time_limit_seconds", "must be > 0");
    s.time_limit_seconds = *t;
  }
  return s;
}

// The instances of a family as problem descriptions (JSON) with readable names.
std::vector<std::pair<std::string, nlohmann::json>> Instances(const ExperimentFamily& f) {
  std::vector<std::pair<std::string, nlohmann::json>> out;
  if (f.generator == "seed-cases") {
    const std::vector<SeedCaseRow> rows = ReadSeedPartitionCases();
    std::vector<int> indices = f.rows;
    if (indices.empty())
      for (int i = 0; i < static_cast<int>(rows.size()); ++i) indices.push_back(i);
    for (int i : indices) {
      if (i >= static_cast<int>(rows.size()))
        throw InputError(fmt::format("family \"{}\": rows: {} is past the last seed case ({})",
                                     f.name, i, rows.size() - 1));
      const SeedCaseRow& row = rows[i];
      out.push_back({fmt::format("case{}-L{}-k{}-B{}", i, row.num_layers, row.num_stages,
                                 row.num_microbatches),
                     {{"generator", "seed-cases"}, {"row", i}}});
    }
    return out;
  }
  // Index lists crossed (or zipped); layers x instance seeds stand in for models.
  std::vector<nlohmann::json> models;
  if (f.generator == "nonuniform") {
    for (int layers : f.layers)
      for (std::uint64_t seed : f.instance_seeds)
        models.push_back({{"generator", "nonuniform"}, {"layers", layers}, {"instance_seed", seed},
                          {"spread_decades", f.spread_decades}});
  } else {
    for (const std::string& m : f.models)
      models.push_back({{"generator", f.generator}, {"model", m}});
  }
  auto add = [&](const nlohmann::json& model, const std::string& cluster,
                 const nlohmann::json& nodes, int batch, int seq) {
    nlohmann::json p = model;
    p["cluster"] = cluster;
    p["nodes"] = nodes;
    p["global_batch"] = batch;
    p["seq_length"] = seq;
    p["schedule"] = f.schedule;
    if (!f.training.empty()) p["training"] = f.training;
    std::string name = model.contains("model")
                           ? model["model"].get<std::string>()
                           : fmt::format("L{}-s{}", model["layers"].get<int>(),
                                         model["instance_seed"].get<std::uint64_t>());
    const bool file = cluster.find('/') != std::string::npos ||
                      std::filesystem::path(cluster).extension() == ".toml";
    name += "/" + (file ? std::filesystem::path(cluster).stem().string() : cluster);
    if (nodes.is_string()) name += "/" + nodes.get<std::string>();
    if (nodes.is_number() && nodes.get<int>() > 0) name += fmt::format("/{}n", nodes.get<int>());
    name += fmt::format("/b{}", batch);
    if (seq > 0) name += fmt::format("/s{}", seq);
    out.push_back({name, p});
  };
  if (f.zip) {
    size_t n = 1;
    for (size_t size : {models.size(), f.clusters.size(), f.nodes.size(), f.global_batches.size(),
                        f.seq_lengths.size()})
      n = std::max(n, size);
    auto at = [](const auto& v, size_t i) { return v.size() == 1 ? v[0] : v[i]; };
    for (size_t i = 0; i < n; ++i)
      add(at(models, i), at(f.clusters, i), at(f.nodes, i), at(f.global_batches, i),
          at(f.seq_lengths, i));
  } else {
    for (const nlohmann::json& model : models)
      for (const std::string& cluster : f.clusters)
        for (const nlohmann::json& nodes : f.nodes)
          for (int batch : f.global_batches)
            for (int seq : f.seq_lengths) add(model, cluster, nodes, batch, seq);
  }
  return out;
}

}  // namespace

std::string StableHash(const std::string& text) {
  std::uint64_t h = 14695981039346656037ULL;
  for (unsigned char c : text) {
    h ^= c;
    h *= 1099511628211ULL;
  }
  return fmt::format("{:016x}", h);
}

void ApplyFamilyTraining(const nlohmann::json& options, TrainingSpec* training) {
  for (const auto& [key, value] : options.items()) {
    if (key == "dp_overlap") {
      training->dp_overlap_fraction = value.get<double>();
    } else if (key == "dp_bucket_MiB") {
      training->dp_bucket_bytes = value.get<double>() * 1024.0 * 1024.0;
    } else if (key == "tp_comm_overlap") {
      training->tp_comm_overlap_fraction = value.get<double>();
    } else if (key == "pp_comm_overlap") {
      training->pp_comm_overlap_fraction = value.get<double>();
    } else if (key == "sequence_parallel") {
      training->sequence_parallel = value.get<bool>();
    } else if (key == "zero_reduce_every_microbatch") {
      training->zero_reduce_every_microbatch = value.get<bool>();
    } else if (key == "zero3_gather") {
      training->zero3_gather = ParseZero3Gather(value.get<std::string>(), "experiment cell");
    } else {
      ThrowInputError("experiment cell", "training." + key, value.dump(), "unknown key");
    }
  }
  ValidateTrainingSpec(*training, "experiment cell");
}

CellProblem BuildCellProblem(const nlohmann::json& p) {
  CellProblem out;
  const std::string generator = p.value("generator", "");
  if (generator == "seed-cases") {
    const SeedCaseRow row = ReadSeedPartitionCases().at(p.at("row").get<int>());
    SeedCase seed = MakeSeedPartitionCase(row.num_layers, row.num_stages, row.num_microbatches,
                                          row.layer_cost, row.cut_cost);
    out.problem = seed.problem;
    out.space = seed.space;
    return out;
  }
  ProblemArgs args;
  args.cluster = p.at("cluster").get<std::string>();
  const nlohmann::json& nodes = p.at("nodes");
  if (nodes.is_string()) args.nodes = nodes.get<std::string>();
  if (nodes.is_number() && nodes.get<int>() > 0) args.nodes = std::to_string(nodes.get<int>());
  args.global_batch_size = p.at("global_batch").get<int>();
  args.seq_length = p.at("seq_length").get<int>();
  args.schedule = p.at("schedule").get<std::string>();
  if (generator == "nonuniform") {
    args.model = "gpt3-1.3b";  // replaced below; LoadProblem needs a loadable model
    out.problem = LoadProblem(args);
    NonUniformModelOptions options;
    options.num_layers = p.at("layers").get<int>();
    options.spread_decades = p.at("spread_decades").get<double>();
    if (args.seq_length > 0) options.seq_length = args.seq_length;
    out.problem.model = MakeNonUniformModel(options, p.at("instance_seed").get<std::uint64_t>());
  } else {
    args.model = p.at("model").get<std::string>();
    out.problem = LoadProblem(args);
    if (generator == "operator")
      out.problem.model = MakeOperatorGranularityModel(out.problem.model);
  }
  if (p.contains("training")) ApplyFamilyTraining(p.at("training"), &out.problem.training);
  return out;
}

std::vector<ExperimentCell> ExperimentSpec::Expand() const {
  std::vector<ExperimentCell> cells;
  for (const ExperimentFamily& family : families) {
    for (const auto& [instance, problem] : Instances(family)) {
      for (const ExperimentSearcher& searcher : searchers) {
        for (int seed : seeds) {
          ExperimentCell cell;
          cell.id = static_cast<int>(cells.size());
          cell.family = family.name;
          cell.instance = instance;
          cell.problem = problem;
          cell.searcher = searcher.name;
          cell.algorithm = searcher.algorithm;
          cell.options = searcher.options;
          cell.seed = seed;
          cell.time_limit_seconds =
              searcher.time_limit_seconds > 0 ? searcher.time_limit_seconds : time_limit_seconds;
          nlohmann::json options = nlohmann::json::array();
          for (const auto& [name, value] : cell.options) options.push_back({name, value});
          cell.key = nlohmann::json{{"family", cell.family},
                                    {"problem", cell.problem},
                                    {"searcher", cell.searcher},
                                    {"algorithm", cell.algorithm},
                                    {"options", options},
                                    {"seed", cell.seed},
                                    {"time_limit_seconds", cell.time_limit_seconds}}
                         .dump();
          cells.push_back(std::move(cell));
        }
      }
    }
  }
  return cells;
}

std::string ExperimentSpec::Hash() const {
  std::string all = fmt::format("memory={}\n", memory_limit_bytes);
  for (const ExperimentCell& cell : Expand()) all += cell.key + "\n";
  return StableHash(all);
}

ExperimentSpec ParseExperimentSpec(std::string_view text, const std::string& where) {
  const toml::table root = ParseTomlText(text, where);
  TomlTableReader r(root, "", where);
  r.AllowOnly({"experiment", "family", "searcher"});
  ExperimentSpec spec;
  spec.source = where;
  spec.name = std::filesystem::path(where).stem().string();
  if (const toml::node* node = r.Find("experiment")) {
    if (!node->is_table()) r.Fail("experiment", "must be a table");
    TomlTableReader e(*node->as_table(), "experiment", where);
    e.AllowOnly({"name", "description", "time_limit_seconds", "memory_limit_GiB", "seeds"});
    spec.name = e.String("name").value_or(spec.name);
    spec.description = e.String("description").value_or("");
    if (auto t = e.Number("time_limit_seconds")) {
      if (!(*t > 0)) e.Fail("time_limit_seconds", "must be > 0");
      spec.time_limit_seconds = *t;
    }
    if (auto m = e.Number("memory_limit_GiB")) {
      if (!(*m > 0) || *m > 1e6) e.Fail("memory_limit_GiB", "must be > 0 and <= 1e6");
      spec.memory_limit_bytes = *m * 1024 * 1024 * 1024;
    }
    if (auto seeds = IntList(e, "seeds", 0)) {
      spec.seeds = ToInts(*seeds);
      std::set<int> distinct(spec.seeds.begin(), spec.seeds.end());
      if (distinct.size() != spec.seeds.size()) e.Fail("seeds", "must be distinct");
    }
  }
  auto tables = [&](const char* key) {
    std::vector<const toml::table*> out;
    const toml::node* node = r.Find(key);
    if (node == nullptr) r.Missing(key);
    const toml::array* array = node->as_array();
    if (array == nullptr || array->empty() || !array->is_array_of_tables())
      r.Fail(key, fmt::format("must be one or more [[{}]] tables", key));
    for (const toml::node& item : *array) out.push_back(item.as_table());
    return out;
  };
  std::set<std::string> family_names, searcher_names;
  int index = 0;
  for (const toml::table* t : tables("family")) {
    spec.families.push_back(ReadFamily(*t, index, where));
    if (!family_names.insert(spec.families.back().name).second)
      throw InputError(fmt::format("{}: family[{}].name = \"{}\": must be unique", where, index,
                                   spec.families.back().name));
    ++index;
  }
  index = 0;
  for (const toml::table* t : tables("searcher")) {
    spec.searchers.push_back(ReadSearcher(*t, index, where));
    if (!searcher_names.insert(spec.searchers.back().name).second)
      throw InputError(fmt::format("{}: searcher[{}].name = \"{}\": must be unique (name the "
                                   "variants of one algorithm apart)",
                                   where, index, spec.searchers.back().name));
    ++index;
  }
  // Every instance must build: a bad model or cluster name is an error now, not in a cell.
  index = 0;
  for (const ExperimentFamily& family : spec.families) {
    try {
      for (const auto& [instance, problem] : Instances(family)) BuildCellProblem(problem);
    } catch (const InputError& e) {
      throw InputError(fmt::format("{}: family[{}] (\"{}\"): {}", where, index, family.name, e.what()));
    }
    ++index;
  }
  return spec;
}

ExperimentSpec ReadExperimentSpec(const std::string& path) {
  return ParseExperimentSpec(ReadTextFile(path), path);
}

std::string ResolveSpecPath(const std::string& name_or_path) {
  std::error_code error;
  if (std::filesystem::is_regular_file(name_or_path, error)) return name_or_path;
  const std::string shipped = DataPath("experiments/specs/" + name_or_path + ".toml");
  if (name_or_path.find('/') == std::string::npos &&
      std::filesystem::is_regular_file(shipped, error))
    return shipped;
  return name_or_path;
}

}  // namespace stratos
