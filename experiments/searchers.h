#pragma once
// The registry of searchers: the only place that knows every one of them (DESIGN.md §2).
#include <memory>
#include <string>
#include <vector>

#include "search/searcher.h"

namespace stratos {

// Names accepted by --algo, in the order `all` runs them.
std::vector<std::string> SearcherNames();

// Throws InputError("--algo = <name>: unknown algorithm (known: ...)") for an unknown name.
std::unique_ptr<Searcher> MakeSearcher(const std::string& name);

// Splits "relax,dp" / "all" into names, validating each (InputError naming the bad one).
std::vector<std::string> ParseAlgorithmList(const std::string& list);

}  // namespace stratos
