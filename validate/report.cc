#include "validate/report.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>

#include "costmodel/error.h"

namespace stratos {

namespace {

std::string Cell(const nlohmann::json& value, int decimals) {
  if (value.is_null()) return "-";
  if (value.is_boolean()) return value.get<bool>() ? "yes" : "no";
  if (value.is_number_integer() || value.is_number_unsigned()) return value.dump();
  if (value.is_number_float()) {
    const double x = value.get<double>();
    if (std::isinf(x)) return x > 0 ? "inf" : "-inf";
    return fmt::format("{:.{}f}", x, decimals);
  }
  if (value.is_string()) return value.get<std::string>();
  return value.dump();
}

std::string CsvField(const nlohmann::json& value) {
  if (value.is_null()) return "";
  if (value.is_number_float()) {
    const double x = value.get<double>();
    if (std::isinf(x)) return x > 0 ? "inf" : "-inf";
    if (std::isnan(x)) return "nan";
    return fmt::format("{}", x);
  }
  std::string text = value.is_string() ? value.get<std::string>() : Cell(value, 0);
  if (text.find_first_of(",\"\n") == std::string::npos) return text;
  std::string quoted = "\"";
  for (char ch : text) {
    if (ch == '"') quoted += '"';
    quoted += ch;
  }
  return quoted + "\"";
}

}  // namespace

std::string ValidationReport::TableText() const {
  std::vector<std::vector<std::string>> cells;
  std::vector<size_t> widths;
  for (const ReportColumn& column : columns) widths.push_back(column.header.size());
  for (const nlohmann::json& row : rows) {
    std::vector<std::string> line;
    for (size_t c = 0; c < columns.size(); ++c) {
      const auto it = row.find(columns[c].key);
      line.push_back(it == row.end() ? "-" : Cell(*it, columns[c].decimals));
      widths[c] = std::max(widths[c], line.back().size());
    }
    cells.push_back(std::move(line));
  }
  std::string text;
  for (size_t c = 0; c < columns.size(); ++c)
    text += fmt::format("{}{:>{}}", c ? "  " : "", columns[c].header, widths[c]);
  text += "\n";
  for (const auto& line : cells) {
    for (size_t c = 0; c < line.size(); ++c)
      text += fmt::format("{}{:>{}}", c ? "  " : "", line[c], widths[c]);
    text += "\n";
  }
  return text;
}

std::string ValidationReport::Csv() const {
  std::string text;
  for (size_t c = 0; c < columns.size(); ++c) text += (c ? "," : "") + columns[c].key;
  text += "\n";
  for (const nlohmann::json& row : rows) {
    for (size_t c = 0; c < columns.size(); ++c) {
      const auto it = row.find(columns[c].key);
      text += (c ? "," : "") + (it == row.end() ? std::string() : CsvField(*it));
    }
    text += "\n";
  }
  return text;
}

nlohmann::json ValidationReport::ToJson() const {
  nlohmann::json column_list = nlohmann::json::array();
  for (const ReportColumn& column : columns)
    column_list.push_back({{"key", column.key}, {"header", column.header}});
  return {{"report", name},        {"title", title},     {"headline", headline},
          {"assumptions", assumptions}, {"summary", summary}, {"columns", column_list},
          {"rows", rows}};
}

std::string ValidationReport::Text() const {
  std::string text = title + "\n";
  if (!assumptions.empty()) {
    text += "assumptions:\n";
    for (const std::string& assumption : assumptions) text += "  - " + assumption + "\n";
  }
  text += "\n" + TableText() + "\n" + headline + "\n";
  return text;
}

double MeanAbsolutePercentError(const std::vector<double>& predicted,
                                const std::vector<double>& measured) {
  STRATOS_CHECK(predicted.size() == measured.size() && !predicted.empty(),
                "{} predictions, {} measurements", predicted.size(), measured.size());
  double sum = 0.0;
  for (size_t i = 0; i < predicted.size(); ++i) {
    STRATOS_CHECK(measured[i] != 0.0, "measured[{}] = 0", i);
    sum += std::abs(predicted[i] - measured[i]) / std::abs(measured[i]);
  }
  return 100.0 * sum / predicted.size();
}

}  // namespace stratos
