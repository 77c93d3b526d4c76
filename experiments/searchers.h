#pragma once
// The registry of searchers: the only place that knows every one of them (DESIGN.md §2), and
// every searcher option settable by name (experiment specs, `--option name=value`).
#include <nlohmann/json.hpp>

#include <memory>
#include <string>
#include <vector>

#include "baselines/ilp_searcher.h"
#include "baselines/local_searcher.h"
#include "baselines/mcmc_searcher.h"
#include "experiments/option_table.h"
#include "search/relax_searcher.h"
#include "search/searcher.h"

namespace stratos {

// Names accepted by --algo, in the order `all` runs them.
std::vector<std::string> SearcherNames();

// A default-configured searcher. Throws InputError("--algo = <name>: unknown algorithm (known:
// ...)") for an unknown name.
std::unique_ptr<Searcher> MakeSearcher(const std::string& name);

// The searchers that `names` asks for, in the order given, each once; "all" stands for every one
// (SearcherNames() order). Throws InputError "command line: --algo = <name>: unknown algorithm"
// for an unknown name and "... names no algorithm" for an empty list.
std::vector<std::string> ExpandAlgorithms(const std::vector<std::string>& names);

// One searcher with its options and the run's SearchOptions, every field settable by name:
//   "<algorithm>.<field>"  the searcher's own options (RelaxOptions, McmcOptions, LocalOptions,
//                          IlpOptions; dp, grid and exhaustive have none),
//   "search.<field>"       SearchOptions (time_limit_seconds, max_evaluations, seed, threads),
//   "space.<field>"        SpaceOptions (min_stages, max_stages, max_tensor_parallel, ...).
// A name without a dot means the searcher's own option ("iterations" = "relax.iterations" for
// relax). Not copyable: the option table points into it.
class SearcherSetup {
 public:
  // Throws InputError naming `where` for an unknown algorithm.
  explicit SearcherSetup(const std::string& algorithm, const std::string& where = "--algo");
  SearcherSetup(const SearcherSetup&) = delete;
  SearcherSetup& operator=(const SearcherSetup&) = delete;

  const std::string& algorithm() const { return algorithm_; }
  // Whether `name` (qualified) is an option of this setup.
  bool Has(const std::string& name) const;
  // Sets one option. Throws InputError "<where>: <name> = "<value>": <rule>" for an unknown name
  // (listing the known ones) or a value of the wrong type.
  void Set(const std::string& name, const std::string& value, const std::string& where);
  // Checks every option struct (ranges, consistency); throws InputError prefixed with `where`.
  void Validate(const std::string& where) const;
  // A searcher with these options (after Validate).
  std::unique_ptr<Searcher> MakeSearcher() const;
  SearchOptions& search_options() { return search_; }
  const SearchOptions& search_options() const { return search_; }
  // {"algorithm": ..., "options": {name: value, ...}}: what summary.json records.
  nlohmann::json ToJson() const;
  // "name (type, default): doc" for every option of `algorithm` (and search.*, space.*).
  std::vector<std::string> Help() const;

 private:
  std::string algorithm_;
  SearchOptions search_;
  RelaxOptions relax_;
  McmcOptions mcmc_;
  LocalOptions local_;
  IlpOptions ilp_;
  OptionTable table_;
};

// Applies "name=value" assignments (from `--option`, repeatable) to the setups they address:
// "<algorithm>.*" to that algorithm's setup, "search.*" and "space.*" to every setup. Throws
// InputError naming the flag for a malformed assignment, an unknown option, or an algorithm
// option whose algorithm is not being run.
void ApplyOptionAssignments(const std::vector<std::string>& assignments,
                            std::vector<std::unique_ptr<SearcherSetup>>& setups,
                            const std::string& flag = "--option");

}  // namespace stratos
