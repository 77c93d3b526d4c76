#include "calibrate/csv_reading.h"

#include <fmt/format.h>

#include <cerrno>
#include <cmath>
#include <cstdlib>

namespace stratos {

void FailCell(const CsvCell& cell, const std::string& value, const std::string& rule) {
  throw InputError(
      fmt::format("{}:{}: {} = {}: {}", cell.file, cell.line, cell.column, value, rule));
}

double ParseFinite(const CsvCell& cell, const std::string& text) {
  errno = 0;
  char* end = nullptr;
  const double value = std::strtod(text.c_str(), &end);
  if (text.empty() || end != text.c_str() + text.size() || errno == ERANGE ||
      !std::isfinite(value)) {
    FailCell(cell, fmt::format("\"{}\"", text), "must be a finite number");
  }
  return value;
}

double ParsePositive(const CsvCell& cell, const std::string& text) {
  const double value = ParseFinite(cell, text);
  if (!(value > 0)) FailCell(cell, text, "must be > 0");
  return value;
}

double ParseNonNegative(const CsvCell& cell, const std::string& text) {
  const double value = ParseFinite(cell, text);
  if (value < 0) FailCell(cell, text, "must be >= 0");
  return value;
}

std::string CsvErrorMessage(const std::string& file, const io::error::base& error) {
  const auto* line = dynamic_cast<const io::error::with_file_line*>(&error);
  const auto* column = dynamic_cast<const io::error::with_column_name*>(&error);
  const auto* content = dynamic_cast<const io::error::with_column_content*>(&error);
  std::string rule = error.what();
  if (dynamic_cast<const io::error::no_digit*>(&error) != nullptr) rule = "must be an integer";
  if (dynamic_cast<const io::error::integer_overflow*>(&error) != nullptr ||
      dynamic_cast<const io::error::integer_underflow*>(&error) != nullptr) {
    rule = "integer out of range";
  }
  if (dynamic_cast<const io::error::integer_must_be_positive*>(&error) != nullptr) {
    rule = "must be >= 0";
  }
  if (dynamic_cast<const io::error::too_few_columns*>(&error) != nullptr) {
    rule = "fewer columns than the header";
  }
  if (dynamic_cast<const io::error::too_many_columns*>(&error) != nullptr) {
    rule = "more columns than the header";
  }
  if (line != nullptr && column != nullptr && content != nullptr) {
    return fmt::format("{}:{}: {} = \"{}\": {}", file, line->file_line, column->column_name,
                       content->column_content, rule);
  }
  if (line != nullptr) return fmt::format("{}:{}: {}", file, line->file_line, rule);
  return fmt::format("{}: header: {}", file, rule);  // missing, extra or duplicated column
}

}  // namespace stratos
