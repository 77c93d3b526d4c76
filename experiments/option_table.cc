#include "experiments/option_table.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <charconv>
#include <cmath>
#include <cstdlib>

#include "costmodel/error.h"

namespace stratos {

namespace {

[[noreturn]] void BadValue(const std::string& where, const std::string& name,
                           const std::string& value, const std::string& rule) {
  throw InputError(fmt::format("{}: {} = \"{}\": {}", where, name, value, rule));
}

template <class T>
T ParseInteger(const std::string& text, const std::string& where, const std::string& name) {
  T value{};
  const char* end = text.data() + text.size();
  const auto [ptr, ec] = std::from_chars(text.data(), end, value);
  if (ec == std::errc::result_out_of_range)
    BadValue(where, name, text, fmt::format("out of range ({} to {})",
                                            std::numeric_limits<T>::min(),
                                            std::numeric_limits<T>::max()));
  if (ec != std::errc() || ptr != end || text.empty()) BadValue(where, name, text, "must be an integer");
  return value;
}

}  // namespace

const OptionTable::Entry* OptionTable::Find(const std::string& name) const {
  for (const Entry& e : entries_)
    if (e.name == name) return &e;
  return nullptr;
}

bool OptionTable::Has(const std::string& name) const { return Find(name) != nullptr; }

void OptionTable::Int(const std::string& name, int* field, const std::string& doc) {
  entries_.push_back({name, "integer", doc, [field] { return nlohmann::json(*field); },
                      [field, name](const std::string& text, const std::string& where) {
                        *field = ParseInteger<int>(text, where, name);
                      }});
}

void OptionTable::Long(const std::string& name, long* field, const std::string& doc) {
  entries_.push_back({name, "integer", doc, [field] { return nlohmann::json(*field); },
                      [field, name](const std::string& text, const std::string& where) {
                        *field = ParseInteger<long>(text, where, name);
                      }});
}

void OptionTable::Double(const std::string& name, double* field, const std::string& doc) {
  entries_.push_back({name, "number", doc, [field] { return nlohmann::json(*field); },
                      [field, name](const std::string& text, const std::string& where) {
                        char* end = nullptr;
                        const double value = std::strtod(text.c_str(), &end);
                        if (text.empty() || end != text.c_str() + text.size())
                          BadValue(where, name, text, "must be a number");
                        if (!std::isfinite(value)) BadValue(where, name, text, "must be finite");
                        *field = value;
                      }});
}

void OptionTable::Bool(const std::string& name, bool* field, const std::string& doc) {
  entries_.push_back({name, "boolean", doc, [field] { return nlohmann::json(*field); },
                      [field, name](const std::string& text, const std::string& where) {
                        if (text == "true" || text == "1") {
                          *field = true;
                        } else if (text == "false" || text == "0") {
                          *field = false;
                        } else {
                          BadValue(where, name, text, "must be true or false");
                        }
                      }});
}

void OptionTable::Text(const std::string& name, std::function<std::string()> get,
                       std::function<void(const std::string&, const std::string&)> set,
                       const std::string& doc) {
  entries_.push_back({name, "text", doc, [get] { return nlohmann::json(get()); }, std::move(set)});
}

void OptionTable::Set(const std::string& name, const std::string& value, const std::string& where) {
  const Entry* entry = Find(name);
  if (entry == nullptr)
    BadValue(where, name, value,
             fmt::format("unknown option (known: {})", fmt::join(Names(), ", ")));
  entry->set(value, where);
}

nlohmann::json OptionTable::Values() const {
  nlohmann::json out = nlohmann::json::object();
  for (const Entry& e : entries_) out[e.name] = e.get();
  return out;
}

std::vector<std::string> OptionTable::Help() const {
  std::vector<std::string> lines;
  for (const Entry& e : entries_)
    lines.push_back(fmt::format("{} ({}, default {}): {}", e.name, e.type, e.get().dump(), e.doc));
  return lines;
}

std::vector<std::string> OptionTable::Names() const {
  std::vector<std::string> names;
  for (const Entry& e : entries_) names.push_back(e.name);
  return names;
}

std::pair<std::string, std::string> SplitAssignment(const std::string& text,
                                                    const std::string& where) {
  const size_t eq = text.find('=');
  if (eq == std::string::npos || eq == 0)
    throw InputError(fmt::format("{}: \"{}\": must be name=value, e.g. relax.iterations=60", where,
                                 text));
  return {text.substr(0, eq), text.substr(eq + 1)};
}

}  // namespace stratos
