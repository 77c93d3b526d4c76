#pragma once
// Checked conversion of a number read from an input file (JSON or TOML) to the C++ type that
// holds it: the one place where "does this value fit" is decided, used by the JSON reader
// (costmodel/json_reader.h) and the TOML reader (costmodel/toml_reader.h).
//
// A value that does not fit throws InputError "<where>: <key> = <text>: <rule>", with rule
//   "must be a finite number"                 inf or nan for a floating-point field,
//   "must be an integer"                      a fraction for an integer field,
//   "must be >= 0"                            a negative value for an unsigned field,
//   "must be an integer in [<min>, <max>]"    an integer outside the field type's range.
// Range rules of the field itself (">= 1", "in (0, 1]") stay with the reader that knows them.
#include <fmt/format.h>

#include <cmath>
#include <limits>
#include <string>
#include <type_traits>

#include "costmodel/error.h"

namespace stratos {

// Where a number came from, for errors: the file, the key path and the value as written.
struct NumberSource {
  std::string where;
  std::string key;
  std::string text;
};

[[noreturn]] inline void ThrowNumberError(const NumberSource& source, const std::string& rule) {
  ThrowInputError(source.where, source.key, source.text, rule);
}

// The range rule of an integer type T, "must be an integer in [min, max]".
template <class T>
std::string IntegerRangeRule() {
  return fmt::format("must be an integer in [{}, {}]", std::numeric_limits<T>::min(),
                     std::numeric_limits<T>::max());
}

// An integer value (as the parser stored it: signed or unsigned 64 bits) converted to T.
template <class T, class V>
T CheckedInteger(V value, const NumberSource& source) {
  static_assert(std::is_integral_v<V>, "CheckedInteger converts an integer");
  if constexpr (std::is_floating_point_v<T>) {
    return static_cast<T>(value);
  } else {
    if constexpr (std::is_signed_v<V>) {
      if (value < 0) {
        if constexpr (std::is_unsigned_v<T>) ThrowNumberError(source, "must be >= 0");
        if (static_cast<long long>(value) < static_cast<long long>(std::numeric_limits<T>::min()))
          ThrowNumberError(source, IntegerRangeRule<T>());
        return static_cast<T>(value);
      }
    }
    if (static_cast<unsigned long long>(value) >
        static_cast<unsigned long long>(std::numeric_limits<T>::max()))
      ThrowNumberError(source, IntegerRangeRule<T>());
    return static_cast<T>(value);
  }
}

// A floating-point value (as parsed) converted to T. An integer field takes no floating-point
// value: a fraction, an exponent ("1e3", "512.0") or an integer beyond 64 bits (which parsers
// store as floating point) is refused with the rule that it breaks.
template <class T>
T CheckedFloat(double value, const NumberSource& source) {
  if constexpr (std::is_floating_point_v<T>) {
    if (!std::isfinite(value)) ThrowNumberError(source, "must be a finite number");
    if (std::abs(value) > static_cast<double>(std::numeric_limits<T>::max()))
      ThrowNumberError(source, fmt::format("must be a finite number of magnitude <= {}",
                                           std::numeric_limits<T>::max()));
    return static_cast<T>(value);
  } else {
    const bool huge_integer = std::isfinite(value) && std::trunc(value) == value &&
                              std::abs(value) >= 0x1.0p63;
    if (!huge_integer) ThrowNumberError(source, "must be an integer");
    if (std::is_unsigned_v<T> && value < 0) ThrowNumberError(source, "must be >= 0");
    ThrowNumberError(source, IntegerRangeRule<T>());
  }
}

}  // namespace stratos
