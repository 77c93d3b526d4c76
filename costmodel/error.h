#pragma once
// Errors of stratos.
//
// InputError: bad user input (files, flags, plans, options). Its message names the file, the key
// path, the value and the rule broken, e.g.
//   "cluster.toml: node_group[1].gpus_per_node = 0: must be >= 1",
// and options by the names users write ("relax.iterations = 0: must be >= 1").
// InternalError: a broken invariant inside stratos (a bug), thrown by STRATOS_CHECK.
#include <fmt/format.h>

#include <stdexcept>
#include <string>

namespace stratos {

class InputError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

class InternalError : public std::logic_error {
 public:
  using std::logic_error::logic_error;
};

// Throws InputError("<where>: <key> = <value>: <rule>").
template <typename Value>
[[noreturn]] void ThrowInputError(const std::string& where, const std::string& key,
                                  const Value& value, const std::string& rule) {
  throw InputError(fmt::format("{}: {} = {}: {}", where, key, value, rule));
}

// Throws InputError("<name> = <value>: <rule>") for an option named as users write it in a
// spec or with --option ("relax.iterations", "space.max_stages"); whoever knows where the value
// came from prefixes that ("command line: ", "spec.toml: searcher[0].options: ").
template <typename Value>
[[noreturn]] void ThrowOptionError(const std::string& name, const Value& value,
                                   const std::string& rule) {
  throw InputError(fmt::format("{} = {}: {}", name, value, rule));
}

}  // namespace stratos

// Invariant check that throws InternalError with file:line and a message (never assert()).
#define STRATOS_CHECK(cond, ...)                                                        \
  do {                                                                                  \
    if (!(cond)) {                                                                      \
      throw ::stratos::InternalError(fmt::format("{}:{}: check failed: {}: {}", __FILE__, \
                                                 __LINE__, #cond,                       \
                                                 fmt::format(__VA_ARGS__)));            \
    }                                                                                   \
  } while (0)
