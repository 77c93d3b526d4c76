#pragma once
// Errors of stratos.
//
// InputError: bad user input (files, flags, plans). Its message names the file, the key path,
// the value and the rule broken, e.g.
//   "cluster.toml: node_group[1].gpus_per_node = 0: must be >= 1".
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
