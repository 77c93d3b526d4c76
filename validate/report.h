#pragma once
// A validation report: the cost model's predictions beside published measurements, as a table
// (printed, and written as CSV), a headline figure and JSON with the rows, the summary figures
// and every assumption made to turn a published row into a Problem and a Plan.
#include <nlohmann/json.hpp>

#include <string>
#include <vector>

namespace stratos {

// One table column: `key` of the row objects, its header, and the decimals numbers print with.
struct ReportColumn {
  std::string key;
  std::string header;
  int decimals = 2;
};

struct ValidationReport {
  std::string name;      // CLI name, e.g. "megatron-h100"
  std::string title;     // one line: what is compared with what
  std::string headline;  // one line: the headline figure(s)
  std::vector<std::string> assumptions;  // one sentence each, with sources
  std::vector<ReportColumn> columns;     // printed columns, in order
  nlohmann::json rows = nlohmann::json::array();     // one object per table row
  nlohmann::json summary = nlohmann::json::object();  // the headline figures, machine-readable

  // The table as aligned text: numbers with the column's decimals, strings as they are,
  // null as "-", booleans as yes/no.
  std::string TableText() const;
  // The rows as CSV with a header of the column keys; numbers at full precision, strings
  // quoted when they hold a comma or a quote.
  std::string Csv() const;
  // {"report", "title", "headline", "assumptions", "summary", "columns", "rows"}.
  nlohmann::json ToJson() const;
  // Title, assumptions, table and headline, for a terminal.
  std::string Text() const;
};

// Mean absolute percentage error of predicted vs measured, in percent. Throws InternalError if
// the sizes differ, are empty, or a measured value is zero.
double MeanAbsolutePercentError(const std::vector<double>& predicted,
                                const std::vector<double>& measured);

}  // namespace stratos
