#pragma once
// Strict reading of JSON input files (plans, HuggingFace config.json, run options, profile
// metadata), with the file and the key path in every error (DESIGN.md §3):
//   "plan.json: stages[0].data_parallel = 4294967296: must be an integer in [-2147483648, 2147483647]"
//   "config.json: vocab_size = 1e400: must be a finite number".
// Numbers are converted by costmodel/checked_number.h, the same rules as the TOML reader's.
#include <nlohmann/json.hpp>

#include <set>
#include <string>
#include <string_view>

#include "costmodel/checked_number.h"

namespace stratos {

// Parses `text` as JSON; `where` (a file name) names the source in errors. Throws InputError
// "<where>: JSON parse error: <description>" on a syntax error, and
// "<where>: <key path> = <number>: must be a finite number" for a number too large for a
// double (nlohmann-json refuses it while parsing; the key path says where it was).
nlohmann::json ParseJsonText(std::string_view text, const std::string& where);

// Reads and parses the file at `path`. Throws InputError "<path>: cannot open <what>" when it
// cannot be read, else as ParseJsonText.
nlohmann::json ReadJsonInputFile(const std::string& path, const std::string& what = "file");

// `value` converted to T (an integer or floating-point type) by the rules of
// costmodel/checked_number.h; a value that is not a number throws with rule "must be an integer"
// (integer T) or "must be a number". `where` is the file, `key` the key path.
template <class T>
T JsonNumber(const nlohmann::json& value, const std::string& where, const std::string& key) {
  const NumberSource source{where, key, value.dump()};
  if (value.is_number_unsigned())
    return CheckedInteger<T>(value.get<unsigned long long>(), source);
  if (value.is_number_integer()) return CheckedInteger<T>(value.get<long long>(), source);
  if (value.is_number_float()) return CheckedFloat<T>(value.get<double>(), source);
  ThrowNumberError(source, std::is_integral_v<T> ? "must be an integer" : "must be a number");
}

// The keys of one JSON object, read strictly: a missing required key, a value of the wrong type
// or out of its type's range, and (RejectUnknown) a key nobody read are InputErrors naming the
// file and the key path. `path` is the object's key path ("" for the top level, "stages[0]"),
// prefixed to keys in errors. The reader keeps a reference to `object`, which must outlive it.
class JsonObjectReader {
 public:
  // Throws InputError "<where>: <path> = <value>: must be a JSON object" if it is not one.
  JsonObjectReader(const nlohmann::json& object, std::string where, std::string path);

  // "<path>.<key>", or `key` at the top level.
  std::string Key(const std::string& key) const;
  const std::string& Where() const { return where_; }
  bool Has(const std::string& key) const { return object_.contains(key); }

  // The value at `key` (marked as read). Throws "<where>: <key path>: missing required key".
  const nlohmann::json& Get(const std::string& key);
  // The number at `key` as T (JsonNumber).
  template <class T>
  T Number(const std::string& key) {
    return JsonNumber<T>(Get(key), where_, Key(key));
  }
  int Int(const std::string& key) { return Number<int>(key); }
  double Double(const std::string& key) { return Number<double>(key); }
  std::string String(const std::string& key);
  bool Bool(const std::string& key);

  // Throws "<where>: <key path>: unknown key (known keys: ...)" for the first key not read and
  // not in `also_allowed`.
  void RejectUnknown(const std::set<std::string>& also_allowed = {}) const;

 private:
  const nlohmann::json& object_;
  std::string where_;
  std::string path_;
  std::set<std::string> seen_;
};

}  // namespace stratos
