#include "costmodel/toml_reader.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <sstream>
#include <utility>

#include "costmodel/checked_number.h"
#include "costmodel/error.h"

namespace stratos {

namespace {

// The value as written in the file, for errors.
std::string Repr(const toml::node& node) {
  if (node.is_table()) return "{table}";
  if (node.is_string()) {  // double quotes, as written in the file (toml++ prints 'single')
    std::string quoted = "\"";
    for (char c : node.as_string()->get()) {
      if (c == '"' || c == '\\') quoted += '\\';
      quoted += c;
    }
    return quoted + "\"";
  }
  std::ostringstream out;
  node.visit([&out](const auto& value) { out << value; });
  return out.str();
}

}  // namespace

toml::table ParseTomlText(std::string_view text, const std::string& where) {
  try {
    return toml::parse(text, where);
  } catch (const toml::parse_error& error) {
    // TOML++ refuses a number that does not fit 64 bits while parsing, before any key is
    // known: the line it is on, quoted, shows the key and the value.
    const auto line_number = error.source().begin.line;
    std::string_view line = text;
    for (toml::source_index i = 1; i < line_number && !line.empty(); ++i) {
      const size_t newline = line.find('\n');
      line = newline == std::string_view::npos ? std::string_view() : line.substr(newline + 1);
    }
    line = line.substr(0, line.find('\n'));
    while (!line.empty() && (line.back() == '\r' || line.back() == ' ')) line.remove_suffix(1);
    throw InputError(fmt::format("{}:{}:{}: TOML parse error: {}{}", where, line_number,
                                 error.source().begin.column, error.description(),
                                 line.empty() || line.size() > 120
                                     ? std::string()
                                     : fmt::format(" (in `{}`)", line)));
  }
}

TomlTableReader::TomlTableReader(const toml::table& table, std::string path, std::string where)
    : table_(table), path_(std::move(path)), where_(std::move(where)) {}

std::string TomlTableReader::KeyPath(std::string_view key) const {
  return path_.empty() ? std::string(key) : fmt::format("{}.{}", path_, key);
}

const toml::node* TomlTableReader::Find(std::string_view key) const { return table_.get(key); }

void TomlTableReader::AllowOnly(const std::vector<std::string>& known) const {
  for (const auto& [key, node] : table_) {
    bool ok = false;
    for (const std::string& k : known) ok = ok || k == key.str();
    if (!ok) {
      throw InputError(fmt::format("{}: {}: unknown key (known keys: {})", where_,
                                   KeyPath(key.str()), fmt::join(known, ", ")));
    }
  }
}

void TomlTableReader::Fail(std::string_view key, const std::string& rule) const {
  const toml::node* node = Find(key);
  ThrowInputError(where_, KeyPath(key), node != nullptr ? Repr(*node) : "(absent)", rule);
}

NumberSource TomlTableReader::Source(std::string_view key) const {
  return {where_, KeyPath(key), Repr(*Find(key))};
}

void TomlTableReader::Missing(std::string_view key) const {
  throw InputError(fmt::format("{}: {}: missing required key", where_, KeyPath(key)));
}

std::optional<long long> TomlTableReader::Int(std::string_view key, long long min,
                                              long long max) const {
  const toml::node* node = Find(key);
  if (node == nullptr) return std::nullopt;
  if (!node->is_integer()) Fail(key, "must be an integer");
  const long long value = CheckedInteger<long long>(node->as_integer()->get(), Source(key));
  if (value < min) Fail(key, fmt::format("must be >= {}", min));
  if (value > max) Fail(key, fmt::format("must be <= {}", max));
  return value;
}

int TomlTableReader::RequireInt(std::string_view key, long long min, long long max) const {
  if (Find(key) == nullptr) Missing(key);
  return static_cast<int>(*Int(key, min, max));
}

std::optional<double> TomlTableReader::Number(std::string_view key) const {
  const toml::node* node = Find(key);
  if (node == nullptr) return std::nullopt;
  if (!node->is_number()) Fail(key, "must be a number");
  if (node->is_integer()) return CheckedInteger<double>(node->as_integer()->get(), Source(key));
  return CheckedFloat<double>(node->as_floating_point()->get(), Source(key));
}

std::optional<double> TomlTableReader::Number(std::string_view key, double min) const {
  const std::optional<double> value = Number(key);
  if (value && !(*value >= min)) Fail(key, fmt::format("must be >= {}", min));
  return value;
}

double TomlTableReader::RequireNumber(std::string_view key) const {
  if (Find(key) == nullptr) Missing(key);
  return *Number(key);
}

double TomlTableReader::RequireNumber(std::string_view key, double min) const {
  if (Find(key) == nullptr) Missing(key);
  return *Number(key, min);
}

double TomlTableReader::Positive(std::string_view key) const {
  const double value = RequireNumber(key);
  if (!(value > 0)) Fail(key, "must be > 0");
  return value;
}

std::optional<double> TomlTableReader::NonNegative(std::string_view key) const {
  const std::optional<double> value = Number(key);
  if (value && !(*value >= 0)) Fail(key, "must be >= 0");
  return value;
}

double TomlTableReader::Fraction(std::string_view key) const {
  const double value = Number(key).value_or(1.0);
  if (!(value > 0 && value <= 1)) Fail(key, "must be in (0, 1]");
  return value;
}

std::optional<std::string> TomlTableReader::String(std::string_view key) const {
  const toml::node* node = Find(key);
  if (node == nullptr) return std::nullopt;
  if (!node->is_string()) Fail(key, "must be a string");
  return node->as_string()->get();
}

std::string TomlTableReader::RequireString(std::string_view key) const {
  if (Find(key) == nullptr) Missing(key);
  return *String(key);
}

std::optional<bool> TomlTableReader::Bool(std::string_view key) const {
  const toml::node* node = Find(key);
  if (node == nullptr) return std::nullopt;
  if (!node->is_boolean()) Fail(key, "must be a boolean (true or false)");
  return node->as_boolean()->get();
}

int TomlTableReader::OneOf(std::string_view first, std::string_view second, bool required) const {
  const bool has_first = Find(first) != nullptr;
  const bool has_second = Find(second) != nullptr;
  if (has_first && has_second) Fail(second, fmt::format("give only one of {}, {}", first, second));
  if (!has_first && !has_second) {
    if (!required) return -1;
    throw InputError(fmt::format("{}: {} | {}: missing required key (give one)", where_,
                                 KeyPath(first), KeyPath(second)));
  }
  return has_first ? 0 : 1;
}

}  // namespace stratos
