#include "experiments/cli_rules.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <charconv>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <system_error>
#include <optional>

namespace stratos::cli {

namespace {

// The message a validator returns for a broken rule (see the header).
std::string Broken(const std::string& value, const std::string& rule) {
  return fmt::format("= {}: {}", value, rule);
}

// A finite number, or nullopt.
std::optional<double> ParseNumber(const std::string& text) {
  if (text.empty()) return std::nullopt;
  char* end = nullptr;
  const double value = std::strtod(text.c_str(), &end);
  if (end != text.c_str() + text.size() || !std::isfinite(value)) return std::nullopt;
  return value;
}

std::string Number(double value) { return fmt::format("{}", value); }

}  // namespace

CLI::Validator IntIn(long long min, long long max) {
  const bool bounded = max != INT_MAX;
  const std::string rule = bounded ? fmt::format("must be in [{}, {}]", min, max)
                                   : fmt::format("must be >= {}", min);
  return CLI::Validator(
      [min, max, bounded, rule](std::string& text) -> std::string {
        long long value = 0;
        const char* end = text.data() + text.size();
        const auto [ptr, error] = std::from_chars(text.data(), end, value);
        if (error == std::errc::result_out_of_range)
          return Broken(text, bounded ? rule : fmt::format("must be <= {}", max));
        if (error != std::errc() || ptr != end || text.empty())
          return Broken(text, "must be an integer");
        if (value < min) return Broken(text, rule);
        if (value > max) return Broken(text, bounded ? rule : fmt::format("must be <= {}", max));
        return "";
      },
      bounded ? fmt::format("in [{}, {}]", min, max) : fmt::format(">= {}", min));
}

CLI::Validator IntAtLeast(long long min) { return IntIn(min, INT_MAX); }

CLI::Validator NumberAbove(double min) {
  return CLI::Validator(
      [min](std::string& text) -> std::string {
        const std::optional<double> value = ParseNumber(text);
        if (!value) return Broken(text, "must be a finite number");
        if (!(*value > min)) return Broken(text, fmt::format("must be > {}", Number(min)));
        return "";
      },
      fmt::format("> {}", Number(min)));
}

CLI::Validator NumberIn(double min, double max) {
  const std::string rule = std::isinf(max)
                               ? fmt::format("must be >= {}", Number(min))
                               : fmt::format("must be in [{}, {}]", Number(min), Number(max));
  return CLI::Validator(
      [min, max, rule](std::string& text) -> std::string {
        const std::optional<double> value = ParseNumber(text);
        if (!value) return Broken(text, "must be a finite number");
        if (!(*value >= min && *value <= max)) return Broken(text, rule);
        return "";
      },
      std::isinf(max) ? fmt::format(">= {}", Number(min))
                      : fmt::format("in [{}, {}]", Number(min), Number(max)));
}

CLI::Validator NumberInterval(double min, double max, const std::string& interval) {
  const bool open_min = interval.front() == '(';
  const bool open_max = interval.back() == ')';
  return CLI::Validator(
      [=](std::string& text) -> std::string {
        const std::optional<double> value = ParseNumber(text);
        if (!value) return Broken(text, "must be a finite number");
        const bool above = open_min ? *value > min : *value >= min;
        const bool below = open_max ? *value < max : *value <= max;
        if (!above || !below) return Broken(text, "must be in " + interval);
        return "";
      },
      "in " + interval);
}

CLI::Validator OutputDirectory() {
  return CLI::Validator(
      [](std::string& text) -> std::string {
        if (text.empty()) return Broken("\"\"", "must name a directory");
        std::error_code error;
        std::filesystem::path path = std::filesystem::weakly_canonical(text, error);
        if (error) path = std::filesystem::absolute(text, error).lexically_normal();
        if (!path.empty() && path == path.root_path())
          return Broken(text, "must be a directory other than the filesystem root");
        return "";
      },
      "DIR");
}

CLI::Validator OneOf(const std::vector<std::string>& names) {
  std::vector<std::string> quoted;
  for (const std::string& name : names) quoted.push_back('"' + name + '"');
  const std::string rule = fmt::format("must be one of {}", fmt::join(quoted, ", "));
  return CLI::Validator(
      [names, rule](std::string& text) -> std::string {
        for (const std::string& name : names)
          if (text == name) return "";
        return Broken('"' + text + '"', rule);
      },
      fmt::format("{{{}}}", fmt::join(names, ",")));
}

std::string ParseErrorMessage(const CLI::ParseError& error) {
  std::string text = error.what();
  // "<flag>: = <value>: <rule>" from the validators above -> "<flag> = <value>: <rule>".
  const size_t at = text.find(": = ");
  if (dynamic_cast<const CLI::ValidationError*>(&error) != nullptr && at != std::string::npos)
    text.replace(at, 4, " = ");
  return text;
}

}  // namespace stratos::cli
