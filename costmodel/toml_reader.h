#pragma once
// Strict reading of TOML tables, with the file and key path in every error. Used only by .cc
// files of libraries that link toml++ privately (costmodel's model_io.cc and cluster_io.cc,
// interop's torchtitan.cc): it includes <toml++/toml.h>, so no public header may include it.
//
// Every error is an InputError; rule violations read "<file>: <key path> = <value>: <rule>",
// e.g. "cluster.toml: node_group[1].gpus_per_node = 0: must be >= 1" (strings are shown in
// double quotes, tables as {table}).
#include <toml++/toml.h>

#include <climits>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "costmodel/checked_number.h"

namespace stratos {

// Parses `text` as TOML; `where` (a file name) names the source in errors. Throws InputError
// "<where>:<line>:<column>: TOML parse error: <description>" on a syntax error.
toml::table ParseTomlText(std::string_view text, const std::string& where);

// Typed, range-checked access to the keys of one TOML table. `path` is the table's key path
// ("" for the root, "model", "device[0]", ...), prefixed to keys in errors; `where` is the file.
// Optional getters return nullopt for an absent key; Require* getters throw InputError
// "<where>: <key path>: missing required key" for one. A present key of the wrong type or out of
// range throws InputError "<where>: <key path> = <value>: <rule>". The reader keeps a reference
// to `table`, which must outlive it.
class TomlTableReader {
 public:
  TomlTableReader(const toml::table& table, std::string path, std::string where);

  // "<path>.<key>", or `key` for the root table.
  std::string KeyPath(std::string_view key) const;
  // The node at `key`, or nullptr when absent.
  const toml::node* Find(std::string_view key) const;
  // The file name given at construction.
  const std::string& Where() const { return where_; }

  // Throws InputError "<where>: <key path>: unknown key (known keys: a, b, ...)" for the first
  // key of the table not in `known`.
  void AllowOnly(const std::vector<std::string>& known) const;

  // Throws InputError "<where>: <key path> = <value>: <rule>" (value "(absent)" for a key that
  // is not there, e.g. a rule between a default and another key).
  [[noreturn]] void Fail(std::string_view key, const std::string& rule) const;
  // Throws InputError "<where>: <key path>: missing required key".
  [[noreturn]] void Missing(std::string_view key) const;

  // An integer in [min, max]; otherwise throws with rule "must be an integer",
  // "must be >= <min>" or "must be <= <max>".
  std::optional<long long> Int(std::string_view key, long long min,
                               long long max = INT_MAX) const;
  // As Int, but the key is required; the value as an int.
  int RequireInt(std::string_view key, long long min, long long max = INT_MAX) const;

  // An integer or float, as a double; otherwise throws with rule "must be a number", and with
  // "must be a finite number" for inf and nan (costmodel/checked_number.h).
  std::optional<double> Number(std::string_view key) const;
  // As Number, also >= `min` (inclusive; NaN fails), else rule "must be >= <min>".
  std::optional<double> Number(std::string_view key, double min) const;
  // As Number, but the key is required.
  double RequireNumber(std::string_view key) const;
  // As Number(key, min), but the key is required.
  double RequireNumber(std::string_view key, double min) const;
  // A required number > 0, else rule "must be > 0".
  double Positive(std::string_view key) const;
  // An optional number >= 0, else rule "must be >= 0".
  std::optional<double> NonNegative(std::string_view key) const;
  // An optional number in (0, 1], default 1; else rule "must be in (0, 1]".
  double Fraction(std::string_view key) const;

  // A string; otherwise throws with rule "must be a string".
  std::optional<std::string> String(std::string_view key) const;
  // As String, but the key is required.
  std::string RequireString(std::string_view key) const;

  // A boolean; otherwise throws with rule "must be a boolean (true or false)".
  std::optional<bool> Bool(std::string_view key) const;

  // Exactly one of two keys (e.g. memory_GB / memory_GiB): returns 0 or 1, the index of the one
  // present, or -1 when neither is and !required. Both present: throws at `second` with rule
  // "give only one of <first>, <second>"; neither and required: throws InputError
  // "<where>: <first path> | <second path>: missing required key (give one)".
  int OneOf(std::string_view first, std::string_view second, bool required) const;

 private:
  // Where the value at `key` (present) came from, for costmodel/checked_number.h.
  NumberSource Source(std::string_view key) const;

  const toml::table& table_;
  std::string path_;
  std::string where_;
};

}  // namespace stratos
