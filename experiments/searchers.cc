#include "experiments/searchers.h"

#include <sstream>

#include "baselines/dp_searcher.h"
#include "baselines/exhaustive_searcher.h"
#include "baselines/grid_searcher.h"
#include "baselines/ilp_searcher.h"
#include "baselines/mcmc_searcher.h"
#include "costmodel/error.h"
#include "search/relax_searcher.h"

namespace stratos {

std::vector<std::string> SearcherNames() {
  return {"relax", "dp", "ilp", "mcmc", "grid", "exhaustive"};
}

std::unique_ptr<Searcher> MakeSearcher(const std::string& name) {
  if (name == "relax") return std::make_unique<RelaxSearcher>();
  if (name == "dp") return std::make_unique<DpSearcher>();
  if (name == "ilp") return std::make_unique<IlpSearcher>();
  if (name == "mcmc") return std::make_unique<McmcSearcher>();
  if (name == "grid") return std::make_unique<GridSearcher>();
  if (name == "exhaustive") return std::make_unique<ExhaustiveSearcher>();
  ThrowInputError("command line", "--algo", name,
                  fmt::format("unknown algorithm (known: {}, all)", fmt::join(SearcherNames(), ", ")));
}

std::vector<std::string> ParseAlgorithmList(const std::string& list) {
  if (list == "all") return SearcherNames();
  std::vector<std::string> names;
  std::stringstream stream(list);
  std::string name;
  while (std::getline(stream, name, ',')) {
    if (name.empty()) continue;
    MakeSearcher(name);  // validates
    names.push_back(name);
  }
  if (names.empty()) ThrowInputError("command line", "--algo", "\"" + list + "\"", "names no algorithm");
  return names;
}

}  // namespace stratos
